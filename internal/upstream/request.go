package upstream

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"golang.org/x/net/http/httpguts"
)

// isFastPath reports whether req is served on the caller's goroutine: plain
// http, no body, no upgrade, not CONNECT. Every other request goes to the
// fallback.
func isFastPath(req *http.Request) bool {
	if req.URL == nil || req.URL.Scheme != "http" || req.Method == http.MethodConnect {
		return false
	}
	if (req.Body != nil && req.Body != http.NoBody) || req.ContentLength != 0 ||
		len(req.TransferEncoding) != 0 || len(req.Trailer) != 0 {
		return false
	}
	return !isUpgrade(req.Header)
}

// isUpgrade reports whether h asks to switch protocols (WebSocket, h2c).
func isUpgrade(h http.Header) bool {
	return len(h["Upgrade"]) != 0 || httpguts.HeaderValuesContainsToken(h["Connection"], "upgrade")
}

// isReplayable reports whether a bodyless request may be sent again after a
// reused connection failed before any response byte, by net/http's rule:
// an idempotent method, or an idempotency key the caller vouches for.
func isReplayable(req *http.Request) bool {
	if idempotent(req.Method) {
		return true
	}
	_, ok := req.Header["Idempotency-Key"]
	if !ok {
		_, ok = req.Header["X-Idempotency-Key"]
	}
	return ok
}

// idempotent reports whether a bodyless request with method may be sent
// again whatever its fields, as net/http decides it ("" is GET).
func idempotent(method string) bool {
	switch method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// wantsClose reports whether the request forbids reusing its connection.
func wantsClose(req *http.Request) bool {
	return req.Close || httpguts.HeaderValuesContainsToken(req.Header["Connection"], "close")
}

// skippedHeader reports whether a field of req.Header is left out of the
// request as net/http leaves it out: Host comes from req.Host or the URL,
// and the framing fields of a bodyless request are ours to decide.
func skippedHeader(name string) bool {
	switch name {
	case "Host", "Content-Length", "Transfer-Encoding", "Trailer":
		return true
	}
	return false
}

// requestTarget returns the method, request target and Host of req, or an
// error wrapping ErrInvalidRequest. The target is what req.URL.RequestURI()
// returns, in two parts (see targetParts), so that a target with a query
// costs no string of its own.
func requestTarget(req *http.Request) (method string, target requestURI, host string, err error) {
	if req.URL.Host == "" {
		return "", requestURI{}, "", fmt.Errorf("%w: no host in the request URL", ErrInvalidRequest)
	}
	method = req.Method
	if method == "" {
		method = http.MethodGet
	}
	if !isToken(method) {
		return "", requestURI{}, "", fmt.Errorf("%w: method %q is not a token", ErrInvalidRequest, method)
	}
	target = targetParts(req.URL)
	if !target.valid() {
		return "", requestURI{}, "", fmt.Errorf("%w: request target %q is not origin-form, absolute-form or \"*\", or has a space or control byte", ErrInvalidRequest, target.String())
	}
	host = req.Host
	if host == "" {
		host = req.URL.Host
	}
	if host == "" || !httpguts.ValidHostHeader(host) {
		return "", requestURI{}, "", fmt.Errorf("%w: host %q is empty or invalid", ErrInvalidRequest, host)
	}
	return method, target, host, nil
}

// requestURI is a request target as url.URL.RequestURI returns it: path,
// then "?" and query when hasQuery.
type requestURI struct {
	path, query string
	hasQuery    bool
}

// targetParts returns u.RequestURI() in parts, without joining them.
func targetParts(u *url.URL) requestURI {
	path := u.Opaque
	if path == "" {
		if path = u.EscapedPath(); path == "" {
			path = "/"
		}
	} else if strings.HasPrefix(path, "//") {
		path = u.Scheme + ":" + path
	}
	return requestURI{path: path, query: u.RawQuery, hasQuery: u.ForceQuery || u.RawQuery != ""}
}

// String returns the target whole.
func (t requestURI) String() string {
	if t.hasQuery {
		return t.path + "?" + t.query
	}
	return t.path
}

// valid reports whether validTarget holds for the whole target. With a
// query the whole is never "*", and path, never empty, starts it: the
// '?' after path matches no byte of the prefixes validTarget wants.
func (t requestURI) valid() bool {
	if !t.hasQuery {
		return validTarget(t.path)
	}
	return t.path != "*" && validTarget(t.path) && noSpaceOrControl(t.query)
}

// noSpaceOrControl reports whether s holds no space, control byte or DEL,
// as validTarget wants of a whole target.
func noSpaceOrControl[T string | []byte](s T) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] == 0x7f {
			return false
		}
	}
	return true
}

// validateHeader returns an error wrapping ErrInvalidRequest for the first
// invalid field name or value of h, as net/http's Transport refuses them.
func validateHeader(h http.Header) error {
	for name, values := range h {
		if !httpguts.ValidHeaderFieldName(name) {
			return fmt.Errorf("%w: invalid header field name %q", ErrInvalidRequest, name)
		}
		for _, v := range values {
			if !httpguts.ValidHeaderFieldValue(v) {
				return fmt.Errorf("%w: invalid header field value for %q", ErrInvalidRequest, name)
			}
		}
	}
	return nil
}

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !httpguts.IsTokenRune(rune(s[i])) {
			return false
		}
	}
	return true
}

// validTarget reports whether s can stand between the method and the
// version: origin-form, absolute-form or "*", without space or control
// byte (RFC 9112 §3.2).
func validTarget[T string | []byte](s T) bool {
	if string(s) != "*" && !hasPrefix(s, "/") && !hasPrefix(s, "http://") && !hasPrefix(s, "https://") {
		return false
	}
	return noSpaceOrControl(s)
}

func hasPrefix[T string | []byte](s T, prefix string) bool {
	if len(s) < len(prefix) {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		if s[i] != prefix[i] {
			return false
		}
	}
	return true
}

// sendsZeroLength reports whether a bodyless request carries
// "Content-Length: 0", as net/http sends it for methods that normally have
// a body: some servers answer 411 Length Required without it.
func sendsZeroLength(method string) bool {
	return method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch
}

// writeRequest writes the head of a bodyless request to w, without
// flushing. The header must have been validated.
func writeRequest(w *bufio.Writer, req *http.Request, method string, target requestURI, host string) {
	w.WriteString(method)
	w.WriteByte(' ')
	w.WriteString(target.path)
	if target.hasQuery {
		w.WriteByte('?')
		w.WriteString(target.query)
	}
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(host)
	w.WriteString("\r\n")
	for name, values := range req.Header {
		if skippedHeader(name) {
			continue
		}
		for _, v := range values {
			if v == "" && name == "User-Agent" {
				continue // as net/http: an empty User-Agent means send none
			}
			w.WriteString(name)
			w.WriteString(": ")
			w.WriteString(v)
			w.WriteString("\r\n")
		}
	}
	if sendsZeroLength(method) {
		w.WriteString("Content-Length: 0\r\n")
	}
	if req.Close && !httpguts.HeaderValuesContainsToken(req.Header["Connection"], "close") {
		w.WriteString("Connection: close\r\n")
	}
	w.WriteString("\r\n")
}

// hostPort returns the dial address of u's host: the port defaults to 80.
func hostPort(host string) string {
	// A port follows the last colon, unless that colon is inside an IPv6
	// literal's brackets.
	if i := strings.LastIndexByte(host, ':'); i > strings.LastIndexByte(host, ']') {
		if i == len(host)-1 {
			return host + "80"
		}
		return host
	}
	return host + ":80"
}

var writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4<<10) }}
var readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4<<10) }}

// headOf returns h as the head of an exchange, or an error wrapping
// ErrInvalidRequest. It checks what is cheap to check: an address; a
// method that is a token, and not CONNECT; Bytes made of lines that end in
// CRLF (no bare CR or LF), the first of them h.Method, a request target
// validTarget accepts and HTTP/1.1, and the first empty one last, so that
// the upstream receives one head and nothing after it. The fields are the
// caller's to vouch for: they are read only to find an idempotency key,
// and only when the method alone does not make the request replayable.
func headOf(h Head) (requestHead, error) {
	if h.Addr == "" {
		return requestHead{}, fmt.Errorf("%w: no upstream address", ErrInvalidRequest)
	}
	m := h.Method
	if !isToken(m) {
		return requestHead{}, fmt.Errorf("%w: method %q is not a token", ErrInvalidRequest, m)
	}
	if m == http.MethodConnect {
		return requestHead{}, fmt.Errorf("%w: CONNECT is not sent on the fast path", ErrInvalidRequest)
	}
	b := h.Bytes
	first, ok := headLines(b)
	if !ok {
		return requestHead{}, fmt.Errorf("%w: head %q is not lines ending in CRLF up to its first empty line, and nothing after it", ErrInvalidRequest, clip(b))
	}
	line := b[:first]
	const version = " HTTP/1.1"
	if len(line) <= len(m)+1+len(version) || string(line[:len(m)]) != m || line[len(m)] != ' ' ||
		string(line[len(line)-len(version):]) != version || !validTarget(line[len(m)+1:len(line)-len(version)]) {
		return requestHead{}, fmt.Errorf("%w: request line %q is not %s, a request target and HTTP/1.1", ErrInvalidRequest, clip(line), m)
	}
	return requestHead{raw: b, method: m, replayable: idempotent(m) || hasIdempotencyKey(b[first+2:]), close: h.Close}, nil
}

// headLines reports whether b is lines that end in CRLF, with no CR or LF
// elsewhere, of which the first empty one is the last, and returns the
// length of the first line without its CRLF. It looks for the CRs, each
// of which must end a line, then counts the LFs: one more than the lines
// found is a bare LF. (Two searches per line cost the lean path more than
// a microsecond on a browser's head.)
func headLines(b []byte) (first int, ok bool) {
	if len(b) < 4 || string(b[len(b)-4:]) != "\r\n\r\n" {
		return 0, false
	}
	lines := 0
	for start := 0; start < len(b); lines++ {
		n := bytes.IndexByte(b[start:], '\r') // the line without its CRLF
		if n < 0 || start+n+1 == len(b) || b[start+n+1] != '\n' {
			return 0, false
		}
		if start == 0 {
			first = n
		}
		if n == 0 && start+2 != len(b) {
			return 0, false // an empty line before the last
		}
		start += n + 2
	}
	if bytes.Count(b, lf) != lines {
		return 0, false
	}
	return first, true
}

var lf = []byte{'\n'}

var (
	idempotencyKey  = []byte("idempotency-key:")
	xIdempotencyKey = []byte("x-idempotency-key:")
)

// hasIdempotencyKey reports whether the field lines of a head have an
// Idempotency-Key or X-Idempotency-Key field, whatever the case of its
// name, as isReplayable finds one in a request's Header, where a server
// that parsed the head would have put it.
func hasIdempotencyKey(fields []byte) bool {
	for len(fields) > 0 {
		if hasFoldPrefix(fields, idempotencyKey) || hasFoldPrefix(fields, xIdempotencyKey) {
			return true
		}
		i := bytes.IndexByte(fields, '\n')
		if i < 0 {
			break
		}
		fields = fields[i+1:]
	}
	return false
}

func hasFoldPrefix(b, prefix []byte) bool {
	return len(b) >= len(prefix) && bytes.EqualFold(b[:len(prefix)], prefix)
}

// clip returns at most the first 64 bytes of b, for an error message.
func clip(b []byte) []byte {
	return b[:min(len(b), 64)]
}
