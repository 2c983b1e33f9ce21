package upstream

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/seed-a07d1050/portcullis/internal/httpfield"
)

// readResponse reads a response head to a request with method from br as
// http.ReadResponse does: the same Response, the same errors, the same
// bytes consumed, but for the Response's Request, which is nil (the
// exchange sets it). The common answer to a proxied request, a complete
// HTTP/1.1 head already buffered with one Content-Length and no field that
// needs more than reading (see simpleResponse), is read here for a
// fraction of http.ReadResponse's allocations; everything else goes to
// http.ReadResponse. One departure: a head with a field name that is not
// a token ("Content-Length : 5"), which http.ReadResponse accepts, is
// refused with an error wrapping ErrMalformedResponse (see
// checkFieldNames). TestReadResponseMatchesNetHTTP and FuzzReadResponse
// hold the two to the same result otherwise.
//
// With fields not nil, a head read here has its header set in *fields
// rather than in a map, and resp.Header is nil (see SendOptions.Fields).
func readResponse(br *bufio.Reader, method string, fields *[]httpfield.Field) (*http.Response, error) {
	if br.Buffered() == 0 {
		if _, err := br.Peek(1); err != nil {
			// What http.ReadResponse answers when the status line cannot
			// be read at all.
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	buf, _ := br.Peek(br.Buffered())
	// Read before the head is consumed: both readers below drop a
	// Connection field that says "close", and with it the names of the
	// hop-by-hop fields it lists.
	named := closeNamed(buf)
	if resp := simpleResponse(buf, method, fields); resp != nil {
		_, _ = br.Discard(int(resp.body.headLen))
		resp.body.r = br
		dropNamed(&resp.resp, fields, named)
		return &resp.resp, nil
	}
	resp, err := http.ReadResponse(br, responseTo(method))
	if resp != nil {
		resp.Request = nil
		dropNamed(resp, nil, named)
	}
	if err == nil {
		if err := checkFieldNames(resp.Header); err != nil {
			return nil, err
		}
	}
	return resp, err
}

// checkFieldNames returns an error wrapping ErrMalformedResponse when a
// name of h is not a token: http.ReadResponse keeps "Content-Length : 5"
// as a field named "Content-Length " and frames the body without it
// (RFC 9112 §5.1). simpleResponse reads token names only, so only the
// heads http.ReadResponse reads need the check.
func checkFieldNames(h http.Header) error {
	bad, found := "", false
	for name := range h {
		if !httpguts.ValidHeaderFieldName(name) && (!found || name < bad) {
			bad, found = name, true // the least, so that the error is always the same
		}
	}
	if found {
		return fmt.Errorf("%w: field name %q", ErrMalformedResponse, bad)
	}
	return nil
}

// closeNamed returns the names a Connection field of the response head at
// the start of buf lists besides "close", when one of them says "close":
// net/http's reading removes such a Connection field whole (shouldClose),
// and a proxy must still remove the fields it names (RFC 9110 §7.6.1),
// or "Connection: close, X-Secret" would pass X-Secret on. Only a head
// wholly in buf is read; nil when there is nothing to remove. It
// allocates only for a head that has such a field.
func closeNamed(buf []byte) []string {
	// Most heads have no Connection field: two vectorised searches rule
	// it out before any line is read. A name in mixed case ("cOnnection")
	// is read by the line scan only when one of them matched.
	if !bytes.Contains(buf, []byte("onnection")) && !bytes.Contains(buf, []byte("ONNECTION")) {
		return nil
	}
	end := bytes.Index(buf, []byte("\r\n\r\n"))
	if end < 0 {
		return nil
	}
	head := buf[:end+2]
	var values []string
	for len(head) > 0 {
		i := bytes.IndexByte(head, '\n')
		if i < 0 {
			break
		}
		line := head[:i]
		head = head[i+1:]
		const name = "connection:"
		if len(line) > len(name) && bytes.EqualFold(line[:len(name)], []byte(name)) {
			values = append(values, string(bytes.TrimSpace(line[len(name):])))
		}
	}
	if !httpguts.HeaderValuesContainsToken(values, "close") {
		return nil
	}
	var names []string
	for _, v := range values {
		for _, tok := range strings.Split(v, ",") {
			if tok = textproto.TrimString(tok); tok != "" && !strings.EqualFold(tok, "close") {
				names = append(names, textproto.CanonicalMIMEHeaderKey(tok))
			}
		}
	}
	return names
}

// dropNamed removes from resp (or from *fields, for a head read as fields)
// the fields named, once the reader has removed the Connection field that
// named them (resp.Close).
func dropNamed(resp *http.Response, fields *[]httpfield.Field, named []string) {
	if len(named) == 0 || !resp.Close {
		return
	}
	if resp.Header == nil && fields != nil {
		*fields = slices.DeleteFunc(*fields, func(f httpfield.Field) bool {
			return slices.ContainsFunc(named, func(n string) bool { return strings.EqualFold(n, f.Name) })
		})
		return
	}
	for _, n := range named {
		delete(resp.Header, n)
	}
}

// headRequest stands for any request with method HEAD when a response is
// read by http.ReadResponse, which reads nothing of the request but its
// method, and reads it only to tell whether the response may have a body:
// not after a HEAD. It is only read, never changed, so it is shared.
var headRequest = &http.Request{Method: http.MethodHead}

// responseTo returns the request http.ReadResponse is given for a
// response to method: headRequest for HEAD, and nil, which it reads as a
// GET, for any other method, CONNECT aside, which the fast path never
// sends.
func responseTo(method string) *http.Request {
	if method == http.MethodHead {
		return headRequest
	}
	return nil
}

// maxSimpleFields bounds the header fields simpleResponse reads; a head
// with more goes to http.ReadResponse.
const maxSimpleFields = 64

// fastResponse is a Response read by simpleResponse and its body, in one
// allocation, with room for the values of a header of the usual size.
type fastResponse struct {
	resp   http.Response
	body   fixedBody
	head   string    // the whole head, to its blank line: every string above is a slice of it
	values [8]string // the header's values, when they fit
}

// simpleResponse parses the response head at the start of buf, or returns
// nil when buf does not start with a head it reads exactly as
// http.ReadResponse would: a whole head (every line ending in CRLF) with
// the status line "HTTP/1.1 NNN reason", NNN from 200 to 599 but not 204
// or 304; fields of token names and valid values, none folded; exactly
// one Content-Length, plain digits; no Transfer-Encoding, Trailer or
// Pragma. After a HEAD the body is empty and ContentLength is the field's
// value, as net/http reads it. Anything else, malformed or merely
// rare, is left to http.ReadResponse, so that every decision about a
// response's framing and validity stays net/http's.
//
// With fields not nil, the header goes to *fields, replacing what it held,
// and resp.Header is nil. resp.Request is nil.
func simpleResponse(buf []byte, method string, fields *[]httpfield.Field) *fastResponse {
	r := &fastResponse{}
	if !r.parse(buf, method, fields) {
		return nil
	}
	return r
}

// parse is simpleResponse into r, which must be zero; false, r left in
// any state, when simpleResponse would return nil.
func (r *fastResponse) parse(buf []byte, method string, fields *[]httpfield.Field) bool {
	end := bytes.Index(buf, []byte("\r\n\r\n"))
	if end < 0 {
		return false
	}
	head := buf[:end+2] // every line with its CRLF
	// Bare CR or LF anywhere: http.ReadResponse's line reading decides.
	lines := 0
	for i, c := range head {
		switch c {
		case '\n':
			if i == 0 || head[i-1] != '\r' {
				return false
			}
			lines++
		case '\r':
			if i+1 >= len(head) || head[i+1] != '\n' {
				return false
			}
		}
	}
	nfields := lines - 1
	if nfields < 1 || nfields > maxSimpleFields {
		return false
	}
	code, ok := simpleStatusLine(head)
	if !ok {
		return false
	}
	// One string for the whole head: the fields are slices of it.
	s := string(buf[:end+4])
	r.head = s
	resp := &r.resp
	lineEnd := bytes.IndexByte(head, '\r')
	resp.Proto, resp.ProtoMajor, resp.ProtoMinor = s[:8], 1, 1
	resp.Status = s[9:lineEnd]
	resp.StatusCode = code
	var h http.Header
	var strs []string
	if fields == nil {
		h = make(http.Header, nfields)
		strs = r.values[:]
		if nfields > len(strs) {
			strs = make([]string, nfields)
		}
	} else {
		*fields = (*fields)[:0]
	}
	clLines := 0
	var cl string
	closes := false // a Connection field names "close"
	for pos := lineEnd + 2; pos < len(head); {
		n := bytes.IndexByte(head[pos:], '\r')
		line := s[pos : pos+n]
		pos += n + 2
		key, value, ok := simpleField(line)
		if !ok {
			return false
		}
		switch key {
		case "Transfer-Encoding", "Trailer", "Pragma":
			return false
		case "Content-Length":
			if clLines++; clLines == 1 {
				cl = value
			}
		case "Connection":
			closes = closes || httpguts.HeaderValuesContainsToken([]string{value}, "close")
		}
		if fields != nil {
			*fields = append(*fields, httpfield.Field{Name: key, Value: value})
		} else if vv := h[key]; vv == nil {
			vv, strs = strs[:1:1], strs[1:]
			vv[0] = value
			h[key] = vv
		} else {
			h[key] = append(vv, value)
		}
	}
	if clLines != 1 {
		return false
	}
	length, ok := plainLength(cl)
	if !ok {
		return false
	}
	// As net/http's shouldClose: "Connection: close" ends the connection
	// and is not kept in the header.
	if closes {
		resp.Close = true
		if fields != nil {
			*fields = slices.DeleteFunc(*fields, func(f httpfield.Field) bool { return f.Name == "Connection" })
		} else {
			delete(h, "Connection")
		}
	}
	resp.Header = h
	resp.ContentLength = length
	r.body.headLen = int64(len(head) + 2)
	// A response to HEAD has no body whatever its length says, and keeps
	// that length as its ContentLength, as net/http reads it.
	if length == 0 || method == http.MethodHead {
		resp.Body = http.NoBody
	} else {
		r.body.n = length
		resp.Body = &r.body
	}
	return true
}

// simpleStatusLine returns the status code of head's first line when it is
// "HTTP/1.1 NNN" alone or followed by a space and a reason, with NNN a
// final status that allows a body.
func simpleStatusLine(head []byte) (int, bool) {
	if len(head) < 12 || string(head[:9]) != "HTTP/1.1 " {
		return 0, false
	}
	code := 0
	for _, c := range head[9:12] {
		if c < '0' || c > '9' {
			return 0, false
		}
		code = code*10 + int(c-'0')
	}
	if code < 200 || code > 599 || code == http.StatusNoContent || code == http.StatusNotModified {
		return 0, false
	}
	if c := head[12]; c != ' ' && c != '\r' {
		return 0, false
	}
	return code, true
}

// simpleField splits a header line (without its CRLF) as net/textproto
// does: the name before the first colon, in canonical form; the value
// without the spaces and tabs around it. It reports false for a line
// textproto would refuse or fold: no colon, a name that is empty or not a
// token, a value byte it refuses, a leading space or tab.
func simpleField(line string) (key, value string, ok bool) {
	colon := -1
	for i := 0; i < len(line); i++ {
		c := line[i]
		if c == ':' {
			colon = i
			break
		}
		if !httpguts.IsTokenRune(rune(c)) {
			return "", "", false
		}
	}
	if colon <= 0 {
		return "", "", false
	}
	v := line[colon+1:]
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return "", "", false
		}
	}
	return textproto.CanonicalMIMEHeaderKey(line[:colon]), textproto.TrimString(v), true
}

// plainLength parses a Content-Length value as net/http does, for values
// of 1 to 18 plain digits (around which it trims spaces and tabs); false
// for anything else, which net/http is left to judge.
func plainLength(v string) (int64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// fixedBody is a body of a known length read from the connection's
// reader, with net/http's body's ends: io.EOF with the last bytes, and
// io.ErrUnexpectedEOF when the connection ends early.
type fixedBody struct {
	r       *bufio.Reader
	n       int64 // bytes left
	headLen int64 // bytes of the head, consumed before the body
}

func (b *fixedBody) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	n, err := b.r.Read(p)
	b.n -= int64(n)
	switch {
	case err == io.EOF && b.n > 0:
		err = io.ErrUnexpectedEOF
	case err == nil && b.n == 0:
		err = io.EOF
	}
	return n, err
}

// Close does nothing: the exchange owns the connection.
func (b *fixedBody) Close() error { return nil }

// ReadSimpleHead reads the final answer's head at the start of b as
// SendHead reads the common one, with fields as SendOptions.Fields: a
// whole HTTP/1.1 head of status 200 to 599 (not 204 or 304) with one plain
// Content-Length and no field that needs more than reading (see
// simpleResponse). It returns the response, without its body
// (http.NoBody; ContentLength says how long it is), and the head's
// length; false when b does not start with such a head, or not yet with a
// whole one: SendHead would read that answer otherwise, through
// http.ReadResponse, and so must whoever reads it instead.
func ReadSimpleHead(b []byte, method string, fields *[]httpfield.Field) (resp *http.Response, headLen int, ok bool) {
	return new(SimpleHeadReader).Read(b, method, fields)
}

// A SimpleHeadReader reads answers' heads as ReadSimpleHead does, into a
// Response of its own that each Read replaces: for a reader of one answer
// after another, one allocation fewer per answer. Its zero value is ready.
//
// It also keeps the last head it read into a field list, with what it
// read: an upstream answering alike repeats its heads byte for byte (its
// Date changes once a second), and a head the same to the byte as the
// last reads the same, so it is copied rather than parsed again.
type SimpleHeadReader struct {
	r fastResponse

	last       string // the last head read with a field list, whole; "" for none
	lastResp   http.Response
	lastFields []httpfield.Field
}

// maxRepeatedHead bounds the head a SimpleHeadReader keeps.
const maxRepeatedHead = 2 << 10

// Read is ReadSimpleHead; resp is valid until the next Read.
func (sr *SimpleHeadReader) Read(b []byte, method string, fields *[]httpfield.Field) (resp *http.Response, headLen int, ok bool) {
	if fields != nil && sr.repeats(b) {
		// The method changes nothing here: the body is NoBody and
		// ContentLength the field's value whatever it is.
		sr.r.resp = sr.lastResp
		*fields = append((*fields)[:0], sr.lastFields...)
		return &sr.r.resp, len(sr.last), true
	}
	sr.r = fastResponse{}
	if !sr.r.parse(b, method, fields) {
		return nil, 0, false
	}
	sr.r.resp.Body = http.NoBody
	if fields != nil {
		sr.keep(*fields)
	}
	return &sr.r.resp, int(sr.r.body.headLen), true
}

// repeats reports whether b starts with the last head kept. The kept head
// ends at its first blank line, so b's head then ends at the same place.
func (sr *SimpleHeadReader) repeats(b []byte) bool {
	return sr.last != "" && len(b) >= len(sr.last) && string(b[:len(sr.last)]) == sr.last
}

// keep remembers the head just read and its fields, or forgets the last
// one when this one is too long to keep.
func (sr *SimpleHeadReader) keep(fields []httpfield.Field) {
	if len(sr.r.head) > maxRepeatedHead {
		sr.last, sr.lastResp, sr.lastFields = "", http.Response{}, sr.lastFields[:0]
		return
	}
	sr.last, sr.lastResp = sr.r.head, sr.r.resp
	sr.lastFields = append(sr.lastFields[:0], fields...)
}
