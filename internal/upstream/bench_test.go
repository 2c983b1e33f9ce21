package upstream

import (
	"bytes"
	"context"
	"io"
	"net"
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

// benchAnswer is what benchBackend answers every request with.
var benchAnswer = []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 16\r\n\r\nhello, upstream\n")

// benchBackend is a loopback upstream that answers every request head with
// benchAnswer, allocating nothing per request, so that the allocations of
// a benchmark are the client's.
func benchBackend(b *testing.B) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				buf := make([]byte, 8<<10)
				have := 0
				for {
					n, err := c.Read(buf[have:])
					if err != nil {
						return
					}
					have += n
					for {
						i := bytes.Index(buf[:have], []byte("\r\n\r\n"))
						if i < 0 {
							break
						}
						if _, err := c.Write(benchAnswer); err != nil {
							return
						}
						have = copy(buf, buf[i+4:have])
					}
					if have == len(buf) {
						return // a head larger than the buffer: not a benchmark's
					}
				}
			}()
		}
	}()
	b.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// benchRequest is the request of BenchmarkSend and BenchmarkSendHead: a GET
// with the fields a proxy forwards.
func benchRequest(b *testing.B, addr string) *http.Request {
	b.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/api/v1/items?page=2", nil)
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("User-Agent", "bench/1.0")
	req.Header.Set("Accept", "*/*")
	req.Header.Set("X-Forwarded-For", "192.0.2.1")
	req.Header.Set("X-Forwarded-Proto", "http")
	return req
}

// benchSend runs send, one exchange at a time on one kept connection,
// reading and closing each body.
func benchSend(b *testing.B, send func() (*http.Response, error)) {
	b.ReportAllocs()
	for b.Loop() {
		resp, err := send()
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || n != 16 {
			b.Fatalf("body of %d bytes, %v; want 16", n, err)
		}
	}
}

// BenchmarkSend sends benchRequest with Send, its header vouched for
// (HeaderValid), as a proxy does; BenchmarkSendHead sends the same head,
// already written out, with SendHead. The difference is what building and
// writing out an http.Request costs a caller that has the head as bytes.
func BenchmarkSend(b *testing.B) {
	tr := newBenchTransport(b)
	req := benchRequest(b, benchBackend(b))
	ctx := context.Background()
	opts := SendOptions{HeaderValid: true}
	benchSend(b, func() (*http.Response, error) { return tr.Send(ctx, req, opts) })
	if s := tr.Stats(); s.Dials != 1 {
		b.Fatalf("stats %+v, want one connection", s)
	}
}

func BenchmarkSendHead(b *testing.B) {
	tr := newBenchTransport(b)
	h, err := headFor(benchRequest(b, benchBackend(b)))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	benchSend(b, func() (*http.Response, error) { return tr.SendHead(ctx, h, SendOptions{}) })
	if s := tr.Stats(); s.Dials != 1 {
		b.Fatalf("stats %+v, want one connection", s)
	}
}

// newBenchTransport returns a Transport whose idle connections are closed
// when the benchmark ends.
func newBenchTransport(b *testing.B) *Transport {
	b.Helper()
	tr, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(tr.CloseIdleConnections)
	return tr
}
