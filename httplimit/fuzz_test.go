package httplimit

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

func FuzzHostKey(f *testing.F) {
	for _, s := range []string{"", "example.com", "Example.COM:8443", "[2001:DB8::1]:443", "[::1]", "[::1", "2001:db8::1", ":80", "a:b:c", "ÄBC:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		k := hostKey(host)
		if strings.ContainsAny(k, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") {
			t.Errorf("hostKey(%q) = %q has upper case", host, k)
		}
		if !strings.Contains(asciiLower(host), k) {
			t.Errorf("hostKey(%q) = %q is not part of the host", host, k)
		}
		if !strings.HasPrefix(host, "[") && strings.Count(host, ":") == 1 && strings.Contains(k, ":") {
			t.Errorf("hostKey(%q) = %q kept the port", host, k)
		}
		if hostKey(k) != k && !strings.HasPrefix(k, "[") && strings.Count(k, ":") != 1 {
			t.Errorf("hostKey not idempotent on %q: %q then %q", host, k, hostKey(k))
		}
	})
}

func FuzzParseStatusLine(f *testing.F) {
	for _, s := range []string{"HTTP/1.1 101 Switching Protocols\r\n", "HTTP/1.0 200 OK", "HTTP/1.1 403", "HTTP/2 200", "HTTP/1.1 099 x", "HTTP/1.1 2OO", "GET / HTTP/1.1"} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, b []byte, split uint8) {
		code, ok := parseStatusLine(b)
		if ok {
			if code < 100 || code > 999 || !strings.HasPrefix(string(b), "HTTP/1.") {
				t.Fatalf("parseStatusLine(%q) = %d", b, code)
			}
			if again, _ := parseStatusLine(fmt.Appendf(nil, "HTTP/1.1 %03d", code)); again != code {
				t.Fatalf("round trip of %d gave %d", code, again)
			}
		}
		// The hijacked connection sees the same answer however the
		// handler splits its writes.
		for _, connect := range []bool{false, true} {
			c := &hijackedConn{t: &tunnel{connect: connect}}
			at := min(int(split), len(b))
			c.sniff(b[:at])
			c.sniff(b[at:])
			want := ok && (code == http.StatusSwitchingProtocols || (connect && code >= 200 && code < 300))
			if len(b) < statusLineMin {
				want = false
			}
			if c.t.established != want || c.t.decided != (len(b) >= statusLineMin && (!ok || code >= 200 || code == 101)) {
				t.Fatalf("%q split at %d (connect %v): established %v decided %v; parse %d %v",
					b, at, connect, c.t.established, c.t.decided, code, ok)
			}
		}
	})
}

func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
