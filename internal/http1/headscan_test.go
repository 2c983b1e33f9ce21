package http1

import (
	"strings"
	"testing"
)

// TestHeadScanner: the scanner gives the parser's verdicts, and the parts
// and fields of what it accepts.
func TestHeadScanner(t *testing.T) {
	for _, tc := range []struct {
		head    string
		n       int    // -1: refused
		fields  string // name=value;... as Fields hands them out
		folded  bool   // Fields stops at a folded line
		partial bool   // not all of the head yet
	}{
		{head: "GET /a?b HTTP/1.1\r\nHost: x\r\nAccept:  */* \r\n\r\n", fields: "Host=x;Accept=*/*;"},
		{head: "GET / HTTP/1.1\nHost: x\n\n", fields: "Host=x;"},
		{head: "GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n", fields: "Host=x;", folded: true},
		{head: "GET / HTTP/1.1\r\nHost: x\r\n", partial: true},
		{head: "GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\n", n: len("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), fields: "Host=x;"},
		{head: "GET / HTTP/1.1\r\nHo st: x\r\n\r\n", n: -1},
		{head: "GET / HTTP/1.1\r\nHost: x\ry\r\n\r\n", n: -1},
		{head: "GET / HTTP/1.1\r\nHost x\r\n\r\n", n: -1},
		{head: "G@T / HTTP/1.1\r\nHost: x\r\n\r\n", n: -1},
		{head: "GET / HTTP/9\r\nHost: x\r\n\r\n", n: -1},
		{head: "GET / HTTP/1.1\r\n Host: x\r\n\r\n", n: -1},
	} {
		var s HeadScanner
		b := []byte(tc.head)
		n, err := s.Scan(b)
		switch {
		case tc.n < 0:
			if err == nil {
				t.Errorf("%q: accepted (%d bytes), want refused", tc.head, n)
			}
			continue
		case tc.partial:
			if n != 0 || err != nil {
				t.Errorf("%q: %d, %v; want 0, nil (incomplete)", tc.head, n, err)
			}
			continue
		case err != nil:
			t.Errorf("%q: %v", tc.head, err)
			continue
		}
		want := tc.n
		if want == 0 {
			want = len(b)
		}
		if n != want {
			t.Errorf("%q: head of %d bytes, want %d", tc.head, n, want)
		}
		if m, tg, p := string(s.Method(b)), string(s.Target(b)), string(s.Proto(b)); m != "GET" || !strings.HasPrefix(tg, "/") || !strings.HasPrefix(p, "HTTP/1.") {
			t.Errorf("%q: request line %q %q %q", tc.head, m, tg, p)
		}
		var got strings.Builder
		ok := s.Fields(b, func(name, value, line []byte) bool {
			if !strings.HasPrefix(string(line), string(name)+":") || !strings.HasSuffix(string(line), "\n") {
				t.Errorf("%q: line %q of field %q", tc.head, line, name)
			}
			got.WriteString(string(name) + "=" + string(value) + ";")
			return true
		})
		if ok == tc.folded || got.String() != tc.fields {
			t.Errorf("%q: fields %q (all: %v), want %q (all: %v)", tc.head, got.String(), ok, tc.fields, !tc.folded)
		}
	}
}
