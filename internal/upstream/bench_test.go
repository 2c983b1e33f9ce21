package upstream

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"syscall"
	"testing"
	"time"
)

// benchBuffers lends ReverseProxy its copy buffers, as the daemon does.
type benchBuffers struct{ p sync.Pool }

func (b *benchBuffers) Get() []byte {
	if p, ok := b.p.Get().(*[]byte); ok {
		return *p
	}
	return make([]byte, 32<<10)
}

func (b *benchBuffers) Put(p []byte) { b.p.Put(&p) }

// BenchmarkRoundTrip compares a tuned *http.Transport ("std") with
// Transport ("upstream") on small GETs to a loopback server, directly and
// behind an httputil.ReverseProxy served on loopback to a keep-alive
// client. The backend runs in the same process, so ns/op is CPU per request
// of the whole exchange, both ends included.
func BenchmarkRoundTrip(b *testing.B) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello, upstream\n")
	}))
	defer backend.Close()
	std := &http.Transport{MaxIdleConnsPerHost: 1024, DisableCompression: true}
	defer std.CloseIdleConnections()
	up, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer up.CloseIdleConnections()
	transports := []struct {
		name string
		rt   http.RoundTripper
	}{{"std", std}, {"upstream", up}}

	for _, tc := range transports {
		b.Run(tc.name, func(b *testing.B) { benchGet(b, tc.rt, backend.URL) })
	}
	target, _ := url.Parse(backend.URL)
	for _, tc := range transports {
		b.Run("proxy/"+tc.name, func(b *testing.B) {
			front := httptest.NewServer(&httputil.ReverseProxy{
				Rewrite:    func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
				Transport:  tc.rt,
				BufferPool: &benchBuffers{},
			})
			defer front.Close()
			client := &http.Transport{MaxIdleConnsPerHost: 1024, DisableCompression: true}
			defer client.CloseIdleConnections()
			benchGet(b, client, front.URL)
		})
	}
}

// benchGet sends GETs to url through rt from 8 goroutines per P, each
// reusing one request, so that the CPUs stay busy and ns/op is throughput,
// not the latency of one request at a time. It also reports cpu-ns/op: the
// process's user and system CPU time per request (client, proxy and
// backend together, the same for every transport).
func benchGet(b *testing.B, rt http.RoundTripper, url string) {
	b.ReportAllocs()
	b.SetParallelism(8)
	cpu0 := cpuTime(b)
	defer func() { b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op") }()
	b.RunParallel(func(pb *testing.PB) {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			b.Error(err)
			return
		}
		for pb.Next() {
			resp, err := rt.RoundTrip(req)
			if err != nil {
				b.Error(err)
				return
			}
			n, _ := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if n != 16 {
				b.Errorf("body of %d bytes, want 16", n)
				return
			}
		}
	})
}

// cpuTime returns the user and system CPU time the process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
