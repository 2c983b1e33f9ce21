package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/seed-a07d1050/portcullis/httplimit"
	"github.com/seed-a07d1050/portcullis/limit"
)

// nopWriter is a ResponseWriter that costs nothing, so that the benchmark
// measures the middleware and not the writer.
type nopWriter struct{ h http.Header }

func (w nopWriter) Header() http.Header       { return w.h }
func (nopWriter) Write(b []byte) (int, error) { return len(b), nil }
func (nopWriter) WriteHeader(int)             {}

var noop = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})

// BenchmarkMiddleware compares the bare handler with the same handler
// behind a Limiter, per request, in one run: the difference is the
// middleware's overhead (target: under 200 ns and at most one allocation).
func BenchmarkMiddleware(b *testing.B) {
	cases := []struct {
		name string
		cfg  *httplimit.Config
	}{
		{"bare", nil},
		{"ByClientIP", &httplimit.Config{}},
		{"ByHeader", &httplimit.Config{Key: mustKey(httplimit.ByHeader("X-Tenant"))}},
		{"ByClientIP/queue", &httplimit.Config{Policy: httplimit.Policy{QueueSize: 8}}},
	}
	// The counting alone, for reference: what package limit costs per
	// request without any HTTP around it.
	b.Run("limit-only", func(b *testing.B) {
		lim, err := limit.New(limit.Config[string]{})
		if err != nil {
			b.Fatal(err)
		}
		defer lim.Close()
		b.ReportAllocs()
		for b.Loop() {
			p, _ := lim.TryAcquire("192.0.2.7")
			p.Release()
		}
	})
	for _, tc := range cases {
		h := http.Handler(noop)
		if tc.cfg != nil {
			l, err := httplimit.New(*tc.cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			h = l.Wrap(noop)
		}
		b.Run(tc.name, func(b *testing.B) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = "192.0.2.7:4000"
			r.Header.Set("X-Tenant", "acme")
			w := nopWriter{http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(w, r)
			}
		})
		b.Run(tc.name+"/parallel", func(b *testing.B) {
			var next atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				// One client per goroutine, as on a busy server.
				r := httptest.NewRequest(http.MethodGet, "/", nil)
				n := next.Add(1)
				r.RemoteAddr = fmt.Sprintf("192.0.2.%d:4000", n)
				r.Header.Set("X-Tenant", fmt.Sprint("tenant", n))
				w := nopWriter{http.Header{}}
				for pb.Next() {
					h.ServeHTTP(w, r)
				}
			})
		})
	}
}

// BenchmarkOverLoopback measures whole requests over a real loopback
// server with keep-alive, bare and behind a Limiter, to put the
// middleware's cost beside that of an exchange.
func BenchmarkOverLoopback(b *testing.B) {
	l, err := httplimit.New(httplimit.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	for _, tc := range []struct {
		name string
		h    http.Handler
	}{{"bare", noop}, {"limited", l.Wrap(noop)}} {
		b.Run(tc.name, func(b *testing.B) {
			ts := httptest.NewServer(tc.h)
			defer ts.Close()
			c := ts.Client()
			b.ReportAllocs()
			for b.Loop() {
				resp, err := c.Get(ts.URL)
				if err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
			}
		})
	}
}
