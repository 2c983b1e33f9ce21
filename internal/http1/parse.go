package http1

import (
	"bytes"
	"net/http"
	"net/url"

	"golang.org/x/net/http/httpguts"
)

// This file parses a request head exactly as net/http's server does
// (net/textproto's ReadMIMEHeader under http.ReadRequest, then the checks
// of the server's readRequest), with the same verdict for every input:
//
//   - Lines end at LF; a CR right before the LF is dropped. A bare LF ends
//     a line; a CR anywhere else stays in the line, where every field that
//     can hold it refuses it.
//   - The request line is METHOD SP TARGET SP VERSION, split at the first
//     two spaces. The method is a token, the version HTTP/d.d.
//   - A header line needs a colon. A line starting with SP or HTAB continues
//     the field before it (obs-fold): the pieces are trimmed and joined with
//     one space. The first header line may not start with SP or HTAB.
//   - A field name is a token; a name with a space (as in "Host :") parses
//     but the server refuses it. A value holds no CTL byte but HTAB.
//
// The parser is incremental: advance is called with every byte of the head
// read so far and resumes where it stopped, so that a head arriving a byte
// at a time costs linear time, and a bad request line or header line is
// refused as soon as it is complete, as net/http refuses it.

// parseError is a request refused while its head was read: the status to
// answer (400, 431, 501, 505) and the reason net/http gives.
type parseError struct {
	status int
	reason string // net/http's text for 400s it explains; "" for a bare status
}

func (e *parseError) Error() string {
	if e.reason == "" {
		return http.StatusText(e.status)
	}
	return http.StatusText(e.status) + ": " + e.reason
}

var (
	errMalformed     = &parseError{status: http.StatusBadRequest}
	errTooLarge      = &parseError{status: http.StatusRequestHeaderFieldsTooLarge}
	errUnsupportedTE = &parseError{status: http.StatusNotImplemented}
	errVersion       = &parseError{status: http.StatusHTTPVersionNotSupported, reason: "unsupported protocol version"}
	errMissingHost   = &parseError{status: http.StatusBadRequest, reason: "missing required Host header"}
	errMalformedHost = &parseError{status: http.StatusBadRequest, reason: "malformed Host header"}
	errBadHeaderName = &parseError{status: http.StatusBadRequest, reason: "invalid header name"}
	// A Transfer-Encoding on an HTTP/1.0 request, which net/http ignores
	// (see requestReader.transfer).
	errTEOnHTTP10 = &parseError{status: http.StatusBadRequest}
)

// span is a byte range of the head, relative to its first byte.
type span struct{ start, end int }

func (s span) of(b []byte) []byte { return b[s.start:s.end] }

// rawLine is one logical header line as parsed: where its bytes are, and
// where its name and value are when it was not folded.
type rawLine struct {
	raw    span // every byte of the line, continuations and line ends included
	key    span // the name as written (before canonicalization)
	value  span // the value, trimmed; unset when folded
	folded bool // continuation lines follow: the value must be joined
	reused int  // index of the same line in the previous head, or -1
}

// headParser is the incremental state of one head's parse.
type headParser struct {
	pos     int  // offset of the first byte not yet parsed
	scan    int  // offset from which to look for the next LF
	line0   bool // the request line was parsed
	started bool // the first header line was checked for leading space
	done    bool
	headLen int // bytes of the head, final empty line included, once done

	method, target, proto span
	major, minor          int
	url                   *url.URL // set when the target took the slow path
	fastURL               bool     // the target is origin-form that needs no decoding

	lines []rawLine
	cont  []span // physical lines of the logical line being read (folded)

	prev *prevHead // the previous head on the connection, for reuse
}

func (p *headParser) reset(prev *prevHead) {
	if p.lines == nil {
		p.lines = make([]rawLine, 0, 16)
	}
	lines, cont := p.lines[:0], p.cont[:0]
	*p = headParser{lines: lines, cont: cont, prev: prev}
}

// nextLine returns the line starting at p.pos if it is complete: its end
// without the line terminator, and the offset after the LF.
func (p *headParser) nextLine(b []byte, from int) (end, next int, ok bool) {
	start := max(p.scan, from)
	i := bytes.IndexByte(b[start:], '\n')
	if i < 0 {
		p.scan = len(b)
		return 0, 0, false
	}
	i += start
	p.scan = i + 1
	end = i
	if end > from && b[end-1] == '\r' {
		end--
	}
	return end, i + 1, true
}

// advance parses what it can of b, the head read so far. It returns true
// when the head is complete (p.headLen bytes); false when more bytes are
// needed; an error when the bytes already read make it invalid. atEOF says
// that no more bytes will come: an incomplete head is then malformed.
func (p *headParser) advance(b []byte, atEOF bool) (bool, error) {
	if p.done {
		return true, nil
	}
	if !p.line0 {
		end, next, ok := p.nextLine(b, 0)
		if !ok {
			if atEOF {
				// net/http reads a last line without LF as a line, but the
				// head it starts cannot end: the answer is 400 either way.
				return false, errMalformed
			}
			return false, nil
		}
		if err := p.requestLine(b, end); err != nil {
			return false, err
		}
		p.line0 = true
		p.pos, p.scan = next, next
	}
	if !p.started {
		if p.pos >= len(b) {
			if atEOF {
				return false, errMalformed
			}
			return false, nil
		}
		if b[p.pos] == ' ' || b[p.pos] == '\t' {
			return false, errMalformed // "malformed MIME header initial line"
		}
		p.started = true
	}
	for {
		done, err := p.headerLine(b, atEOF)
		if err != nil || !done {
			return false, err
		}
		if p.done {
			return true, nil
		}
	}
}

// headerLine parses the logical line at p.pos. It reports false when the
// line is not complete yet.
func (p *headParser) headerLine(b []byte, atEOF bool) (bool, error) {
	start := p.pos
	// The first physical line, unless an earlier call read it.
	var next int
	if len(p.cont) > 0 {
		next = p.afterLine(b, p.cont[len(p.cont)-1].end)
	} else {
		end, nx, ok := p.nextLine(b, start)
		if !ok {
			if atEOF {
				return false, errMalformed
			}
			return false, nil
		}
		if end == start {
			// The empty line: the head ends here.
			p.done = true
			p.headLen = nx
			return true, nil
		}
		if bytes.IndexByte(b[start:end], ':') < 0 {
			return false, errMalformed // "missing colon"
		}
		p.cont = append(p.cont, span{start, end})
		next = nx
	}
	// Continuation lines: each starts with SP or HTAB. Whether one follows
	// is known only once the next byte is in.
	for {
		if next >= len(b) {
			if atEOF {
				return false, errMalformed
			}
			return false, nil
		}
		if c := b[next]; c != ' ' && c != '\t' {
			break
		}
		end, nx, ok := p.nextLine(b, next)
		if !ok {
			if atEOF {
				return false, errMalformed
			}
			return false, nil
		}
		p.cont = append(p.cont, span{next, end})
		next = nx
	}
	line := rawLine{raw: span{start, next}, reused: -1}
	if i, ok := p.prev.sameLine(len(p.lines), b[start:next]); ok {
		line.reused = i
	} else if err := p.checkLine(b, &line); err != nil {
		return false, err
	}
	p.lines = append(p.lines, line)
	p.cont = p.cont[:0]
	p.pos, p.scan = next, next
	return true, nil
}

// afterLine returns the offset after the LF ending the line whose content
// ends at end.
func (p *headParser) afterLine(b []byte, end int) int {
	if end < len(b) && b[end] == '\r' {
		end++
	}
	return end + 1
}

// checkLine validates the logical line in p.cont as textproto and the
// server do, and records where its name and value are.
func (p *headParser) checkLine(b []byte, line *rawLine) error {
	first := trimOWS(b, p.cont[0])
	colon := first.start + bytes.IndexByte(first.of(b), ':')
	key := span{first.start, colon}
	if !validKeyBytes(key.of(b)) {
		return errMalformed
	}
	line.key = key
	if len(p.cont) == 1 {
		v := span{colon + 1, first.end}
		if !validValueBytes(v.of(b)) {
			return errMalformed
		}
		line.value = trimLeftOWS(b, v)
		return nil
	}
	// Folded: the value is the rest of the first line and every
	// continuation, each trimmed, joined by single spaces.
	if !validValueBytes(b[colon+1 : first.end]) {
		return errMalformed
	}
	for _, c := range p.cont[1:] {
		if !validValueBytes(trimOWS(b, c).of(b)) {
			return errMalformed
		}
	}
	line.folded = true
	return nil
}

// foldedValue appends the joined value of a folded line to dst.
func foldedValue(dst, b []byte, line rawLine, cont []span) []byte {
	start := len(dst)
	dst = append(dst, b[line.key.end+1:trimOWS(b, cont[0]).end]...)
	for _, c := range cont[1:] {
		dst = append(dst, ' ')
		dst = append(dst, trimOWS(b, c).of(b)...)
	}
	// textproto trims only leading whitespace of the joined value.
	i := start
	for i < len(dst) && (dst[i] == ' ' || dst[i] == '\t') {
		i++
	}
	return append(dst[:start], dst[i:]...)
}

// splitFolded recovers the physical lines of a folded logical line.
func splitFolded(b []byte, raw span, cont []span) []span {
	cont = cont[:0]
	pos := raw.start
	for pos < raw.end {
		i := pos + bytes.IndexByte(b[pos:raw.end], '\n')
		end := i
		if end > pos && b[end-1] == '\r' {
			end--
		}
		start := pos
		if len(cont) > 0 {
			for start < end && (b[start] == ' ' || b[start] == '\t') {
				start++
			}
		}
		cont = append(cont, span{start, end})
		pos = i + 1
	}
	return cont
}

func trimOWS(b []byte, s span) span {
	for s.start < s.end && (b[s.start] == ' ' || b[s.start] == '\t') {
		s.start++
	}
	for s.end > s.start && (b[s.end-1] == ' ' || b[s.end-1] == '\t') {
		s.end--
	}
	return s
}

func trimLeftOWS(b []byte, s span) span {
	for s.start < s.end && (b[s.start] == ' ' || b[s.start] == '\t') {
		s.start++
	}
	return s
}

// validKeyBytes reports whether textproto accepts k as a field name: not
// empty, every byte a token byte or a space. (A name with a space is
// refused later by the server, as net/http does.)
func validKeyBytes(k []byte) bool {
	if len(k) == 0 {
		return false
	}
	for _, c := range k {
		if !tokenByte[c] && c != ' ' {
			return false
		}
	}
	return true
}

// validValueBytes reports whether v holds only bytes textproto accepts in
// a field value: VCHAR, obs-text, SP and HTAB.
func validValueBytes(v []byte) bool {
	for _, c := range v {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// tokenByte says which bytes may appear in a token (RFC 9110 tchar).
var tokenByte = func() (t [256]bool) {
	for c := range 256 {
		t[c] = httpguts.IsTokenRune(rune(c)) && c < 0x80
	}
	return t
}()

// requestLine parses and checks the request line b[:end].
func (p *headParser) requestLine(b []byte, end int) error {
	line := b[:end]
	sp1 := bytes.IndexByte(line, ' ')
	if sp1 < 0 {
		return errMalformed
	}
	sp2 := bytes.IndexByte(line[sp1+1:], ' ')
	if sp2 < 0 {
		return errMalformed
	}
	sp2 += sp1 + 1
	p.method = span{0, sp1}
	p.target = span{sp1 + 1, sp2}
	p.proto = span{sp2 + 1, end}
	if i, ok := p.prev.sameRequestLine(line); ok {
		p.major, p.minor = i.major, i.minor
		p.fastURL, p.url = i.fastURL, i.url
		return nil
	}
	if sp1 == 0 {
		return errMalformed // "invalid method"
	}
	for _, c := range p.method.of(b) {
		if !tokenByte[c] {
			return errMalformed
		}
	}
	var ok bool
	if p.major, p.minor, ok = parseVersion(p.proto.of(b)); !ok {
		return errMalformed
	}
	return p.parseTarget(b)
}

// parseVersion is http.ParseHTTPVersion over bytes.
func parseVersion(v []byte) (major, minor int, ok bool) {
	switch string(v) {
	case "HTTP/1.1":
		return 1, 1, true
	case "HTTP/1.0":
		return 1, 0, true
	}
	if len(v) != len("HTTP/X.Y") || string(v[:5]) != "HTTP/" || v[6] != '.' {
		return 0, 0, false
	}
	if !isDigit(v[5]) || !isDigit(v[7]) {
		return 0, 0, false
	}
	return int(v[5] - '0'), int(v[7] - '0'), true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// parseTarget checks the request target as url.ParseRequestURI does. An
// origin-form target whose path needs no decoding and holds only bytes
// that URL.EscapedPath leaves alone (nearly every request) is checked
// here without allocating; anything else is parsed by net/url.
func (p *headParser) parseTarget(b []byte) error {
	t := p.target.of(b)
	if len(t) > 0 && t[0] == '/' && fastPath(t) {
		p.fastURL = true
		return nil
	}
	raw := string(t)
	justAuthority := string(p.method.of(b)) == "CONNECT" && (len(raw) == 0 || raw[0] != '/')
	if justAuthority {
		raw = "http://" + raw
	}
	u, err := url.ParseRequestURI(raw)
	if err != nil {
		return errMalformed
	}
	if justAuthority {
		u.Scheme = "" // as net/http: strip the "http://" it added
	}
	p.url = u
	return nil
}

// fastPath reports whether an origin-form target (starting with '/') can
// be split by hand into Path and RawQuery with url.ParseRequestURI's
// result: no control byte anywhere, and a path of bytes that neither
// decode nor escape.
func fastPath(t []byte) bool {
	q := len(t)
	for i, c := range t {
		if c < ' ' || c == 0x7f {
			return false
		}
		if c == '?' && q == len(t) {
			q = i
		}
	}
	for _, c := range t[:q] {
		if !pathByte[c] {
			return false
		}
	}
	return true
}

// splitTarget returns the Path, RawQuery and ForceQuery of a fast-path
// target, as url.ParseRequestURI sets them.
func splitTarget(t string) (path, query string, force bool) {
	q := -1
	for i := 0; i < len(t); i++ {
		if t[i] == '?' {
			q = i
			break
		}
	}
	if q < 0 {
		return t, "", false
	}
	if q == len(t)-1 {
		return t[:q], "", true // "/p?" : ForceQuery (the only '?' is last)
	}
	return t[:q], t[q+1:], false
}

// pathByte says which bytes a path may hold for URL.EscapedPath to return
// it unchanged, so that ParseRequestURI leaves RawPath empty. It is taken
// from net/url itself rather than written out.
var pathByte = func() (t [256]bool) {
	for c := range 256 {
		s := "/" + string([]byte{byte(c)})
		u := url.URL{Path: s}
		t[c] = c != '%' && c != '?' && u.EscapedPath() == s
	}
	return t
}()
