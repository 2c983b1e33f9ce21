package clientkey_test

import (
	"net/http"
	"net/netip"
	"slices"
	"testing"

	"github.com/seed-a07d1050/portcullis/clientkey"
)

// TestPathFromAgreesWithClientAddr checks PathFrom's promises on every walk
// case: it starts with the client ClientAddrFrom finds, ends with the peer,
// and holds nothing between them but trusted proxies.
func TestPathFromAgreesWithClientAddr(t *testing.T) {
	for _, set := range []struct {
		h     clientkey.Header
		cases []walkCase
	}{{clientkey.HeaderXForwardedFor, xffCases}, {clientkey.HeaderForwarded, forwardedCases}} {
		r := &clientkey.Resolver{Trusted: testTrusted, Header: set.h}
		name := http.CanonicalHeaderKey(set.h.String())
		for _, c := range set.cases {
			peer := parseOrZero(c.peer)
			h := http.Header{}
			if c.lines != nil {
				h[name] = c.lines
			}
			path := r.PathFrom(nil, peer, h)
			if !peer.IsValid() {
				if len(path) != 0 {
					t.Errorf("%s/%s: path %v for an invalid peer, want empty", set.h, c.name, path)
				}
				continue
			}
			client := r.ClientAddrFrom(peer, h)
			if len(path) == 0 || path[0] != client || path[len(path)-1] != peer {
				t.Errorf("%s/%s: path %v, want it to run from %v to %v", set.h, c.name, path, client, peer)
				continue
			}
			for _, hop := range path[1:] {
				if !testTrusted.Contains(hop) {
					t.Errorf("%s/%s: path %v holds untrusted hop %v after the client", set.h, c.name, path, hop)
				}
			}
		}
	}
}

func TestPathFrom(t *testing.T) {
	r := &clientkey.Resolver{Trusted: testTrusted, Header: clientkey.HeaderXForwardedFor}
	tests := []struct {
		name string
		peer string
		xff  []string
		want []string
	}{
		{"untrusted peer", "203.0.113.5", []string{"198.51.100.1"}, []string{"203.0.113.5"}},
		{"client spoofs the left part", "10.0.0.1", []string{"6.6.6.6, 198.51.100.1"}, []string{"198.51.100.1", "10.0.0.1"}},
		{"trusted hops kept in order", "10.0.0.1", []string{"6.6.6.6, 198.51.100.1, 10.0.0.2, 192.0.2.7"},
			[]string{"198.51.100.1", "10.0.0.2", "192.0.2.7", "10.0.0.1"}},
		{"hops across lines", "10.0.0.1", []string{"6.6.6.6, 198.51.100.1", "10.0.0.9"},
			[]string{"198.51.100.1", "10.0.0.9", "10.0.0.1"}},
		{"all trusted", "10.0.0.1", []string{"10.0.0.3, 10.0.0.2"}, []string{"10.0.0.3", "10.0.0.2", "10.0.0.1"}},
		{"broken chain", "10.0.0.1", []string{"198.51.100.1, garbage"}, []string{"10.0.0.1"}},
	}
	for _, tt := range tests {
		got := r.PathFrom(nil, netip.MustParseAddr(tt.peer), http.Header{"X-Forwarded-For": tt.xff})
		var want []netip.Addr
		for _, s := range tt.want {
			want = append(want, netip.MustParseAddr(s))
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: PathFrom = %v, want %v", tt.name, got, want)
		}
	}
}

func parseOrZero(s string) netip.Addr {
	if s == "" {
		return netip.Addr{}
	}
	return netip.MustParseAddr(s)
}
