package exchange

import (
	"net/http"
	"net/netip"
	"regexp"
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/internal/config"
)

func TestValidRequestID(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want bool
	}{
		{"", false},
		{"a", true},
		{"6f1d2c0b-9a8e-47f3-b2c1-d0e9f8a7b6c5", true},
		{"Root=1-67891233-abcdef012345678912345678;Parent=53995c3f42cd8ad8", true},
		{strings.Repeat("x", 128), true},
		{strings.Repeat("x", 129), false},
		{"two words", false},
		{`a"b`, false},
		{`a\b`, false},
		{"tab\there", false},
		{"caf\xc3\xa9", false},
		{"del\x7f", false},
	} {
		if got := validRequestID(tc.id); got != tc.want {
			t.Errorf("validRequestID(%q) = %v, want %v", tc.id, got, tc.want)
		}
	}
}

func TestRequestIDOf(t *testing.T) {
	res := &clientkey.Resolver{Trusted: clientkey.MustParseProxySet("10.0.0.0/8")}
	fresh := regexp.MustCompile(`^[0-9a-f]{32}$`)
	proxyPeer, clientPeer := netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("192.0.2.1")
	for _, tc := range []struct {
		name   string
		cfg    config.RequestID
		header http.Header
		peer   netip.Addr
		want   string // "": a new id
	}{
		{"none sent", config.RequestID{}, http.Header{}, proxyPeer, ""},
		{"trusted proxy's kept", config.RequestID{}, http.Header{"X-Request-Id": {"lb-1"}}, proxyPeer, "lb-1"},
		{"client's replaced", config.RequestID{}, http.Header{"X-Request-Id": {"mine"}}, clientPeer, ""},
		{"two values replaced", config.RequestID{}, http.Header{"X-Request-Id": {"a", "b"}}, proxyPeer, ""},
		{"malformed replaced", config.RequestID{}, http.Header{"X-Request-Id": {"a b"}}, proxyPeer, ""},
		{"accept any", config.RequestID{Accept: config.RequestIDAcceptAny}, http.Header{"X-Request-Id": {"mine"}}, clientPeer, "mine"},
		{"own header", config.RequestID{Header: "x-trace"}, http.Header{"X-Trace": {"t-1"}, "X-Request-Id": {"other"}}, proxyPeer, "t-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ids := NewRequestIDs(&tc.cfg, res)
			got := ids.Of(&http.Request{Header: tc.header}, tc.peer)
			if tc.want != "" && got != tc.want || tc.want == "" && !fresh.MatchString(got) {
				t.Errorf("id %q, want %q (\"\": a new one)", got, tc.want)
			}
		})
	}
	if a, b := newRequestID(), newRequestID(); a == b {
		t.Errorf("two new ids alike: %q", a)
	}
}
