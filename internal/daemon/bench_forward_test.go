//go:build unix

package daemon_test

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/daemon"
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
	srv, err := daemon.Start(parseConfig(b, strings.ReplaceAll(benchForward, "{{htpasswd}}", file), be.URL()), daemon.Options{Logger: testLogger(b)})
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

// BenchmarkForwardVsReverseInterleaved runs the four modes of
// BenchmarkForwardVsReverse in turns within one benchmark, so that all
// see the same machine load: each turn sends 64 requests of one mode from
// 8 clients at once, and the process CPU and wall time of the turn are
// charged to that mode. An op is one request of each mode. It reports per
// mode the wall time per request (µs/req-MODE) and the CPU per thousand
// requests (cpu-ms/1k-MODE), and the forward proxy's CPU against the
// reverse proxy's (forward-vs-reverse-cpu; 1 means the same cost).
func BenchmarkForwardVsReverseInterleaved(b *testing.B) {
	file := writeHtpasswd(b, b.TempDir(), testUsers...)
	be := startBackend(b)
	srv, err := daemon.Start(parseConfig(b, strings.ReplaceAll(benchForward, "{{htpasswd}}", file), be.URL()), daemon.Options{Logger: testLogger(b)})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = srv.Shutdown(context.Background()) }()
	modes := []string{"reverse", "forward", "forward-auth", "forward-auth-limits"}
	const clients, perClient = 8, 8
	type modeState struct {
		target string
		cs     [clients]*http.Client
		wall   time.Duration
		cpu    time.Duration
		n      int
	}
	states := make([]*modeState, len(modes))
	for i, mode := range modes {
		st := &modeState{target: "http://" + srv.Addr("reverse").String() + "/"}
		var proxyURL *url.URL
		if mode != "reverse" {
			st.target = be.URL() + "/"
			proxyURL = &url.URL{Scheme: "http", Host: srv.Addr(mode).String()}
			if strings.Contains(mode, "auth") {
				proxyURL.User = url.UserPassword("alice", "alice-pw")
			}
		}
		for j := range st.cs {
			dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0." + itoa(10+j))}, Timeout: waitLimit}
			tr := &http.Transport{DialContext: dialer.DialContext, MaxIdleConnsPerHost: 64, DisableCompression: true}
			if proxyURL != nil {
				tr.Proxy = http.ProxyURL(proxyURL)
			}
			st.cs[j] = &http.Client{Timeout: 2 * waitLimit, Transport: tr}
			defer tr.CloseIdleConnections()
			if !fetch(b, st.cs[j], st.target) {
				return
			}
		}
		states[i] = st
	}
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += clients * perClient {
		for _, st := range states {
			cpu0, start := processCPU(), time.Now()
			var wg sync.WaitGroup
			for _, c := range st.cs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range perClient {
						if !fetch(b, c, st.target) {
							return
						}
					}
				}()
			}
			wg.Wait()
			st.wall += time.Since(start)
			st.cpu += processCPU() - cpu0
			st.n += clients * perClient
		}
	}
	b.StopTimer()
	for i, st := range states {
		b.ReportMetric(float64(st.wall.Microseconds())/float64(st.n), "µs/req-"+modes[i])
		b.ReportMetric(float64(st.cpu)/float64(st.n)/1e3, "cpu-ms/1k-"+modes[i])
	}
	rev := float64(states[0].cpu) / float64(states[0].n)
	b.ReportMetric(float64(states[1].cpu)/float64(states[1].n)/rev, "forward-vs-reverse-cpu")
	b.ReportMetric(float64(states[2].cpu)/float64(states[2].n)/rev, "forward-auth-vs-reverse-cpu")
	b.ReportMetric(float64(states[3].cpu)/float64(states[3].n)/rev, "forward-auth-limits-vs-reverse-cpu")
}
