package daemon_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/daemon"
)

// benchLimitsOff is the proxy with every limit off: no connection cap, no
// route, shadow or client limit.
const benchLimitsOff = `
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    max_conns_per_client: -1
    routes:
      - name: r
        upstreams: ["{{backend}}"]
`

// benchLimitsOn is the same proxy with every limit on, none of them reached:
// the per-client connection cap, a listener-wide client limit, and a route
// limit with a queue beside a shadow limit.
const benchLimitsOn = `
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    max_conns_per_client: 64
    max_conns: 4096
    client_limit: {permits: 256}
    routes:
      - name: r
        upstreams: ["{{backend}}"]
        limit: {permits: 128, queue: {size: 64, timeout: 1s}}
        shadow_limit: {permits: 128}
`

// BenchmarkProxy measures proxied requests per second through the daemon
// with every limit off and then on, in the same run, over keep-alive
// connections from 8 client addresses (127.0.0.10-17). Compare the two
// ns/op: the target is limits=on within 3% of limits=off.
func BenchmarkProxy(b *testing.B) {
	for _, bc := range []struct{ name, cfg string }{
		{"limits=off", benchLimitsOff},
		{"limits=on", benchLimitsOn},
	} {
		b.Run(bc.name, func(b *testing.B) { benchProxy(b, bc.cfg) })
	}
}

func benchProxy(b *testing.B, text string) {
	be := startBackend(b)
	cfg := parseConfig(b, text, be.URL())
	srv, err := daemon.Start(cfg, daemon.Options{Logger: testLogger(b)})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = srv.Shutdown(context.Background()) }()
	url := "http://" + srv.Addr("web").String() + "/"
	const clients = 8
	var cs [clients]*http.Client
	for i := range cs {
		cs[i] = clientFrom("127.0.0." + itoa(10+i))
		defer cs[i].CloseIdleConnections()
	}
	var next atomic.Uint32
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		c := cs[next.Add(1)%clients]
		for pb.Next() {
			resp, err := c.Get(url)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
	b.StopTimer()
}

func itoa(n int) string {
	var sb strings.Builder
	if n >= 10 {
		sb.WriteString(itoa(n / 10))
	}
	sb.WriteByte(byte('0' + n%10))
	return sb.String()
}

// BenchmarkProxyInterleaved sends requests through both proxies, limits off
// and limits on, in alternating batches on every goroutine, so that both see
// the same machine load (this machine is shared), and reports the ratio of
// their throughputs: on-vs-off-throughput = time per request with limits off
// / time per request with limits on. 1 means the limits cost nothing; the
// target is 0.97 or more.
func BenchmarkProxyInterleaved(b *testing.B) {
	off := startBenchProxy(b, benchLimitsOff)
	on := startBenchProxy(b, benchLimitsOn)
	const clients, batch = 8, 8
	var cs [clients]*http.Client
	for i := range cs {
		cs[i] = clientFrom("127.0.0." + itoa(10+i))
		defer cs[i].CloseIdleConnections()
	}
	var next atomic.Uint32
	var nsOff, nsOn, nOff, nOn atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		id := next.Add(1)
		c := cs[id%clients]
		urls := [2]string{off, on}
		ns := [2]*atomic.Int64{&nsOff, &nsOn}
		counts := [2]*atomic.Int64{&nOff, &nOn}
		mode := int(id % 2) // half the goroutines start with each
		for {
			start := time.Now()
			n := 0
			for ; n < batch && pb.Next(); n++ {
				if !fetch(b, c, urls[mode]) {
					return
				}
			}
			ns[mode].Add(int64(time.Since(start)))
			counts[mode].Add(int64(n))
			if n < batch {
				return
			}
			mode = 1 - mode
		}
	})
	b.StopTimer()
	if nOff.Load() == 0 || nOn.Load() == 0 {
		return
	}
	perOff := float64(nsOff.Load()) / float64(nOff.Load())
	perOn := float64(nsOn.Load()) / float64(nOn.Load())
	b.ReportMetric(perOff, "ns/req-off")
	b.ReportMetric(perOn, "ns/req-on")
	b.ReportMetric(perOff/perOn, "on-vs-off-throughput")
}

func startBenchProxy(b *testing.B, text string) string {
	be := startBackend(b)
	srv, err := daemon.Start(parseConfig(b, text, be.URL()), daemon.Options{Logger: testLogger(b)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return "http://" + srv.Addr("web").String() + "/"
}

func fetch(b *testing.B, c *http.Client, url string) bool {
	resp, err := c.Get(url)
	if err != nil {
		b.Error(err)
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Errorf("status %d", resp.StatusCode)
		return false
	}
	return true
}
