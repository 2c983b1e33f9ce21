package daemon_test

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// benchRatesOn is benchLimitsOff with every rate on, none of them reached:
// a conn_rate at accept, a listener rate and a route rate (delay mode, so
// that each request takes Reserve and its Reservation, as a real one would).
const benchRatesOn = `
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    max_conns_per_client: -1
    conn_rate: {rate: 1000r/s, burst: 1000}
    rate: {rate: 1000000r/s, burst: 100000, delay: 50000}
    routes:
      - name: r
        upstreams: ["{{backend}}"]
        rate: {rate: 1000000r/s, burst: 100000}
`

// benchRouteRate is benchLimitsOff with a route rate alone, never reached,
// nginx's usual limit_req with nodelay: the byte path takes its requests.
const benchRouteRate = `
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    max_conns_per_client: -1
    routes:
      - name: r
        upstreams: ["{{backend}}"]
        rate: {rate: 1000000r/s, burst: 100000, nodelay: true}
`

// BenchmarkProxyRatesInterleaved sends requests through two proxies, every
// limit off and every rate on (none reached), in alternating batches on
// every goroutine so that both see the same load on this shared machine,
// and reports rates-vs-off-throughput = time per request with everything
// off / time per request with the rates on: 1 means the rates cost nothing.
func BenchmarkProxyRatesInterleaved(b *testing.B) {
	off := startBenchProxy(b, benchLimitsOff)
	on := startBenchProxy(b, benchRatesOn)
	const clients, batch = 8, 8
	var cs [clients]*http.Client
	for i := range cs {
		cs[i] = clientFrom("127.0.0." + itoa(10+i))
		defer cs[i].CloseIdleConnections()
	}
	var next atomic.Uint32
	var ns, counts [2]atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		id := next.Add(1)
		c := cs[id%clients]
		urls := [2]string{off, on}
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
	if counts[0].Load() == 0 || counts[1].Load() == 0 {
		return
	}
	perOff := float64(ns[0].Load()) / float64(counts[0].Load())
	perOn := float64(ns[1].Load()) / float64(counts[1].Load())
	b.ReportMetric(perOff, "ns/req-off")
	b.ReportMetric(perOn, "ns/req-rates")
	b.ReportMetric(perOff/perOn, "rates-vs-off-throughput")
}

// BenchmarkProxyRates is BenchmarkProxy with every limit off, with every
// rate on, and with a route rate alone, one after the other: its allocs/op
// show what the rates allocate per request (the client's share is the same
// in all three), and route-rate=on against limits=off what a route's rate
// costs on the byte path.
func BenchmarkProxyRates(b *testing.B) {
	for _, bc := range []struct{ name, cfg string }{
		{"limits=off", benchLimitsOff},
		{"rates=on", benchRatesOn},
		{"route-rate=on", benchRouteRate},
	} {
		b.Run(bc.name, func(b *testing.B) { benchProxy(b, bc.cfg) })
	}
}
