package forward_test

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/httplimit"
	"github.com/seed-a07d1050/portcullis/internal/forward"
	"github.com/seed-a07d1050/portcullis/internal/upstream"
)

// BenchmarkProxiedGET sends one small GET at a time over a keep-alive
// client, through:
//
//   - forward: the forward Proxy alone (absolute-form request);
//   - forward-auth-limits: authentication (cached) and a user and a
//     target_host limit in front of it, as a listener would run it;
//   - reverse-upstream: httputil.ReverseProxy with the daemon's upstream
//     Transport and a buffer pool, as the daemon's reverse routes run;
//   - reverse-stdlib: a plain httputil.ReverseProxy over net/http's
//     Transport.
//
// Everything runs in this process on loopback, so cpu-ns/op (user + system
// CPU of the process per request, from getrusage) counts the client, the
// proxy and the target alike; the variants differ only in the proxy.
func BenchmarkProxiedGET(b *testing.B) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello\n")
	}))
	defer backend.Close()
	backendURL, _ := url.Parse(backend.URL)

	b.Run("forward", func(b *testing.B) {
		s := newStack(b, stackOptions{})
		benchGET(b, proxyClient(b, s, "", "", "127.0.0.2"), backend.URL+"/")
	})
	b.Run("forward-auth-limits", func(b *testing.B) {
		s := newStack(b, stackOptions{
			users: []string{"alice", "alice-pw"},
			limits: []httplimit.Config{
				{Key: forward.ByTargetHost(), Policy: httplimit.Policy{Permits: 64}},
				{Key: byUser, Policy: httplimit.Policy{Permits: 64}},
			},
		})
		benchGET(b, proxyClient(b, s, "alice", "alice-pw", "127.0.0.2"), backend.URL+"/")
	})
	b.Run("reverse-upstream", func(b *testing.B) {
		t, err := upstream.New(upstream.Config{})
		if err != nil {
			b.Fatal(err)
		}
		defer t.CloseIdleConnections()
		benchGET(b, directClient(b), serveReverse(b, backendURL, t.WithHeadTimeout(time.Minute), pooled{})+"/")
	})
	b.Run("reverse-stdlib", func(b *testing.B) {
		t := &http.Transport{MaxIdleConnsPerHost: 64}
		defer t.CloseIdleConnections()
		benchGET(b, directClient(b), serveReverse(b, backendURL, t, nil)+"/")
	})
}

func serveReverse(b *testing.B, to *url.URL, t http.RoundTripper, bufs httputil.BufferPool) string {
	rp := &httputil.ReverseProxy{
		Rewrite:    func(pr *httputil.ProxyRequest) { pr.SetURL(to) },
		Transport:  t,
		BufferPool: bufs,
	}
	srv := httptest.NewUnstartedServer(rp)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	b.Cleanup(srv.Close)
	return srv.URL
}

func directClient(b *testing.B) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 4}
	b.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func benchGET(b *testing.B, c *http.Client, target string) {
	get := func() {
		resp, err := c.Get(target)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	get() // connections up
	b.ReportAllocs()
	before := cpuTime()
	for b.Loop() {
		get()
	}
	b.ReportMetric(float64(cpuTime()-before)/float64(b.N), "cpu-ns/op")
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// pooled lends 32 KiB copy buffers, as the daemon's reverse proxy does.
type pooled struct{}

var pool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (pooled) Get() []byte  { return *pool.Get().(*[]byte) }
func (pooled) Put(b []byte) { pool.Put(&b) }
