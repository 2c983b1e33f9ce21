//go:build unix

package proxy_test

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/proxy"
)

// benchForward is a daemon with the same backend behind each way of
// proxying: a reverse listener routing to it, and forward listeners
// reaching it as a target, bare, with authentication, and with
// authentication and a target_host and a proxy_user limit (none reached).
const benchForward = `
listeners:
  - name: reverse
    protocol: http
    listen: "127.0.0.1:0"
    max_conns_per_client: -1
    routes: [{upstreams: ["{{backend}}"]}]
  - name: forward
    protocol: http
    listen: "127.0.0.1:0"
    max_conns_per_client: -1
    mode: forward
    forward: {destinations: {allow: ["127.0.0.0/8"]}}
  - name: forward-auth
    protocol: http
    listen: "127.0.0.1:0"
    max_conns_per_client: -1
    mode: forward
    auth: {htpasswd: "{{htpasswd}}"}
    forward: {destinations: {allow: ["127.0.0.0/8"]}}
  - name: forward-auth-limits
    protocol: http
    listen: "127.0.0.1:0"
    max_conns_per_client: -1
    mode: forward
    auth: {htpasswd: "{{htpasswd}}"}
    forward:
      destinations: {allow: ["127.0.0.0/8"]}
      limits:
        - {key: target_host, permits: 1024}
        - {key: proxy_user, permits: 1024}
`

// BenchmarkForwardVsReverse measures one small GET at a time per client
// over keep-alive connections from 8 client addresses, through the
// daemon's reverse proxy and through its forward proxy (bare, with cached
// authentication, with authentication and two limits), one daemon and one
// backend for all, in the same run: run it with -count 6 so that the
// modes interleave. Besides ns/op it reports cpu-ms/1k-req, the CPU the
// whole process (clients, daemon and backend) spent per thousand requests.
func BenchmarkForwardVsReverse(b *testing.B) {
	file := writeHtpasswd(b, b.TempDir(), testUsers...)
	be := startBackend(b)
	srv, err := proxy.Start(parseConfig(b, strings.ReplaceAll(benchForward, "{{htpasswd}}", file), be.URL()), proxy.Options{Logger: testLogger(b)})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = srv.Shutdown(context.Background()) }()
	for _, mode := range []string{"reverse", "forward", "forward-auth", "forward-auth-limits"} {
		b.Run("mode="+mode, func(b *testing.B) {
			target := "http://" + srv.Addr("reverse").String() + "/"
			var proxyURL *url.URL
			if mode != "reverse" {
				target = be.URL() + "/"
				proxyURL = &url.URL{Scheme: "http", Host: srv.Addr(mode).String()}
				if strings.Contains(mode, "auth") {
					proxyURL.User = url.UserPassword("alice", "alice-pw")
				}
			}
			benchClients(b, target, proxyURL)
		})
	}
}

// benchClients sends GET target from 8 client addresses in parallel,
// through proxyURL when not nil, and reports the process CPU per request.
func benchClients(b *testing.B, target string, proxyURL *url.URL) {
	const clients = 8
	var cs [clients]*http.Client
	for i := range cs {
		dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0." + itoa(10+i))}, Timeout: waitLimit}
		tr := &http.Transport{DialContext: dialer.DialContext, MaxIdleConnsPerHost: 64, DisableCompression: true}
		if proxyURL != nil {
			tr.Proxy = http.ProxyURL(proxyURL)
		}
		cs[i] = &http.Client{Timeout: 2 * waitLimit, Transport: tr}
		defer tr.CloseIdleConnections()
		if !fetch(b, cs[i], target) { // warm: connections and the credential cache
			return
		}
	}
	var next atomic.Uint32
	cpu0 := processCPU()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		c := cs[next.Add(1)%clients]
		for pb.Next() {
			if !fetch(b, c, target) {
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N)/1e3, "cpu-ms/1k-req")
}

// processCPU is the CPU time the process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
