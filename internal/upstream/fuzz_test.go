package upstream

import (
	"bufio"
	"bytes"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// FuzzRequestHead checks that a request head the fast path accepts parses
// back, with net/http's server parser, to the method, target, Host and
// header field it was given, and that one it refuses is refused with
// ErrInvalidRequest, never a panic. The target, taken in parts, must be
// url.URL.RequestURI's, valid exactly when validTarget finds that whole.
// ci:fuzztime 100000x: it reads what a client sends, as it goes upstream.
func FuzzRequestHead(f *testing.F) {
	f.Add("GET", "/a/b", "q=1", "example.test:8080", "X-Test", "value")
	f.Add("POST", "/", "", "[::1]:80", "Idempotency-Key", "k")
	f.Add("G T", "/", "", "h", "X", "v")
	f.Add("GET", "/", "a\r\nb", "h", "X", "v")
	f.Add("GET", "/", "", "h", "X Bad", "v")
	f.Add("GET", "/", "", "h", "X", "a\r\nInjected: 1")
	f.Add("OPTIONS", "*", "", "h", "X", "\tpadded ")
	f.Fuzz(func(t *testing.T, method, path, query, host, name, value string) {
		req := &http.Request{
			Method: method,
			URL:    &url.URL{Scheme: "http", Host: "127.0.0.1:1", Path: path, RawQuery: query},
			Host:   host,
			Header: http.Header{name: {value}},
		}
		if parts, whole := targetParts(req.URL), req.URL.RequestURI(); parts.String() != whole || parts.valid() != validTarget(whole) {
			t.Fatalf("target %q in parts %+v: whole %q, valid %v; validTarget says %v", whole, parts, parts.String(), parts.valid(), validTarget(whole))
		}
		m, target, h, err := requestTarget(req)
		if err == nil {
			err = validateHeader(req.Header)
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("refused with %v, want ErrInvalidRequest", err)
			}
			return
		}
		var buf bytes.Buffer
		w := bufio.NewWriter(&buf)
		writeRequest(w, req, m, target, h)
		w.Flush()
		got, err := http.ReadRequest(bufio.NewReader(&buf))
		if err != nil {
			t.Fatalf("accepted head does not parse: %v\n%q", err, buf.String())
		}
		if got.Method != m || got.RequestURI != target.String() || got.Host != h {
			t.Fatalf("parsed %q %q host %q, sent %q %q host %q", got.Method, got.RequestURI, got.Host, m, target, h)
		}
		if skippedHeader(http.CanonicalHeaderKey(name)) || name != http.CanonicalHeaderKey(name) {
			return
		}
		if v := got.Header.Get(name); v != strings.Trim(value, " \t") {
			t.Fatalf("header %q parsed as %q, sent %q", name, v, value)
		}
	})
}
