package intercept_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/forward"
	"github.com/seed-a07d1050/portcullis/internal/intercept"
)

// FuzzParseRules: any list parses or is refused with an error, never a
// panic; an accepted name rule matches the name it normalises to, and
// parsing is per entry (an entry accepted in a list is accepted alone).
func FuzzParseRules(f *testing.F) {
	for _, s := range []string{"example.com", "*.example.com", "10.0.0.0/8", "[2001:db8::1]", "2001:db8::/32",
		"Bücher.example.", "*.", "a.*.b", "10.1.2.3/8", "fe80::1%eth0", "::ffff:10.0.0.0/104", "host:443", "", "*", "::", "2001:db8::1"} {
		f.Add(s, "other.example")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		r, err := intercept.ParseRules([]string{a, b})
		if err != nil {
			if !strings.Contains(err.Error(), "intercept: rule") {
				t.Fatalf("error without the rule named: %v", err)
			}
			return
		}
		for _, e := range []string{a, b} {
			if _, err := intercept.ParseRules([]string{e}); err != nil {
				t.Fatalf("%q accepted in a list, refused alone: %v", e, err)
			}
			name := strings.TrimSpace(e)
			if strings.Contains(name, "/") || strings.HasPrefix(name, "*.") || strings.HasPrefix(name, "[") {
				continue
			}
			if a, err := netip.ParseAddr(name); err == nil && a.Is6() {
				// A rule may write an IPv6 address bare; a request
				// target brackets it.
				name = "[" + name + "]"
			}
			tg, err := forward.ParseTarget(name, 443)
			if err != nil {
				t.Fatalf("rule %q accepted but its name does not parse as a target: %v", e, err)
			}
			if !r.MatchTarget(tg, nil) {
				t.Fatalf("rule %q does not match its own target %s", e, tg)
			}
		}
	})
}

// FuzzSniffFirstBytes: the verdict never panics, looks at no more than
// SniffMax bytes, and once decided does not change with more bytes.
func FuzzSniffFirstBytes(f *testing.F) {
	for _, s := range [][]byte{{0x16, 0x03, 0x01, 0x02, 0x00, 0x01}, []byte("GET / HTTP/1.1\r\n"), []byte("PRI * HTTP/2.0"), {0x80, 0x01}, {}} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v := intercept.SniffFirstBytes(b)
		if len(b) >= intercept.SniffMax && v == intercept.NeedMore {
			t.Fatalf("undecided after %d bytes: %q", len(b), b)
		}
		if w := intercept.SniffFirstBytes(b[:min(len(b), intercept.SniffMax)]); w != v {
			t.Fatalf("verdict %v on %q but %v on its first %d bytes", v, b, w, intercept.SniffMax)
		}
		for i := range len(b) {
			if p := intercept.SniffFirstBytes(b[:i]); p != intercept.NeedMore && p != v {
				t.Fatalf("verdict %v on %q changed to %v with more bytes", p, b[:i], v)
			}
		}
	})
}

// FuzzParseCA: whatever the PEM, ParseCA returns a CA or an error, never
// a panic; an accepted CA is a CA.
func FuzzParseCA(f *testing.F) {
	ca := sharedCA()
	f.Add(ca.certPEM, ca.keyPEM)
	f.Add(ca.keyPEM, ca.certPEM)
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"))
	f.Fuzz(func(t *testing.T, certPEM, keyPEM []byte) {
		c, err := intercept.ParseCA(certPEM, keyPEM)
		if err == nil && !c.Certificate().IsCA {
			t.Fatal("accepted a certificate that is not a CA")
		}
	})
}
