package http1

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// prevHead is what a connection keeps of its previous request head, so
// that the next head, which on a keep-alive connection usually repeats
// most of its lines, reuses the strings already made and skips the checks
// already passed: an unchanged head costs no allocation at all.
type prevHead struct {
	head    []byte // the whole previous head; empty when not kept
	valid   bool   // the fields below describe the previous head
	reqLine string // the request line, without its line end

	method, target, proto string
	major, minor          int
	fastURL               bool
	url                   *url.URL // slow-path URL, never handed out (copied)

	lines []prevLine
}

// prevLine is one parsed header line of the previous head.
type prevLine struct {
	raw        string // every byte of the line, line ends included
	key, value string
	flags      keyFlags
}

func (h *prevHead) sameRequestLine(line []byte) (*prevHead, bool) {
	if h == nil || !h.valid || h.reqLine != string(line) {
		return nil, false
	}
	return h, true
}

func (h *prevHead) sameLine(i int, raw []byte) (int, bool) {
	if h == nil || !h.valid || i >= len(h.lines) || h.lines[i].raw != string(raw) {
		return 0, false
	}
	return i, true
}

// keyFlags marks the header names the server looks at after parsing.
type keyFlags uint16

const (
	keyHost keyFlags = 1 << iota
	keyContentLength
	keyTransferEncoding
	keyTrailer
	keyConnection
	keyExpect
	keyPragma
	keySpace // a name with a space: refused once the transfer is checked
)

func flagsOf(key string) keyFlags {
	switch key {
	case "Host":
		return keyHost
	case "Content-Length":
		return keyContentLength
	case "Transfer-Encoding":
		return keyTransferEncoding
	case "Trailer":
		return keyTrailer
	case "Connection":
		return keyConnection
	case "Expect":
		return keyExpect
	case "Pragma":
		return keyPragma
	}
	if strings.IndexByte(key, ' ') >= 0 {
		return keySpace
	}
	return 0
}

// requestReader reads requests from a connection's bytes into structures
// it reuses from one request to the next: the Header map, the URL, the
// string slices of header values and the strings themselves (see
// prevHead).
type requestReader struct {
	in    inbuf
	p     headParser
	prev  prevHead
	limit int // the longest head accepted, in bytes

	// The request being built.
	method, target, proto string
	major, minor          int
	header                http.Header
	url                   url.URL
	host                  string
	contentLength         int64
	chunked               bool
	close                 bool
	trailer               http.Header
	flags                 keyFlags
	h2Upgrade             bool

	vals       []string   // backing array of single-valued header slices
	scratch    []byte     // the new strings of a head, before they become one
	plan       []linePlan // where materialize put each new line
	spareLines []prevLine // the line list prev does not use, swapped in turn
	te         [1]string
	lastPOST   bool // the last request was a POST: skip up to 4 CR/LF before the next

	// head is the last head read, as received: in the input buffer, valid
	// until the buffer is next filled (Exchange.RawHead).
	head []byte
}

func (rr *requestReader) init(src io.Reader, limit int) {
	rr.in.reset(src)
	rr.limit = limit
	if rr.header == nil {
		rr.header = make(http.Header, 8)
	}
	rr.prev.valid = false
	rr.prev.head = rr.prev.head[:0]
	rr.lastPOST = false
}

// errPeerGone is io.EOF before any byte of a request: the client closed a
// keep-alive connection, which needs no answer.
var errPeerGone = io.EOF

// skipLeadingCRLF drops up to four CR or LF bytes that old clients send
// after a POST body, as net/http tolerates them (RFC 7230 section 3.5).
func (rr *requestReader) skipLeadingCRLF() {
	if !rr.lastPOST {
		return
	}
	_ = rr.in.fillTo(4, rr.limit)
	b := rr.in.bytes()
	n := 0
	for n < len(b) && n < 4 && (b[n] == '\r' || b[n] == '\n') {
		n++
	}
	rr.in.discard(n)
}

// readHead reads and parses one request head, with every check net/http's
// server makes before it calls a handler except Expect. It returns
// errPeerGone when the connection ended before any byte, a read error
// (timeout, reset) when the connection failed, or a *parseError to answer.
func (rr *requestReader) readHead() error {
	rr.skipLeadingCRLF()
	p := &rr.p
	p.reset(&rr.prev)
	rr.head = nil
	for {
		b := rr.in.bytes()
		if !p.line0 && len(rr.prev.head) > 0 && len(b) >= len(rr.prev.head) && bytes.Equal(b[:len(rr.prev.head)], rr.prev.head) {
			rr.head = b[:len(rr.prev.head)]
			rr.reuseHead()
			rr.in.discard(len(rr.prev.head))
			return rr.checkRequest()
		}
		done, err := p.advance(b, false)
		if err != nil {
			return err
		}
		if done {
			break
		}
		if len(b) >= rr.limit {
			return errTooLarge
		}
		if err := rr.in.fill(rr.limit); err != nil {
			if errors.Is(err, io.ErrShortBuffer) {
				return errTooLarge
			}
			if err != io.EOF {
				return err
			}
			if rr.in.buffered() == 0 || !p.line0 && readsAsEOF(rr.in.bytes()) {
				return errPeerGone
			}
			if _, err := p.advance(rr.in.bytes(), true); err != nil {
				return err
			}
			return errMalformed
		}
	}
	b := rr.in.bytes()[:p.headLen]
	rr.head = b
	rr.materialize(b)
	rr.rememberHead(b)
	rr.in.discard(p.headLen)
	return rr.checkRequest()
}

// readsAsEOF reports whether net/http, reading a request line that the
// client ended (EOF) without a line feed, gets io.EOF rather than the
// line, and so closes the connection without answering instead of
// answering 400. Its bufio.Reader (4096 bytes) hands out such a line in
// full-buffer pieces, a piece ending in CR giving the CR back for the next;
// when the piece read at EOF is empty, the read fails with io.EOF.
func readsAsEOF(line []byte) bool {
	for len(line) >= minReadBuf {
		n := minReadBuf
		if line[n-1] == '\r' {
			n--
		}
		line = line[n:]
	}
	return len(line) == 0
}

// reuseHead sets the request from the previous head, which the new one
// repeats byte for byte.
func (rr *requestReader) reuseHead() {
	h := &rr.prev
	rr.method, rr.target, rr.proto = h.method, h.target, h.proto
	rr.major, rr.minor = h.major, h.minor
	rr.setURL(h.fastURL, h.url)
	rr.fillHeader(h.lines)
}

func (rr *requestReader) setURL(fast bool, u *url.URL) {
	if fast {
		path, query, force := splitTarget(rr.target)
		rr.url = url.URL{Path: path, RawQuery: query, ForceQuery: force}
		return
	}
	rr.url = *u
}

// fillHeader refills the reused Header map from parsed lines.
func (rr *requestReader) fillHeader(lines []prevLine) {
	clear(rr.header)
	if cap(rr.vals) < len(lines) {
		rr.vals = make([]string, len(lines), 2*len(lines))
	}
	vals := rr.vals[:len(lines)]
	rr.flags = 0
	for i, l := range lines {
		rr.flags |= l.flags
		vals[i] = l.value
		if vv, ok := rr.header[l.key]; ok {
			rr.header[l.key] = append(vv, l.value)
			continue
		}
		// Capacity one: a handler's append copies instead of writing over
		// the next field's value.
		rr.header[l.key] = vals[i : i+1 : i+1]
	}
}

// linePlan is where materialize put one new header line's bytes in the
// head's string.
type linePlan struct {
	at            int // the raw line
	keyAt, keyLen int // the canonical name, when neither common nor a substring; keyAt -1 otherwise
	valAt, valLen int // the joined value of a folded line
}

// materialize turns the parsed head b into strings: lines repeated from
// the previous head take its strings, and every new string is cut from one
// allocation.
func (rr *requestReader) materialize(b []byte) {
	p := &rr.p
	prev := &rr.prev
	reqLineEnd := p.proto.end
	sameLine0 := prev.valid && prev.reqLine == string(b[:reqLineEnd])

	// Lay out the new bytes: the request line, then each new header line
	// followed by its canonical name and joined value when those are not
	// substrings of it.
	// Sized once from the head, so that a connection's first request
	// does not grow them step by step.
	if cap(rr.scratch) < len(b) {
		rr.scratch = make([]byte, 0, len(b)+len(b)/4)
	}
	if cap(rr.plan) < len(p.lines) {
		rr.plan = make([]linePlan, 0, 2*len(p.lines))
	}
	if cap(rr.spareLines) < len(p.lines) {
		rr.spareLines = make([]prevLine, 0, 2*len(p.lines))
	}
	s := rr.scratch[:0]
	if !sameLine0 {
		s = append(s, b[:reqLineEnd]...)
	}
	plan := rr.plan[:0]
	var keyBuf [64]byte
	for _, l := range p.lines {
		lp := linePlan{at: len(s), keyAt: -1}
		if l.reused < 0 {
			s = append(s, l.raw.of(b)...)
			if kb := l.key.of(b); !isCanonical(kb) {
				ck := canonicalKey(keyBuf[:0], kb)
				if _, ok := commonHeader[string(ck)]; !ok {
					lp.keyAt, lp.keyLen = len(s), len(ck)
					s = append(s, ck...)
				}
			}
			if l.folded {
				p.cont = splitFolded(b, l.raw, p.cont)
				lp.valAt = len(s)
				s = foldedValue(s, b, l, p.cont)
				lp.valLen = len(s) - lp.valAt
			}
		}
		plan = append(plan, lp)
	}
	rr.plan = plan
	arena := string(s)
	rr.scratch = s[:0]
	if cap(rr.scratch) > 64<<10 {
		rr.scratch = nil // do not keep a large head's scratch for the connection's life
	}

	// The request line.
	if !sameLine0 {
		prev.reqLine = arena[:reqLineEnd]
		prev.method = internMethod(arena[p.method.start:p.method.end])
		prev.target = arena[p.target.start:p.target.end]
		prev.proto = internProto(arena[p.proto.start:p.proto.end])
		prev.major, prev.minor = p.major, p.minor
		prev.fastURL, prev.url = p.fastURL, p.url
	}
	rr.method, rr.target, rr.proto = prev.method, prev.target, prev.proto
	rr.major, rr.minor = prev.major, prev.minor
	rr.setURL(prev.fastURL, prev.url)

	// The header lines, into the spare list, which becomes prev's.
	lines := rr.spareLines[:0]
	for i, l := range p.lines {
		if l.reused >= 0 {
			lines = append(lines, prev.lines[l.reused])
			continue
		}
		lp := plan[i]
		off := lp.at - l.raw.start // maps a head offset to an arena offset
		raw := arena[lp.at : lp.at+l.raw.end-l.raw.start]
		kb := l.key.of(b)
		var key string
		switch {
		case lp.keyAt >= 0:
			key = arena[lp.keyAt : lp.keyAt+lp.keyLen]
		case isCanonical(kb):
			if k, ok := commonHeader[string(kb)]; ok {
				key = k
			} else {
				key = arena[l.key.start+off : l.key.end+off]
			}
		default:
			key = commonHeader[string(canonicalKey(keyBuf[:0], kb))]
		}
		var value string
		if l.folded {
			value = arena[lp.valAt : lp.valAt+lp.valLen]
		} else {
			value = arena[l.value.start+off : l.value.end+off]
		}
		lines = append(lines, prevLine{raw: raw, key: key, value: value, flags: flagsOf(key)})
	}
	rr.spareLines, prev.lines = prev.lines, lines
	prev.valid = true
	rr.fillHeader(prev.lines)
}

// rememberHead keeps a copy of the head for the next request's whole-head
// check. A long head is not kept: repeating it is unusual.
func (rr *requestReader) rememberHead(b []byte) {
	if len(b) > 8<<10 {
		rr.prev.head = rr.prev.head[:0]
		return
	}
	rr.prev.head = append(rr.prev.head[:0], b...)
}

// isCanonical reports whether k is already in textproto's canonical form:
// it then needs no copy. A name with a space is left as written, as
// textproto leaves it.
func isCanonical(k []byte) bool {
	if bytes.IndexByte(k, ' ') >= 0 {
		return true
	}
	upper := true
	for _, c := range k {
		if upper && 'a' <= c && c <= 'z' || !upper && 'A' <= c && c <= 'Z' {
			return false
		}
		upper = c == '-'
	}
	return true
}

// canonicalKey appends the canonical form of k (a valid name without
// spaces) to dst.
func canonicalKey(dst, k []byte) []byte {
	upper := true
	for _, c := range k {
		if upper && 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		} else if !upper && 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
		upper = c == '-'
	}
	return dst
}

// commonHeader interns the canonical names requests carry most, so that a
// name written in another case costs no string.
var commonHeader = func() map[string]string {
	m := make(map[string]string)
	for _, k := range []string{
		"Accept", "Accept-Charset", "Accept-Encoding", "Accept-Language",
		"Authorization", "Cache-Control", "Connection", "Content-Encoding",
		"Content-Length", "Content-Type", "Cookie", "Date", "Dnt", "Etag",
		"Expect", "Forwarded", "From", "Host", "If-Match", "If-Modified-Since",
		"If-None-Match", "If-Range", "If-Unmodified-Since", "Keep-Alive",
		"Max-Forwards", "Origin", "Pragma", "Priority", "Proxy-Authorization",
		"Proxy-Connection", "Range", "Referer", "Sec-Ch-Ua", "Sec-Ch-Ua-Mobile",
		"Sec-Ch-Ua-Platform", "Sec-Fetch-Dest", "Sec-Fetch-Mode",
		"Sec-Fetch-Site", "Sec-Fetch-User", "Sec-Websocket-Extensions",
		"Sec-Websocket-Key", "Sec-Websocket-Protocol", "Sec-Websocket-Version",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade",
		"Upgrade-Insecure-Requests", "User-Agent", "Via", "X-Forwarded-For",
		"X-Forwarded-Host", "X-Forwarded-Proto", "X-Real-Ip", "X-Request-Id",
	} {
		m[k] = k
	}
	return m
}()

func internMethod(m string) string {
	switch m {
	case "GET":
		return "GET"
	case "HEAD":
		return "HEAD"
	case "POST":
		return "POST"
	case "PUT":
		return "PUT"
	case "DELETE":
		return "DELETE"
	case "OPTIONS":
		return "OPTIONS"
	case "PATCH":
		return "PATCH"
	case "CONNECT":
		return "CONNECT"
	}
	return m
}

func internProto(p string) string {
	switch p {
	case "HTTP/1.1":
		return "HTTP/1.1"
	case "HTTP/1.0":
		return "HTTP/1.0"
	}
	return p
}

var errTooManyHosts = &parseError{status: http.StatusBadRequest}

// checkRequest makes the checks of http.ReadRequest after the header
// (Host count, transfer framing) and those of net/http's server, in their
// order, so that a request with several faults gets the same status.
func (rr *requestReader) checkRequest() error {
	h := rr.header
	if rr.flags&keyHost != 0 && len(h["Host"]) > 1 {
		return errTooManyHosts
	}
	rr.host = rr.url.Host
	if rr.host == "" && rr.flags&keyHost != 0 {
		if v := h["Host"]; len(v) > 0 {
			rr.host = v[0]
		}
	}
	if rr.flags&keyPragma != 0 {
		if hp := h["Pragma"]; len(hp) > 0 && hp[0] == "no-cache" {
			if _, ok := h["Cache-Control"]; !ok {
				h["Cache-Control"] = []string{"no-cache"}
			}
		}
	}
	rr.close = rr.shouldClose()
	if err := rr.transfer(); err != nil {
		return err
	}
	rr.h2Upgrade = rr.method == "PRI" && len(h) == 0 && rr.url.Path == "*" && rr.proto == "HTTP/2.0"
	if rr.h2Upgrade {
		rr.contentLength = -1
		rr.close = true
	}
	if rr.major != 1 && !(rr.major == 2 && rr.minor == 0 && rr.method == "PRI" && rr.target == "*") {
		return errVersion
	}
	hosts, haveHost := h["Host"]
	if rr.atLeast11() && (!haveHost || len(hosts) == 0) && !rr.h2Upgrade && rr.method != "CONNECT" {
		return errMissingHost
	}
	if len(hosts) == 1 && !httpguts.ValidHostHeader(hosts[0]) {
		return errMalformedHost
	}
	if rr.flags&keySpace != 0 {
		return errBadHeaderName
	}
	delete(h, "Host")
	rr.lastPOST = rr.method == "POST"
	return nil
}

func (rr *requestReader) atLeast11() bool {
	return rr.major > 1 || rr.major == 1 && rr.minor >= 1
}

// shouldClose is net/http's shouldClose for a request.
func (rr *requestReader) shouldClose() bool {
	if rr.major < 1 {
		return true
	}
	conv := rr.header["Connection"]
	hasClose := httpguts.HeaderValuesContainsToken(conv, "close")
	if rr.major == 1 && rr.minor == 0 {
		return hasClose || !httpguts.HeaderValuesContainsToken(conv, "keep-alive")
	}
	return hasClose
}

// transfer decides the body's framing as net/http's readTransfer does for
// a request: Transfer-Encoding (only a single "chunked" on HTTP/1.1 and
// later), then Content-Length (one value, or several equal ones, digits
// only), then the declared trailers. Where net/http lets a request through
// that RFC 9112 tells a server to refuse or to end the connection after,
// it departs from net/http (issue 35; see docs/daemon.md, "What the daemon
// refuses"): a Transfer-Encoding on HTTP/1.0, which net/http ignores, is
// refused with 400 (§6.1: the request is faulty; a chunked body framed as
// nothing would be read as the next request), and a request with both
// Transfer-Encoding and Content-Length, framed by the first, closes the
// connection after its answer (§6.3 ¶3), which rr.close says.
func (rr *requestReader) transfer() error {
	h := rr.header
	rr.chunked = false
	rr.trailer = nil
	major, minor := rr.major, rr.minor
	if major == 0 && minor == 0 {
		major, minor = 1, 1
	}
	if rr.flags&keyTransferEncoding != 0 {
		if raw, ok := h["Transfer-Encoding"]; ok {
			delete(h, "Transfer-Encoding")
			if err := rr.transferEncoding(raw, major, minor); err != nil {
				return err
			}
		}
	}
	n, err := rr.fixLength()
	if err != nil {
		return err
	}
	rr.contentLength = n
	if rr.chunked && rr.flags&keyContentLength != 0 {
		rr.close = true
	}
	if rr.flags&keyTrailer != 0 && rr.chunked {
		if err := rr.fixTrailer(); err != nil {
			return err
		}
	}
	return nil
}

// transferEncoding reads a request's Transfer-Encoding values. Before
// HTTP/1.1 net/http ignores them; ours refuses them on HTTP/1.0 (see
// transfer) but still ignores them on HTTP/0.x, as net/http does, since
// that version is refused with 505 right after and the framing never
// matters: a 400 there would answer the same bytes differently from
// net/http for no gain.
func (rr *requestReader) transferEncoding(raw []string, major, minor int) error {
	switch {
	case major < 1:
		return nil
	case major == 1 && minor < 1:
		return errTEOnHTTP10
	case len(raw) != 1 || !asciiEqualFold(raw[0], "chunked"):
		return errUnsupportedTE
	}
	rr.chunked = true
	return nil
}

func (rr *requestReader) fixLength() (int64, error) {
	h := rr.header
	var contentLens []string
	if rr.flags&keyContentLength != 0 {
		contentLens = h["Content-Length"]
	}
	if len(contentLens) > 1 {
		first := textproto.TrimString(contentLens[0])
		for _, ct := range contentLens[1:] {
			if first != textproto.TrimString(ct) {
				return 0, errMalformed
			}
		}
		h["Content-Length"] = []string{first}
		contentLens = h["Content-Length"]
	}
	var n int64
	if len(contentLens) > 0 {
		cl := textproto.TrimString(contentLens[0])
		if cl == "" {
			return 0, errMalformed
		}
		u, err := strconv.ParseUint(cl, 10, 63)
		if err != nil {
			return 0, errMalformed
		}
		n = int64(u)
	}
	if rr.chunked {
		delete(h, "Content-Length")
		return -1, nil
	}
	if len(contentLens) > 0 {
		return n, nil
	}
	delete(h, "Content-Length")
	return 0, nil
}

func (rr *requestReader) fixTrailer() error {
	vv, ok := rr.header["Trailer"]
	if !ok {
		return nil
	}
	delete(rr.header, "Trailer")
	trailer := make(http.Header)
	for _, v := range vv {
		bad := false
		forEachElement(v, func(key string) {
			key = http.CanonicalHeaderKey(key)
			switch key {
			case "Transfer-Encoding", "Trailer", "Content-Length":
				bad = true
			}
			trailer[key] = nil
		})
		if bad {
			return errMalformed
		}
	}
	if len(trailer) > 0 {
		rr.trailer = trailer
	}
	return nil
}

// forEachElement calls fn for each non-empty element of a comma-separated
// list, trimmed, as net/http's foreachHeaderElement.
func forEachElement(v string, fn func(string)) {
	v = textproto.TrimString(v)
	if v == "" {
		return
	}
	if !strings.Contains(v, ",") {
		fn(v)
		return
	}
	for f := range strings.SplitSeq(v, ",") {
		if f = textproto.TrimString(f); f != "" {
			fn(f)
		}
	}
}

func asciiEqualFold(s, t string) bool {
	if len(s) != len(t) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if lower(s[i]) != lower(t[i]) {
			return false
		}
	}
	return true
}

func lower(b byte) byte {
	if 'A' <= b && b <= 'Z' {
		return b + ('a' - 'A')
	}
	return b
}

// hasToken reports whether token (lower case) is an element of v, as
// net/http's hasToken: ASCII case-insensitive, bounded by space, comma or
// tab.
func hasToken(v, token string) bool {
	if len(token) > len(v) || token == "" {
		return false
	}
	if v == token {
		return true
	}
	for sp := 0; sp <= len(v)-len(token); sp++ {
		if b := v[sp]; b != token[0] && b|0x20 != token[0] {
			continue
		}
		if sp > 0 && !isTokenBoundary(v[sp-1]) {
			continue
		}
		if end := sp + len(token); end != len(v) && !isTokenBoundary(v[end]) {
			continue
		}
		if asciiEqualFold(v[sp:sp+len(token)], token) {
			return true
		}
	}
	return false
}

func isTokenBoundary(b byte) bool { return b == ' ' || b == ',' || b == '\t' }

// headerGet is Header.get: the first value of an exact key.
func headerGet(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}
