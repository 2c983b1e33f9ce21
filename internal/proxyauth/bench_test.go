package proxyauth_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/proxyauth"
)

// discard is a ResponseWriter that keeps nothing, so the benchmark
// measures the middleware rather than a recorder.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header       { return d.h }
func (*discard) Write(b []byte) (int, error) { return len(b), nil }
func (*discard) WriteHeader(int)             {}

// BenchmarkAuth is the authentication check's cost per request: none (the
// baseline), with the credential cache (what a keep-alive client pays once
// its first request was checked), and without it (bcrypt on every request,
// at Apache's htpasswd -B default cost 5 and at cost 10).
func BenchmarkAuth(b *testing.B) {
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	creds := []string{basic("alice", "alice-pw")}
	for _, tc := range []struct {
		name      string
		cost      int // 0: no authentication
		cacheSize int
	}{
		{"none", 0, 0},
		{"cached", 5, 0},
		{"uncached-cost5", 5, -1},
		{"uncached-cost10", 10, -1},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var h http.Handler = ok
			if tc.cost > 0 {
				a := newAuth(b, proxyauth.Config{
					File:      writeUsers(b, b.TempDir(), tc.cost, "alice", "alice-pw"),
					CacheSize: tc.cacheSize,
				})
				h = a.Wrap(ok)
			}
			r := httptest.NewRequest(http.MethodGet, "http://example.com/", nil)
			r.RemoteAddr = "192.0.2.1:1234"
			w := &discard{h: make(http.Header)}
			h.ServeHTTP(w, r) // the first check fills the cache
			b.ReportAllocs()
			for b.Loop() {
				r.Header["Proxy-Authorization"] = creds // the middleware removes it
				h.ServeHTTP(w, r)
			}
		})
	}
}
