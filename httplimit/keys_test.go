package httplimit_test

import (
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/httplimit"
)

func TestKeyFuncs(t *testing.T) {
	proxies, err := clientkey.ParseProxySet([]string{"10.0.0.0/8"})
	if err != nil {
		t.Fatal(err)
	}
	behindProxy := &clientkey.Resolver{Trusted: proxies, Header: clientkey.HeaderXForwardedFor}
	type ctxUser struct{}
	user := func(r *http.Request) string { s, _ := r.Context().Value(ctxUser{}).(string); return s }

	for _, tc := range []struct {
		name   string
		key    httplimit.KeyFunc
		remote string
		host   string
		header http.Header
		want   string
	}{
		{"peer IPv4", httplimit.ByClientIP(nil), "192.0.2.7:4000", "", nil, "192.0.2.7"},
		{"peer IPv6 /64", httplimit.ByClientIP(nil), "[2001:db8:1:2:3:4:5:6]:4000", "", nil, "2001:db8:1:2::/64"},
		{"peer IPv4-mapped", httplimit.ByClientIP(nil), "[::ffff:192.0.2.7]:4000", "", nil, "192.0.2.7"},
		{"unreadable peer shares one key", httplimit.ByClientIP(nil), "@", "", nil, "invalid"},
		{"untrusted peer's header ignored", httplimit.ByClientIP(behindProxy), "192.0.2.7:1", "", http.Header{"X-Forwarded-For": {"198.51.100.9"}}, "192.0.2.7"},
		{"trusted proxy's header", httplimit.ByClientIP(behindProxy), "10.1.2.3:1", "", http.Header{"X-Forwarded-For": {"6.6.6.6, 198.51.100.9, 10.9.9.9"}}, "198.51.100.9"},
		{"host port stripped, lower-cased", httplimit.ByHost(), "", "Example.COM:8443", nil, "example.com"},
		{"host without port", httplimit.ByHost(), "", "example.com", nil, "example.com"},
		{"host IPv6 literal", httplimit.ByHost(), "", "[2001:DB8::1]:443", nil, "2001:db8::1"},
		{"host bare IPv6", httplimit.ByHost(), "", "2001:db8::1", nil, "2001:db8::1"},
		{"no host: not limited", httplimit.ByHost(), "", "", nil, ""},
		{"header", mustKey(httplimit.ByHeader("x-tenant")), "", "", http.Header{"X-Tenant": {"acme", "other"}}, "acme"},
		{"header absent", mustKey(httplimit.ByHeader("X-Tenant")), "", "", nil, ""},
		{"basic auth", httplimit.ByBasicAuthUser(), "", "", http.Header{"Authorization": {"Basic YWxpY2U6c2VjcmV0"}}, "alice"},
		{"no basic auth", httplimit.ByBasicAuthUser(), "", "", http.Header{"Authorization": {"Bearer xyz"}}, ""},
		{"user from context", mustKey(httplimit.ByUser(user)), "", "", nil, "bob"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr, r.Host = tc.remote, tc.host
			if tc.header != nil {
				r.Header = tc.header
			}
			if tc.name == "user from context" {
				r = r.WithContext(contextWith(r, ctxUser{}, "bob"))
			}
			if got := tc.key(r); got != tc.want {
				t.Errorf("key %q, want %q", got, tc.want)
			}
			// Twice: the second answer comes from ByClientIP's cache.
			if got := tc.key(r); got != tc.want {
				t.Errorf("second key %q, want %q", got, tc.want)
			}
		})
	}
}

func TestByClientIPAllocatesNothingForAKnownClient(t *testing.T) {
	key := httplimit.ByClientIP(nil)
	for _, remote := range []string{"192.0.2.7:4000", "[2001:db8::1]:4000"} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = remote
		key(r)
		if n := testing.AllocsPerRun(100, func() { key(r) }); n != 0 {
			t.Errorf("%s: %v allocations per key, want 0", remote, n)
		}
	}
}

// TestByClientIPRemembersOnlyWhatThePeerDecides sends, over one
// RemoteAddr, requests whose forwarding header names a different client
// each time: from a trusted proxy every request must be keyed by its own
// header (a proxy carries many clients over one connection, so nothing
// may be remembered for its RemoteAddr), from an untrusted peer by the
// peer alone. Then it fills the cache far past its size with distinct
// RemoteAddrs and checks each is still keyed as itself.
func TestByClientIPRemembersOnlyWhatThePeerDecides(t *testing.T) {
	proxies, err := clientkey.ParseProxySet([]string{"10.0.0.0/8"})
	if err != nil {
		t.Fatal(err)
	}
	key := httplimit.ByClientIP(&clientkey.Resolver{Trusted: proxies, Header: clientkey.HeaderXForwardedFor})
	for i := range 50 {
		client := "198.51.100." + strconv.Itoa(i+1)
		for _, tc := range []struct{ remote, want string }{
			{"10.1.2.3:5000", client},       // trusted: the header decides
			{"192.0.2.7:5000", "192.0.2.7"}, // untrusted: the header is ignored
		} {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = tc.remote
			r.Header.Set("X-Forwarded-For", client)
			if got := key(r); got != tc.want {
				t.Fatalf("request %d from %s for %s: key %q, want %q", i, tc.remote, client, got, tc.want)
			}
		}
	}

	var remotes []string
	for i := range 5000 {
		remotes = append(remotes, "192.0."+strconv.Itoa(i/250)+"."+strconv.Itoa(i%250)+":"+strconv.Itoa(1000+i))
	}
	plain := httplimit.ByClientIP(nil)
	for round := range 3 {
		for _, i := range rand.Perm(len(remotes)) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = remotes[i]
			want := remotes[i][:strings.LastIndexByte(remotes[i], ':')]
			if got := plain(r); got != want {
				t.Fatalf("round %d: %s keyed %q, want %q", round, remotes[i], got, want)
			}
		}
	}
}

func TestUnkeyedRequestIsNotLimited(t *testing.T) {
	l := newLimiter(t, httplimit.Config{Key: mustKey(httplimit.ByHeader("X-Tenant")), Policy: httplimit.Policy{Permits: 1}})
	g := newGate()
	ts := startServer(t, l.Wrap(g))
	c := clientFrom(t, "127.0.0.2")
	a := holdOne(t, c, ts.URL, g)
	b := holdOne(t, c, ts.URL, g) // both enter: no key, no limit
	if tot := l.Totals(); tot.Granted != 0 || tot.InUse != 0 {
		t.Errorf("unkeyed requests were counted: %+v", tot)
	}
	g.release <- struct{}{}
	g.release <- struct{}{}
	<-a
	<-b
}

// TestClientIPConnKey checks ClientIPConnKey against ByClientIP: the same
// key, and true only when the peer's address alone decides it.
func TestClientIPConnKey(t *testing.T) {
	proxies, err := clientkey.ParseProxySet([]string{"10.0.0.0/8"})
	if err != nil {
		t.Fatal(err)
	}
	trusting := &clientkey.Resolver{Trusted: proxies, Header: clientkey.HeaderXForwardedFor}
	keyer48, err := clientkey.NewKeyer(0, 48)
	if err != nil {
		t.Fatal(err)
	}
	wide := &clientkey.Resolver{Keyer: keyer48}
	for _, tc := range []struct {
		res    *clientkey.Resolver
		remote string
		xff    string
		want   string
		stable bool
	}{
		{nil, "192.0.2.7:4000", "", "192.0.2.7", true},
		{nil, "[::ffff:192.0.2.7]:4000", "", "192.0.2.7", true},
		{nil, "[2001:db8:1:2::9]:4000", "", "2001:db8:1:2::/64", true},
		{wide, "[2001:db8:1:2::9]:4000", "", "2001:db8:1::/48", true},
		{trusting, "192.0.2.7:4000", "198.51.100.1", "192.0.2.7", true}, // an untrusted peer's header is not read
		{trusting, "10.1.2.3:4000", "198.51.100.1", "", false},          // a trusted proxy's header decides, per request
		{nil, "not an address", "", "", false},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = tc.remote
		if tc.xff != "" {
			r.Header.Set("X-Forwarded-For", tc.xff)
		}
		key, ok := httplimit.ClientIPConnKey(tc.res, r)
		if key != tc.want || ok != tc.stable {
			t.Errorf("%s (xff %q): %q, %v; want %q, %v", tc.remote, tc.xff, key, ok, tc.want, tc.stable)
		}
		if ok {
			if byIP := httplimit.ByClientIP(tc.res)(r); byIP != key {
				t.Errorf("%s: ClientIPConnKey %q, ByClientIP %q", tc.remote, key, byIP)
			}
		}
	}
}
