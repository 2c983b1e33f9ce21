package http1

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/httpfield"
)

// fieldCase is a response to write both ways: the handler's own header,
// the fields passed on, the status and the body.
type fieldCase struct {
	handler http.Header
	fields  []httpfield.Field
	code    int
	body    string
	method  string
}

func (fc fieldCase) String() string {
	return fmt.Sprintf("%s, header %v, fields %v, status %d, body %q", fc.method, fc.handler, fc.fields, fc.code, fc.body)
}

// serveBoth serves fc's request with the fields added to the header map
// (as the relay did before WriteHeaderFields: each value appended under
// its name) and then WriteHeader, and with WriteHeaderFields, and returns
// both outputs.
func serveBoth(t *testing.T, fc fieldCase) (viaMap, viaFields string) {
	t.Helper()
	write := func(useFields bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			h := w.Header()
			for k, vv := range fc.handler {
				h[k] = append([]string(nil), vv...)
			}
			if useFields {
				w.(*response).WriteHeaderFields(fc.code, append([]httpfield.Field(nil), fc.fields...))
			} else {
				for _, f := range fc.fields {
					h[f.Name] = append(h[f.Name], f.Value)
				}
				w.WriteHeader(fc.code)
			}
			if fc.body != "" {
				_, _ = w.Write([]byte(fc.body))
			}
		}
	}
	req := fc.method + " / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
	for i, useFields := range []bool{false, true} {
		s := &ourServer{srv: &Server{Handler: write(useFields), Logger: discardSlog}, rec: &recorder{}}
		out := s.serve([]byte(req), 0).output
		if i == 0 {
			viaMap = out
		} else {
			viaFields = out
		}
	}
	return viaMap, viaFields
}

// fieldNames and fieldValues are what the cases draw from: the names the
// server's decisions depend on, ordinary ones, a non-canonical and an
// invalid name and a trailer-prefixed one; values that are lengths,
// tokens, padded, and carry a line break.
var (
	fieldNames = []string{
		"Content-Type", "Content-Length", "Date", "Connection", "Transfer-Encoding",
		"Content-Encoding", "Trailer", "Upgrade", "X-A", "X-B", "Vary", "Set-Cookie",
		"Alt-Svc", "Keep-Alive", "x-lower", "Bad Name", "Trailer:X-T", "X-T",
	}
	fieldValues = []string{
		"", "text/plain", "text/event-stream", "5", "12", "-1", "x5", "close", "keep-alive",
		"Upgrade", "websocket", "chunked", "gzip", " padded ", "a\r\nb", "X-T", "1, 2",
	}
)

// caseFrom builds a fieldCase from fuzz bytes.
func caseFrom(data []byte) fieldCase {
	next := func() int {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return int(b)
	}
	fc := fieldCase{handler: http.Header{}, method: "GET"}
	codes := []int{200, 201, 204, 206, 304, 404, 500, 503, 100, 103, 101}
	fc.code = codes[next()%len(codes)]
	if next()%4 == 0 {
		fc.method = "HEAD"
	}
	bodies := []string{"", "hello", strings.Repeat("b", 3000)}
	fc.body = bodies[next()%len(bodies)]
	for range next() % 4 {
		k := fieldNames[next()%len(fieldNames)]
		fc.handler[k] = append(fc.handler[k], fieldValues[next()%len(fieldValues)])
	}
	for range next() % 9 {
		fc.fields = append(fc.fields, httpfield.Field{
			Name:  fieldNames[next()%len(fieldNames)],
			Value: fieldValues[next()%len(fieldValues)],
		})
	}
	return fc
}

// TestWriteHeaderFieldsMatchesTheMap holds WriteHeaderFields to adding the
// fields to the header map and calling WriteHeader: the same bytes on the
// wire, for hand-picked responses (an upstream's usual answer, fields
// sharing names with the handler's header, unsorted and repeated names,
// framing fields, declared trailers) and 3000 generated ones.
func TestWriteHeaderFieldsMatchesTheMap(t *testing.T) {
	f := func(name, value string) httpfield.Field { return httpfield.Field{Name: name, Value: value} }
	cases := []fieldCase{
		{http.Header{}, []httpfield.Field{f("Content-Type", "text/plain; charset=utf-8"), f("Date", "Wed, 02 Dec 2026 09:00:00 GMT"), f("Content-Length", "5")}, 200, "hello", "GET"},
		{http.Header{"Alt-Svc": {`h3=":443"`}}, []httpfield.Field{f("Vary", "B"), f("Alt-Svc", "other"), f("Vary", "A"), f("Content-Length", "5")}, 200, "hello", "GET"},
		{http.Header{"Vary": {"Origin"}}, []httpfield.Field{f("X-B", "2"), f("X-A", "1"), f("Vary", "Accept"), f("X-A", "3")}, 404, "", "GET"},
		{http.Header{}, []httpfield.Field{f("Content-Length", "x5")}, 200, "hello", "GET"},
		{http.Header{"Content-Length": {"5"}}, []httpfield.Field{f("Content-Length", "7")}, 200, "hello", "GET"},
		{http.Header{"Trailer": {"X-T"}}, []httpfield.Field{f("X-T", "in head")}, 200, strings.Repeat("b", 3000), "GET"},
		{http.Header{}, []httpfield.Field{f("Trailer", "X-T"), f("X-T", "v")}, 200, "x", "GET"},
		{http.Header{}, []httpfield.Field{f("Connection", "close"), f("Content-Type", "text/event-stream")}, 200, "data: 1\n\n", "GET"},
		{http.Header{}, []httpfield.Field{f("Upgrade", "websocket"), f("Connection", "Upgrade")}, 200, "", "GET"},
		{http.Header{}, []httpfield.Field{f("Content-Length", "5")}, 200, "hello", "HEAD"},
		{http.Header{}, []httpfield.Field{f("X-A", "a\r\nb"), f("Bad Name", "v")}, 503, "", "GET"},
		{http.Header{}, nil, 200, "", "GET"},
		{http.Header{}, []httpfield.Field{f("X-A", "1")}, 103, "", "GET"},
	}
	for _, fc := range cases {
		viaMap, viaFields := serveBoth(t, fc)
		if viaMap != viaFields {
			t.Errorf("%v:\nmap:    %q\nfields: %q", fc, viaMap, viaFields)
		}
		if viaMap == "" {
			t.Errorf("%v: no output: the case checks nothing", fc)
		}
	}
	seed := make([]byte, 24)
	for i := range 3000 {
		for j := range seed {
			seed[j] = byte((i*131 + j*17 + i*j*7) ^ (i >> 3))
		}
		fc := caseFrom(seed)
		if viaMap, viaFields := serveBoth(t, fc); viaMap != viaFields {
			t.Fatalf("case %d, %v:\nmap:    %q\nfields: %q", i, fc, viaMap, viaFields)
		}
	}
}

// FuzzWriteHeaderFields is TestWriteHeaderFieldsMatchesTheMap's generated
// half on arbitrary bytes.
//
// ci:fuzztime 30000x (each input serves two connections)
func FuzzWriteHeaderFields(f *testing.F) {
	f.Add([]byte{0, 0, 1, 0, 3, 0, 1, 1, 3, 2, 2})
	f.Add([]byte{1, 1, 2, 2, 6, 2, 12, 1, 4, 3, 7, 5, 17, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		fc := caseFrom(data)
		if viaMap, viaFields := serveBoth(t, fc); viaMap != viaFields {
			t.Fatalf("%v:\nmap:    %q\nfields: %q", fc, viaMap, viaFields)
		}
	})
}
