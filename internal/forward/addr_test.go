package forward

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"
)

// ResolveTargets resolves a name once and pins the request to the first
// address the policy allows, in the resolver's order; ByTargetAddr keys on
// that address and the Proxy sends the request there, even when the name
// resolves elsewhere by then (the resolver is not asked again).
func TestResolveTargetsPinsTheKeyedAddress(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.WriteString(w, r.Host)
	}))
	ln, err := net.Listen("tcp", "127.0.0.3:0")
	if err != nil {
		t.Skipf("cannot listen on 127.0.0.3: %v", err)
	}
	srv.Listener = ln
	srv.Start()
	defer srv.Close()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	policy, err := NewPolicy(PolicyConfig{Allow: []netip.Prefix{
		netip.MustParsePrefix("127.0.0.3/32"), netip.MustParsePrefix("127.0.0.4/32"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	var lookups atomic.Int32
	resolver := resolverFunc(func(_ context.Context, _, host string) ([]netip.Addr, error) {
		switch host {
		case "multi.test":
			if lookups.Add(1) > 1 { // a second lookup would rebind
				return []netip.Addr{netip.MustParseAddr("127.0.0.4")}, nil
			}
			return []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("127.0.0.3"), netip.MustParseAddr("127.0.0.4")}, nil
		case "refused.test":
			lookups.Add(1)
			return []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("127.0.0.1")}, nil
		}
		lookups.Add(1)
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	})
	p, err := New(Config{Policy: policy, Resolver: resolver, MaxIdleConnsPerTarget: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var key string
	h := p.ResolveTargets(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key = ByTargetAddr()(r)
		p.ServeHTTP(w, r)
	}))
	portS := itoa(int(port))
	for _, tc := range []struct {
		url, key string
		status   int
		body     string
	}{
		{"http://multi.test:" + portS + "/", "127.0.0.3:" + portS, http.StatusOK, "multi.test:" + portS},
		{"http://refused.test:" + portS + "/", "", http.StatusForbidden, ""},
		{"http://unknown.test:" + portS + "/", "", http.StatusBadGateway, ""},
		{"http://127.0.0.3:" + portS + "/", "127.0.0.3:" + portS, http.StatusOK, "127.0.0.3:" + portS},
		{"http://multi.test:25/", "", http.StatusForbidden, ""}, // port refused: no lookup
	} {
		lookups.Store(0)
		key = "unset"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.url, nil))
		if key != tc.key || rec.Code != tc.status {
			t.Errorf("GET %s: key %q, status %d (%s); want %q, %d", tc.url, key, rec.Code, rec.Body, tc.key, tc.status)
		}
		if tc.body != "" && rec.Body.String() != tc.body {
			t.Errorf("GET %s: the target saw Host %q, want %q", tc.url, rec.Body, tc.body)
		}
		want := int32(1)
		if tc.url[7] == '1' || tc.status == http.StatusForbidden && tc.url[len(tc.url)-4:] == ":25/" {
			want = 0 // an IP literal, or a port refused before resolution
		}
		if n := lookups.Load(); n != want {
			t.Errorf("GET %s: %d lookups, want %d", tc.url, n, want)
		}
	}
	if hits.Load() != 2 {
		t.Errorf("the target got %d requests, want 2", hits.Load())
	}
}
