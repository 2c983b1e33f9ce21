package siege

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
)

// errMalformed is wrapped by every error readResponse returns for bytes that
// are not a valid HTTP/1.x response; a load generator counts such a response
// as an error of kind "other" and drops the connection.
var errMalformed = errors.New("siege: malformed response")

const (
	// maxHeaderLines bounds the header and trailer sections; a line longer
	// than the bufio.Reader's buffer is malformed too.
	maxHeaderLines = 200
	// maxChunkOverhead mirrors net/http: chunk framing may not outweigh data
	// by more than this, so a peer cannot feed unbounded framing.
	maxChunkOverhead = 16 << 10
	// maxTrailerBytes keeps the trailer within what net/http looks ahead for.
	maxTrailerBytes = 4000
)

// response is what the load generator keeps of one HTTP/1.x response.
type response struct {
	status int
	// mustClose reports that the connection cannot carry another request:
	// the server said so or the body ran to the end of the connection.
	mustClose bool
}

// readResponse reads one HTTP/1.x response to a GET from br, status line to
// the end of the body, and discards the body. It allocates nothing.
//
// It accepts what net/http.ReadResponse accepts, minus rarities (obs-fold,
// versions other than 1.0 and 1.1, odd status codes, header lines longer
// than br's buffer): the fuzz test holds it to that. A 1xx response is
// returned as it is, with no body. On error the connection is unusable; the
// error is io.EOF when br ended before the first byte, io.ErrUnexpectedEOF
// when it ended inside the response, errMalformed (wrapped) for bad bytes,
// or br's read error.
func readResponse(br *bufio.Reader) (response, error) {
	line, err := readLine(br)
	if err != nil {
		return response{}, err
	}
	var resp response
	var http10 bool
	resp.status, http10, err = parseStatusLine(line)
	if err != nil {
		return response{}, err
	}
	h, err := readHeaders(br, http10)
	if err != nil {
		return response{}, err
	}
	resp.mustClose = h.close || (http10 && !h.keepAlive)
	switch {
	case resp.status/100 == 1 || resp.status == 204 || resp.status == 304:
		return resp, nil
	case h.chunked:
		return resp, discardChunked(br)
	case h.contentLength >= 0:
		return resp, discardN(br, h.contentLength)
	default:
		resp.mustClose = true
		_, err := br.WriteTo(io.Discard)
		return resp, err
	}
}

// readLine returns the next line without its line ending (CRLF or bare LF,
// as net/textproto allows in heads). The slice is valid until br's next read.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	switch {
	case err == bufio.ErrBufferFull:
		return nil, fmt.Errorf("%w: line longer than %d bytes", errMalformed, br.Size())
	case err == io.EOF && len(line) == 0:
		return nil, io.EOF
	case err == io.EOF:
		return nil, io.ErrUnexpectedEOF
	case err != nil:
		return nil, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// parseStatusLine parses "HTTP/1.x NNN[ reason]".
func parseStatusLine(line []byte) (status int, http10 bool, err error) {
	switch {
	case bytes.HasPrefix(line, []byte("HTTP/1.1 ")):
	case bytes.HasPrefix(line, []byte("HTTP/1.0 ")):
		http10 = true
	default:
		return 0, false, fmt.Errorf("%w: status line %.40q", errMalformed, line)
	}
	code := line[len("HTTP/1.1 "):]
	if len(code) > 3 && code[3] == ' ' {
		code = code[:3]
	}
	if len(code) != 3 {
		return 0, false, fmt.Errorf("%w: status line %.40q", errMalformed, line)
	}
	for _, c := range code {
		if c < '0' || c > '9' {
			return 0, false, fmt.Errorf("%w: status code %q", errMalformed, code)
		}
		status = status*10 + int(c-'0')
	}
	if status < 100 {
		return 0, false, fmt.Errorf("%w: status code %q", errMalformed, code)
	}
	return status, http10, nil
}

// framing is what the header section says about the body and the connection.
type framing struct {
	contentLength int64 // -1 when absent
	chunked       bool
	close         bool // a "close" token in Connection
	keepAlive     bool // a "keep-alive" token in Connection
}

func readHeaders(br *bufio.Reader, http10 bool) (framing, error) {
	f := framing{contentLength: -1}
	var transferEncodings int
	var te bool
	for range maxHeaderLines {
		line, err := readLine(br)
		if err == io.EOF {
			return f, io.ErrUnexpectedEOF
		}
		if err != nil {
			return f, err
		}
		if len(line) == 0 {
			if !http10 && transferEncodings > 0 && (transferEncodings != 1 || !te) {
				return f, fmt.Errorf("%w: unsupported Transfer-Encoding", errMalformed)
			}
			f.chunked = !http10 && te
			return f, nil
		}
		name, value, err := splitHeader(line)
		if err != nil {
			return f, err
		}
		switch {
		case asciiEqualFold(name, "Content-Length"):
			n, err := parseContentLength(value)
			if err != nil {
				return f, err
			}
			if f.contentLength >= 0 && f.contentLength != n {
				return f, fmt.Errorf("%w: conflicting Content-Length", errMalformed)
			}
			f.contentLength = n
		case asciiEqualFold(name, "Transfer-Encoding"):
			transferEncodings++
			te = asciiEqualFold(trimSpace(value), "chunked")
		case asciiEqualFold(name, "Connection"):
			f.close = f.close || hasToken(value, "close")
			f.keepAlive = f.keepAlive || hasToken(value, "keep-alive")
		}
	}
	return f, fmt.Errorf("%w: more than %d header lines", errMalformed, maxHeaderLines)
}

// splitHeader splits "Name: value", checking the name is a token and the
// value holds no control bytes other than tab.
func splitHeader(line []byte) (name, value []byte, err error) {
	name, value, ok := bytes.Cut(line, []byte(":"))
	if !ok || len(name) == 0 {
		return nil, nil, fmt.Errorf("%w: header line %.40q", errMalformed, line)
	}
	for _, c := range name {
		if !isTokenByte(c) {
			return nil, nil, fmt.Errorf("%w: header name %.40q", errMalformed, name)
		}
	}
	for _, c := range value {
		if c < ' ' && c != '\t' || c == 0x7f {
			return nil, nil, fmt.Errorf("%w: header value of %.40q", errMalformed, name)
		}
	}
	return name, value, nil
}

func parseContentLength(v []byte) (int64, error) {
	v = trimSpace(v)
	// Leading zeros are refused so that equal values are equal strings, which
	// is how net/http compares repeated Content-Length fields.
	if len(v) == 0 || len(v) > 18 || len(v) > 1 && v[0] == '0' {
		return 0, fmt.Errorf("%w: Content-Length %.40q", errMalformed, v)
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: Content-Length %.40q", errMalformed, v)
		}
		n = n*10 + int64(c-'0')
	}
	return n, nil
}

// discardChunked reads a chunked body and its trailer section.
func discardChunked(br *bufio.Reader) error {
	var overhead int64
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return chunkReadError(err)
		}
		// RFC 9112 erratum 7633: chunk lines end in CRLF, never a bare LF.
		if len(line) < 2 || bytes.IndexByte(line, '\r') != len(line)-2 {
			return fmt.Errorf("%w: chunk size line %.40q", errMalformed, line)
		}
		overhead += int64(len(line))
		size, err := parseChunkSize(line[:len(line)-2])
		if err != nil {
			return err
		}
		overhead = max(overhead-16-2*int64(min(size, math.MaxInt64/4)), 0)
		if overhead > maxChunkOverhead {
			return fmt.Errorf("%w: chunk framing outweighs data", errMalformed)
		}
		if size == 0 {
			return discardTrailer(br)
		}
		if size > math.MaxInt64 {
			return io.ErrUnexpectedEOF // no connection carries that much
		}
		if err := discardN(br, int64(size)); err != nil {
			return err
		}
		if err := expectCRLF(br); err != nil {
			return err
		}
	}
}

func parseChunkSize(b []byte) (uint64, error) {
	b = bytes.TrimRight(b, " \t")
	b, _, _ = bytes.Cut(b, []byte(";")) // extensions carry nothing we use
	if len(b) == 0 || len(b) > 16 {
		return 0, fmt.Errorf("%w: chunk size %.40q", errMalformed, b)
	}
	var n uint64
	for _, c := range b {
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, fmt.Errorf("%w: chunk size %.40q", errMalformed, b)
		}
		n = n<<4 | uint64(d)
	}
	return n, nil
}

func expectCRLF(br *bufio.Reader) error {
	b, err := br.Peek(2)
	if err != nil {
		return chunkReadError(err)
	}
	if b[0] != '\r' || b[1] != '\n' {
		return fmt.Errorf("%w: chunk data not followed by CRLF", errMalformed)
	}
	_, _ = br.Discard(2)
	return nil
}

// discardTrailer reads header lines after the last chunk up to the empty
// line. Like net/http it wants CRLF here and a trailer section that fits in
// maxTrailerBytes.
func discardTrailer(br *bufio.Reader) error {
	total := 0
	for range maxHeaderLines {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return chunkReadError(err)
		}
		total += len(line)
		if total > maxTrailerBytes {
			return fmt.Errorf("%w: trailer section over %d bytes", errMalformed, maxTrailerBytes)
		}
		if len(line) < 2 || line[len(line)-2] != '\r' {
			return fmt.Errorf("%w: trailer line %.40q not ended by CRLF", errMalformed, line)
		}
		if len(line) == 2 {
			return nil
		}
		if _, _, err := splitHeader(line[:len(line)-2]); err != nil {
			return err
		}
	}
	return fmt.Errorf("%w: more than %d trailer lines", errMalformed, maxHeaderLines)
}

func chunkReadError(err error) error {
	switch err {
	case io.EOF:
		return io.ErrUnexpectedEOF
	case bufio.ErrBufferFull:
		return fmt.Errorf("%w: chunk line too long", errMalformed)
	}
	return err
}

// discardN skips n body bytes.
func discardN(br *bufio.Reader, n int64) error {
	for n > 0 {
		step := int(min(n, 1<<30))
		got, err := br.Discard(step)
		n -= int64(got)
		if err == io.EOF {
			return io.ErrUnexpectedEOF
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func isTokenByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func trimSpace(b []byte) []byte { return bytes.Trim(b, " \t") }

// hasToken reports whether the comma-separated list v holds token,
// compared without case.
func hasToken(v []byte, token string) bool {
	for part := range bytes.SplitSeq(v, []byte(",")) {
		if asciiEqualFold(trimSpace(part), token) {
			return true
		}
	}
	return false
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		if lower(b[i]) != lower(s[i]) {
			return false
		}
	}
	return true
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
