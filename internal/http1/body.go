package http1

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
)

// maxPostHandlerReadBytes is how much of a request body the server reads
// and discards after the handler, to keep the connection; past it the
// connection is closed instead. It is net/http's figure.
const maxPostHandlerReadBytes = 256 << 10

// Chunked-encoding limits, as net/http's chunked reader has them.
const (
	maxChunkLine   = minReadBuf // a chunk-size line, CRLF included
	maxChunkExcess = 16 << 10   // overhead beyond 16 bytes a chunk plus twice its data
)

var (
	errChunkBareLF     = errors.New("http1: chunked line ends with bare LF")
	errChunkCR         = errors.New("http1: invalid CR in chunked line")
	errChunkLineLong   = errors.New("http1: chunk-size line too long")
	errChunkMalformed  = errors.New("http1: malformed chunked encoding")
	errChunkEmptySize  = errors.New("http1: empty hex number for chunk length")
	errChunkBadSize    = errors.New("http1: invalid byte in chunk length")
	errChunkTooLarge   = errors.New("http1: chunk length too large")
	errChunkExcess     = errors.New("http1: chunked encoding contains too much non-data")
	errTrailerEOF      = errors.New("http1: unexpected EOF reading trailer")
	errTrailerTooLong  = errors.New("http1: suspiciously long trailer after chunked body")
	errBodyAfterHijack = errors.New("http1: body read after the connection was hijacked")
)

// body is a request body. It is made per request, because a body may
// outlive its handler (an http.Transport still writing it upstream) and
// must then fail rather than read the next request's bytes. Its Read and
// Close behave as net/http's server body's: Close after a handler reads up
// to 256 KiB more to find the end, so that the connection can serve
// another request.
type body struct {
	rr       *requestReader
	resp     *response // for the automatic 100 Continue
	expect   bool      // the client sent "Expect: 100-continue"
	chunked  bool
	remain   int64 // Content-Length: bytes left
	closing  bool  // the connection closes after this request
	trailer  *http.Header
	ctx      *requestContext
	armOnEOF bool // arm the client-gone watch when the end is read
	hijacked atomic.Bool

	expectClosed atomic.Bool // Close was called on the handler's body
	expectEOF    atomic.Bool // the handler read to the end

	mu         sync.Mutex
	sawEOF     bool
	closed     bool
	earlyClose bool // Close gave up before the end

	// chunked state
	n        uint64 // unread bytes of the current chunk
	err      error  // sticky
	checkEnd bool   // the CRLF after a chunk's data is due
	excess   int64
}

// Read reads the body. With "Expect: 100-continue" the first Read first
// answers "100 Continue", unless the handler already wrote a response.
func (b *body) Read(p []byte) (int, error) {
	if !b.expect {
		return b.innerRead(p)
	}
	if b.expectClosed.Load() {
		return 0, http.ErrBodyReadAfterClose
	}
	if w := b.resp; w.canWriteContinue.Load() {
		w.writeContinueMu.Lock()
		if w.canWriteContinue.Load() {
			_, _ = w.c.bufw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
			_ = w.c.bufw.Flush()
			w.canWriteContinue.Store(false)
		}
		w.writeContinueMu.Unlock()
	}
	n, err := b.innerRead(p)
	if err == io.EOF {
		b.expectEOF.Store(true)
	}
	return n, err
}

func (b *body) expectSawEOF() bool { return b.expectEOF.Load() }

// Close closes the body as the handler sees it; see innerClose.
func (b *body) Close() error {
	if b.expect {
		b.expectClosed.Store(true)
	}
	return b.innerClose()
}

// innerReader reads the body past the 100-continue logic, as net/http's
// server reads what a handler left.
type innerReader struct{ b *body }

func (r innerReader) Read(p []byte) (int, error) { return r.b.innerRead(p) }

func (b *body) innerRead(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	return b.readLocked(p)
}

func (b *body) readLocked(p []byte) (n int, err error) {
	if b.sawEOF {
		return 0, io.EOF
	}
	if b.hijacked.Load() {
		return 0, errBodyAfterHijack
	}
	if b.chunked {
		n, err = b.readChunked(p)
		if err == io.EOF {
			b.sawEOF = true
			if e := b.readTrailer(); e != nil {
				// Nothing more may be read from this body or connection.
				err = e
				b.sawEOF = false
				b.closed = true
			}
		}
	} else {
		if int64(len(p)) > b.remain {
			p = p[:b.remain]
		}
		if len(p) == 0 {
			err = io.EOF
		} else {
			n, err = b.rr.in.read(p)
			b.remain -= int64(n)
		}
		switch {
		case err == io.EOF && b.remain > 0:
			// As net/http: the body is over (later reads say EOF), but
			// this read says it ended early.
			b.sawEOF = true
			err = io.ErrUnexpectedEOF
		case err == io.EOF:
			b.sawEOF = true
		case err == nil && n > 0 && b.remain == 0:
			err = io.EOF
			b.sawEOF = true
		}
	}
	if b.sawEOF && b.armOnEOF {
		b.armOnEOF = false
		b.resp.c.arm(b.ctx)
	}
	return n, err
}

// unreadSize returns the bytes left of a Content-Length body, or -1.
func (b *body) unreadSizeLocked() int64 {
	if b.chunked {
		return -1
	}
	return b.remain
}

// innerClose ends the body: after a handler it reads up to 256 KiB more
// to find the end, so that the connection can be reused, and otherwise
// marks it closed early.
func (b *body) innerClose() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	var err error
	switch {
	case b.sawEOF:
	case b.hijacked.Load():
	case !b.chunked && b.closing:
		// The connection closes next: no point in reading the rest.
	case !b.chunked && b.remain > maxPostHandlerReadBytes:
		b.earlyClose = true
	default:
		var n int64
		n, err = io.CopyN(io.Discard, lockedBody{b}, maxPostHandlerReadBytes)
		if err == io.EOF {
			err = nil
		}
		if n == maxPostHandlerReadBytes {
			b.earlyClose = true
		}
	}
	b.closed = true
	return err
}

func (b *body) didEarlyClose() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.earlyClose
}

// lockedBody reads a body whose lock the caller holds.
type lockedBody struct{ b *body }

func (l lockedBody) Read(p []byte) (int, error) {
	if l.b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	return l.b.readLocked(p)
}

// readChunked decodes chunked data into p, as net/http's chunkedReader
// does: it returns what it has rather than block for the next chunk's
// head, and io.EOF at the zero-size chunk.
func (b *body) readChunked(p []byte) (n int, err error) {
	in := &b.rr.in
	for b.err == nil {
		if b.checkEnd {
			if n > 0 && in.buffered() < 2 {
				break
			}
			if e := in.fillTo(2, in.cap()); e != nil && in.buffered() < 2 {
				if e == io.EOF {
					e = io.ErrUnexpectedEOF
				}
				b.err = e
				break
			}
			if c := in.bytes(); c[0] != '\r' || c[1] != '\n' {
				b.err = errChunkMalformed
				break
			}
			in.discard(2)
			b.checkEnd = false
		}
		if b.n == 0 {
			if n > 0 && bytes.IndexByte(in.bytes(), '\n') < 0 {
				break
			}
			b.beginChunk()
			continue
		}
		if len(p) == 0 {
			break
		}
		rbuf := p
		if uint64(len(rbuf)) > b.n {
			rbuf = rbuf[:b.n]
		}
		n0, e := in.read(rbuf)
		n += n0
		p = p[n0:]
		b.n -= uint64(n0)
		if b.n == 0 && e == nil {
			b.checkEnd = true
		} else if e == io.EOF {
			e = io.ErrUnexpectedEOF
		}
		b.err = e
	}
	return n, b.err
}

// beginChunk reads a chunk-size line: hex digits, optional whitespace and
// an extension that is ignored, ended by CRLF with no other CR.
func (b *body) beginChunk() {
	line, err := b.readChunkLine()
	if err != nil {
		b.err = err
		return
	}
	b.excess += int64(len(line)) + 2
	for len(line) > 0 && (line[len(line)-1] == ' ' || line[len(line)-1] == '\t') {
		line = line[:len(line)-1]
	}
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	b.n, b.err = parseHexUint(line)
	if b.err != nil {
		return
	}
	b.excess -= 16 + 2*int64(b.n)
	b.excess = max(b.excess, 0)
	if b.excess > maxChunkExcess {
		b.err = errChunkExcess
	}
	if b.n == 0 {
		b.err = io.EOF
	}
}

// readChunkLine returns the next line without its CRLF, consumed. The
// line must end within maxChunkLine bytes, as in net/http's 4 KiB buffer.
func (b *body) readChunkLine() ([]byte, error) {
	in := &b.rr.in
	for {
		buf := in.bytes()
		look := buf[:min(len(buf), maxChunkLine)]
		if i := bytes.IndexByte(look, '\n'); i >= 0 {
			line := look[:i+1]
			in.discard(i + 1)
			if cr := bytes.IndexByte(line, '\r'); cr < 0 {
				return nil, errChunkBareLF
			} else if cr != len(line)-2 {
				return nil, errChunkCR
			}
			return line[:len(line)-2], nil
		}
		if len(buf) >= maxChunkLine {
			return nil, errChunkLineLong
		}
		if err := in.fill(in.cap()); err != nil && in.buffered() == len(buf) {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}

func parseHexUint(v []byte) (n uint64, err error) {
	if len(v) == 0 {
		return 0, errChunkEmptySize
	}
	for i, c := range v {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, errChunkBadSize
		}
		if i == 16 {
			return 0, errChunkTooLarge
		}
		n = n<<4 | uint64(c)
	}
	return n, nil
}

// readTrailer reads what follows the last chunk: CRLF, or a trailer
// section that must end (CRLFCRLF) within 4 KiB, parsed as a header.
func (b *body) readTrailer() error {
	in := &b.rr.in
	_ = in.fillTo(2, in.cap())
	buf := in.bytes()
	if len(buf) >= 2 && buf[0] == '\r' && buf[1] == '\n' {
		in.discard(2)
		return nil
	}
	if len(buf) < 2 {
		return errTrailerEOF
	}
	for {
		buf = in.bytes()
		look := buf[:min(len(buf), minReadBuf)]
		if bytes.Contains(look, []byte("\r\n\r\n")) {
			break
		}
		if len(buf) >= minReadBuf {
			return errTrailerTooLong
		}
		if err := in.fill(in.cap()); err != nil && in.buffered() == len(buf) {
			return errTrailerTooLong
		}
	}
	var p headParser
	p.line0 = true
	done, err := p.advance(in.bytes(), true)
	if err != nil {
		return err
	}
	if !done {
		return errTrailerEOF // unreachable: the section ends in the bytes looked at
	}
	hb := in.bytes()[:p.headLen]
	h := make(http.Header, len(p.lines))
	for _, l := range p.lines {
		key, value := trailerField(hb, l, &p)
		h[key] = append(h[key], value)
	}
	in.discard(p.headLen)
	if *b.trailer == nil {
		*b.trailer = h
	} else {
		for k, v := range h {
			(*b.trailer)[k] = v
		}
	}
	return nil
}

// trailerField returns the name and value of a parsed trailer line, as
// textproto makes them (names canonical unless they hold a space).
func trailerField(b []byte, l rawLine, p *headParser) (string, string) {
	kb := l.key.of(b)
	var key string
	if isCanonical(kb) {
		key = string(kb)
	} else {
		key = string(canonicalKey(nil, kb))
	}
	if l.folded {
		p.cont = splitFolded(b, l.raw, p.cont)
		return key, string(foldedValue(nil, b, l, p.cont))
	}
	return key, string(l.value.of(b))
}
