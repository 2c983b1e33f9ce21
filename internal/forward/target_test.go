package forward

import (
	"bufio"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

func TestParseTargetNormalises(t *testing.T) {
	for _, tc := range []struct {
		in   string
		def  uint16
		want string
		host string
	}{
		{"example.com:443", 443, "example.com:443", "example.com"},
		{"Example.COM", 80, "example.com:80", "example.com"},
		{"example.com.:8080", 80, "example.com:8080", "example.com"},
		{"example.com:", 443, "example.com:443", "example.com"},
		{"example.com:0080", 443, "example.com:80", "example.com"},
		{"bücher.example", 80, "xn--bcher-kva.example:80", "xn--bcher-kva.example"},
		{"BÜCHER.example:443", 443, "xn--bcher-kva.example:443", "xn--bcher-kva.example"},
		{"xn--bcher-kva.example", 80, "xn--bcher-kva.example:80", "xn--bcher-kva.example"},
		{"my_host.internal", 80, "my_host.internal:80", "my_host.internal"},
		{"192.0.2.1", 80, "192.0.2.1:80", "192.0.2.1"},
		{"192.0.2.1:8443", 443, "192.0.2.1:8443", "192.0.2.1"},
		{"[2001:DB8::1]", 80, "[2001:db8::1]:80", "2001:db8::1"},
		{"[2001:db8:0:0::1]:443", 443, "[2001:db8::1]:443", "2001:db8::1"},
		{"[::ffff:192.0.2.1]:80", 80, "192.0.2.1:80", "192.0.2.1"},
		{"[::1]:8080", 80, "[::1]:8080", "::1"},
		{"localhost:80", 80, "localhost:80", "localhost"},
		{"1.example", 80, "1.example:80", "1.example"},
	} {
		got, err := ParseTarget(tc.in, tc.def)
		if err != nil {
			t.Errorf("ParseTarget(%q): %v", tc.in, err)
			continue
		}
		if got.String() != tc.want || got.Host() != tc.host {
			t.Errorf("ParseTarget(%q) = %q host %q; want %q host %q", tc.in, got, got.Host(), tc.want, tc.host)
		}
		again, err := ParseTarget(got.String(), 1)
		if err != nil || again != got {
			t.Errorf("%q does not parse back to itself: %v %v", got, again, err)
		}
	}
}

func TestParseTargetRefuses(t *testing.T) {
	for _, tc := range []struct{ in, why string }{
		{"", "empty authority"},
		{":443", "empty host"},
		{".:443", "empty host"},
		{"example.com:0", "out of range"},
		{"example.com:65536", "out of range"},
		{"example.com:123456", "out of range"},
		{"example.com:http", "not a number"},
		{"example.com:+80", "not a number"},
		{"example.com:-1", "not a number"},
		{"2001:db8::1", "brackets"},
		{"2001:db8::1:443", "brackets"},
		{"[2001:db8::1", "without ']'"},
		{"[2001:db8::1]x", "after ']'"},
		{"[192.0.2.1]:80", "no IPv6 address"},
		{"[fe80::1%25eth0]:80", "zone"},
		{"[fe80::1%eth0]:80", "zone"},
		{"exa mple.com", "not allowed"},
		{"exam%ple.com", "not allowed"},
		{"example..com", "empty label"},
		{"-example.com", "starts or ends with '-'"},
		{"example-.com", "starts or ends with '-'"},
		{strings.Repeat("a", 64) + ".com", "longer than 63"},
		{strings.Repeat("abcdefghi.", 26) + "com", "longer than 253"},
		{"127.1", "numeric host"},
		{"0x7f.0.0.1", "numeric host"},
		{"2130706433", "numeric host"},
		{"127.000.000.001", "numeric host"},
		{"example.0x1f", "numeric host"},
		{"xn--zz.example", "punycode"},
		{"\xff.example", "UTF-8"},
		{"a\u200d.example", "internationalised"},
	} {
		_, err := ParseTarget(tc.in, 443)
		if err == nil {
			t.Errorf("ParseTarget(%q) accepted", tc.in)
			continue
		}
		var te *TargetError
		if !errors.Is(err, ErrBadTarget) || !errors.As(err, &te) || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("ParseTarget(%q) = %v; want a TargetError about %q", tc.in, err, tc.why)
		}
	}
}

// TestTargetOf reads requests as net/http's server does, from their bytes.
func TestTargetOf(t *testing.T) {
	for _, tc := range []struct {
		name, raw string
		want      string // "" when refused
		err       error
		why       string
	}{
		{"absolute", "GET http://Example.COM/x?y HTTP/1.1\r\nHost: other.example\r\n\r\n", "example.com:80", nil, ""},
		{"absolute with port", "GET http://example.com:8080/ HTTP/1.1\r\nHost: example.com:8080\r\n\r\n", "example.com:8080", nil, ""},
		{"absolute HTTP/1.0", "GET http://192.0.2.1/ HTTP/1.0\r\n\r\n", "192.0.2.1:80", nil, ""},
		{"upper-case scheme", "GET HTTP://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n", "example.com:80", nil, ""},
		{"connect", "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", "example.com:443", nil, ""},
		{"connect no port", "CONNECT example.com HTTP/1.1\r\nHost: example.com\r\n\r\n", "example.com:443", nil, ""},
		{"connect ipv6", "CONNECT [2001:db8::1]:8443 HTTP/1.1\r\nHost: [2001:db8::1]:8443\r\n\r\n", "[2001:db8::1]:8443", nil, ""},
		{"origin-form", "GET /x HTTP/1.1\r\nHost: example.com\r\n\r\n", "", ErrOriginForm, ""},
		{"asterisk", "OPTIONS * HTTP/1.1\r\nHost: example.com\r\n\r\n", "", ErrOriginForm, ""},
		{"https", "GET https://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n", "", ErrBadTarget, "CONNECT"},
		{"ftp", "GET ftp://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n", "", ErrBadTarget, "only http://"},
		{"userinfo", "GET http://u:p@example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n", "", ErrBadTarget, "userinfo"},
		{"connect path", "CONNECT /path HTTP/1.1\r\nHost: example.com\r\n\r\n", "", ErrBadTarget, "authority-form"},
		{"bad authority", "GET http://127.1/ HTTP/1.1\r\nHost: x\r\n\r\n", "", ErrBadTarget, "numeric"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(tc.raw)))
			if err != nil {
				t.Fatalf("ReadRequest: %v", err)
			}
			got, err := TargetOf(r)
			if tc.err == nil {
				if err != nil || got.String() != tc.want {
					t.Fatalf("TargetOf = %q, %v; want %q", got, err, tc.want)
				}
				return
			}
			if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.why) {
				t.Fatalf("TargetOf = %q, %v; want %v about %q", got, err, tc.err, tc.why)
			}
		})
	}
	h2 := &http.Request{Method: http.MethodGet, ProtoMajor: 2, Host: "example.com", URL: mustURL(t, "/x")}
	if _, err := TargetOf(h2); !errors.Is(err, ErrBadTarget) || !strings.Contains(err.Error(), "HTTP/2") {
		t.Errorf("HTTP/2 GET: %v", err)
	}
	xc := &http.Request{Method: http.MethodConnect, ProtoMajor: 2, Header: http.Header{":protocol": {"websocket"}}, URL: mustURL(t, "//example.com:443")}
	if _, err := TargetOf(xc); !errors.Is(err, ErrBadTarget) || !strings.Contains(err.Error(), "extended CONNECT") {
		t.Errorf("extended CONNECT: %v", err)
	}
}

// ci:fuzztime 100000x: it reads the target a proxy client asks for.
func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{
		"example.com:443", "EXAMPLE.com.", "[2001:db8::1]:80", "[::ffff:1.2.3.4]", "1.2.3.4:5",
		"bücher.example", "xn--bcher-kva.example", "127.1", "[fe80::1%eth0]", "a..b", ":", "[", "]:80",
	} {
		f.Add(s, uint16(443))
	}
	f.Fuzz(func(t *testing.T, s string, def uint16) {
		got, err := ParseTarget(s, def)
		if err != nil {
			if !errors.Is(err, ErrBadTarget) {
				t.Fatalf("error %v does not match ErrBadTarget", err)
			}
			return
		}
		if !got.IsValid() || got.Port() == 0 {
			t.Fatalf("ParseTarget(%q) = %+v: no port", s, got)
		}
		key := got.String()
		if strings.ToLower(key) != key || strings.HasSuffix(got.Host(), ".") || strings.ContainsAny(key, " %@/\\") {
			t.Fatalf("ParseTarget(%q) = %q: not normalised", s, key)
		}
		for i := 0; i < len(key); i++ {
			if key[i] >= 0x80 {
				t.Fatalf("ParseTarget(%q) = %q: not ASCII", s, key)
			}
		}
		// The key is a fixed point: it parses back to the same Target.
		again, err := ParseTarget(key, 1)
		if err != nil || again != got {
			t.Fatalf("ParseTarget(%q) = %q, which parses back to %q, %v", s, key, again, err)
		}
		if a := got.Addr(); a.IsValid() && (a.Is4In6() || a.Zone() != "") {
			t.Fatalf("ParseTarget(%q): address %v not canonical", s, a)
		}
	})
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
