package clientkey_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/clientkey"
)

func TestParseXForwardedForHop(t *testing.T) {
	tests := []struct {
		name, in string
		want     string // "" when an error is expected
	}{
		{"ipv4", "192.0.2.1", "192.0.2.1"},
		{"ipv4 whitespace", " \t192.0.2.1 ", "192.0.2.1"},
		{"ipv4 port", "192.0.2.1:8080", "192.0.2.1"},
		{"ipv4 port zero", "192.0.2.1:0", "192.0.2.1"},
		{"ipv6", "2001:db8::1", "2001:db8::1"},
		{"ipv6 full", "2001:db8:0:0:1:2:3:4", "2001:db8::1:2:3:4"},
		{"ipv6 bracketed", "[2001:db8::1]", "2001:db8::1"},
		{"ipv6 bracketed port", "[2001:db8::1]:4711", "2001:db8::1"},
		{"ipv6 loopback", "::1", "::1"},
		{"mapped kept", "::ffff:192.0.2.1", "::ffff:192.0.2.1"},
		{"mapped bracketed port", "[::ffff:192.0.2.1]:80", "::ffff:192.0.2.1"},
		{"empty", "", ""},
		{"blank", "  ", ""},
		{"unknown", "unknown", ""},
		{"obfuscated", "_hidden", ""},
		{"host name", "proxy.example", ""},
		{"host name port", "proxy.example:80", ""},
		{"quoted", `"192.0.2.1"`, ""},
		{"ipv4 bracketed", "[192.0.2.1]", ""},
		{"ipv4 bracketed port", "[192.0.2.1]:80", ""},
		{"ipv6 port no brackets", "2001:db8::1:80x", ""},
		{"unbalanced open", "[2001:db8::1", ""},
		{"unbalanced close", "2001:db8::1]", ""},
		{"bracket junk", "[2001:db8::1]x", ""},
		{"empty brackets", "[]", ""},
		{"zone", "fe80::1%eth0", ""},
		{"zone bracketed port", "[fe80::1%eth0]:80", ""},
		{"port too big", "192.0.2.1:65536", ""},
		{"port empty", "192.0.2.1:", ""},
		{"port sign", "192.0.2.1:+80", ""},
		{"leading zero octet", "192.0.2.01", ""},
		{"ipv4 short", "192.0.2", ""},
		{"cidr", "192.0.2.0/24", ""},
		{"two hops", "192.0.2.1 192.0.2.2", ""},
		{"comma", "192.0.2.1,", ""},
		{"inner space", "192.0.2.1 :80", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := clientkey.ParseXForwardedForHop(tt.in)
			checkHop(t, "X-Forwarded-For hop", tt.in, a, err, tt.want)
		})
	}
}

func TestParseForwardedElement(t *testing.T) {
	tests := []struct {
		name, in   string
		want       string // "" when an error is expected
		obfuscated bool   // the error wraps ErrObfuscated
	}{
		{"rfc ipv4", "for=192.0.2.60;proto=http;by=203.0.113.43", "192.0.2.60", false},
		{"rfc ipv6 port", `For="[2001:db8:cafe::17]:4711"`, "2001:db8:cafe::17", false},
		{"ipv6 no port", `for="[2001:db8::1]"`, "2001:db8::1", false},
		{"quoted ipv4", `for="192.0.2.1"`, "192.0.2.1", false},
		{"quoted ipv4 port", `for="192.0.2.1:8080"`, "192.0.2.1", false},
		{"obfuscated port", `for="192.0.2.1:_abc"`, "192.0.2.1", false},
		{"upper-case name", "FOR=192.0.2.1", "192.0.2.1", false},
		{"mixed-case name", "fOr=192.0.2.1", "192.0.2.1", false},
		{"for last", "proto=https;host=example.com;for=192.0.2.1", "192.0.2.1", false},
		{"whitespace around pairs", " for=192.0.2.1 ; proto=https ", "192.0.2.1", false},
		{"empty pairs", ";for=192.0.2.1;;proto=http;", "192.0.2.1", false},
		{"escaped chars", `for="\[2001:db8::\1\]:80"`, "2001:db8::1", false},
		{"other param quoted with separators", `host="a;b,c";for=192.0.2.1`, "192.0.2.1", false},
		{"extension param", "secret=x;for=192.0.2.1", "192.0.2.1", false},
		{"mapped kept", `for="[::ffff:192.0.2.1]"`, "::ffff:192.0.2.1", false},
		{"unknown", "for=unknown", "", true},
		{"unknown upper", "for=UNKNOWN", "", true},
		{"unknown quoted port", `for="unknown:80"`, "", true},
		{"obfuscated", "for=_hidden", "", true},
		{"obfuscated quoted", `for="_SEVKISEK"`, "", true},
		{"obfuscated port", `for="_hidden:_port"`, "", true},
		{"no for", "proto=https;by=192.0.2.1", "", false},
		{"empty", "", "", false},
		{"only separators", ";;", "", false},
		{"duplicate for", "for=192.0.2.1;for=192.0.2.2", "", false},
		{"duplicate for any case", "for=192.0.2.1;FOR=192.0.2.2", "", false},
		{"ipv6 unquoted", "for=[2001:db8::1]", "", false},
		{"ipv4 port unquoted", "for=192.0.2.1:80", "", false},
		{"ipv6 without brackets", `for="2001:db8::1"`, "", false},
		{"ipv4 in brackets", `for="[192.0.2.1]"`, "", false},
		{"zone", `for="[fe80::1%eth0]"`, "", false},
		{"host name", "for=proxy.example", "", false},
		{"empty value", "for=", "", false},
		{"empty quoted", `for=""`, "", false},
		{"unterminated quote", `for="192.0.2.1`, "", false},
		{"control char in quote", "for=\"192.0.2.1\x01\"", "", false},
		{"space around equals", "for = 192.0.2.1", "", false},
		{"no equals", "for", "", false},
		{"junk after value", "for=192.0.2.1 x", "", false},
		{"junk after quote", `for="192.0.2.1"x`, "", false},
		{"comma", "for=192.0.2.1, for=192.0.2.2", "", false},
		{"port too long", `for="192.0.2.1:123456"`, "", false},
		{"port empty", `for="192.0.2.1:"`, "", false},
		{"port letters", `for="192.0.2.1:http"`, "", false},
		{"bracket junk", `for="[2001:db8::1]x"`, "", false},
		{"unbalanced bracket", `for="[2001:db8::1"`, "", false},
		{"bare underscore", "for=_", "", false},
		{"bad obfuscated char", `for="_a+b"`, "", false},
		{"backslash ending quote", `for="192.0.2.1\"`, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := clientkey.ParseForwardedElement(tt.in)
			checkHop(t, "Forwarded element", tt.in, a, err, tt.want)
			if got := errors.Is(err, clientkey.ErrObfuscated); got != tt.obfuscated {
				t.Errorf("errors.Is(err, ErrObfuscated) = %v, want %v (err %v)", got, tt.obfuscated, err)
			}
		})
	}
}

func TestParseForwardedNode(t *testing.T) {
	tests := []struct {
		name, in   string
		want       string
		obfuscated bool
	}{
		{"ipv4", "192.0.2.43", "192.0.2.43", false},
		{"ipv4 port", "192.0.2.43:4711", "192.0.2.43", false},
		{"ipv6", "[2001:db8:cafe::17]", "2001:db8:cafe::17", false},
		{"ipv6 port", "[2001:db8:cafe::17]:4711", "2001:db8:cafe::17", false},
		{"ipv6 obfuscated port", "[2001:db8:cafe::17]:_p-1", "2001:db8:cafe::17", false},
		{"unknown", "unknown", "", true},
		{"unknown mixed case", "Unknown", "", true},
		{"obfuscated", "_gazonk", "", true},
		{"obfuscated with dots", "_a.b-c_d", "", true},
		{"quoted", `"192.0.2.43"`, "", false},
		{"ipv6 bare", "2001:db8::17", "", false},
		{"empty", "", "", false},
		{"port only", ":80", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := clientkey.ParseForwardedNode(tt.in)
			checkHop(t, "Forwarded node", tt.in, a, err, tt.want)
			if got := errors.Is(err, clientkey.ErrObfuscated); got != tt.obfuscated {
				t.Errorf("errors.Is(err, ErrObfuscated) = %v, want %v (err %v)", got, tt.obfuscated, err)
			}
		})
	}
}

// checkHop checks the result of a hop parser against want, an address or
// "" for an error that must name the parser's subject and the input.
func checkHop(t *testing.T, subject, in string, a netip.Addr, err error, want string) {
	t.Helper()
	if want == "" {
		if err == nil {
			t.Fatalf("parsing %q = %v, want error", in, a)
		}
		if a.IsValid() {
			t.Errorf("failed parse returned address %v", a)
		}
		if !strings.HasPrefix(err.Error(), "clientkey: "+subject+" ") {
			t.Errorf("error %q does not start with %q", err, "clientkey: "+subject)
		}
		return
	}
	if err != nil {
		t.Fatalf("parsing %q: %v", in, err)
	}
	if a != netip.MustParseAddr(want) {
		t.Errorf("parsing %q = %v, want %v", in, a, want)
	}
}

func TestParseHeader(t *testing.T) {
	tests := []struct {
		in   string
		want clientkey.Header
		ok   bool
	}{
		{"none", clientkey.HeaderNone, true},
		{"NONE", clientkey.HeaderNone, true},
		{"x-forwarded-for", clientkey.HeaderXForwardedFor, true},
		{"X-Forwarded-For", clientkey.HeaderXForwardedFor, true},
		{"forwarded", clientkey.HeaderForwarded, true},
		{"Forwarded", clientkey.HeaderForwarded, true},
		{"", clientkey.HeaderNone, false},
		{"xff", clientkey.HeaderNone, false},
		{"x-real-ip", clientkey.HeaderNone, false},
		{" forwarded", clientkey.HeaderNone, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			h, err := clientkey.ParseHeader(tt.in)
			if (err == nil) != tt.ok || h != tt.want {
				t.Fatalf("ParseHeader(%q) = %v, %v; want %v, ok %v", tt.in, h, err, tt.want, tt.ok)
			}
			if err != nil && !strings.Contains(err.Error(), `"`+tt.in+`"`) {
				t.Errorf("error %q does not name the input", err)
			}
			if err == nil {
				back, err := clientkey.ParseHeader(h.String())
				if err != nil || back != h {
					t.Errorf("ParseHeader(String()) = %v, %v", back, err)
				}
			}
		})
	}
}

func TestHeaderText(t *testing.T) {
	for _, h := range []clientkey.Header{clientkey.HeaderNone, clientkey.HeaderXForwardedFor, clientkey.HeaderForwarded} {
		b, err := h.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back clientkey.Header = -1
		if err := back.UnmarshalText(b); err != nil || back != h {
			t.Errorf("round trip of %v: %v, %v", h, back, err)
		}
	}
	bad := clientkey.Header(7)
	if bad.String() != "Header(7)" {
		t.Errorf("String() = %q, want Header(7)", bad.String())
	}
	if _, err := bad.MarshalText(); err == nil {
		t.Error("MarshalText accepted Header(7)")
	}
	h := clientkey.HeaderForwarded
	if err := h.UnmarshalText([]byte("bogus")); err == nil || h != clientkey.HeaderForwarded {
		t.Errorf("UnmarshalText(bogus) = %v and left %v", err, h)
	}
}
