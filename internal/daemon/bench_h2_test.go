//lint:file-ignore SA1019 x/net/http2's ClientConn runs HTTP/2 on a TLS connection the benchmark dialled from a chosen address, with the same HTTP/2 code as the server it measures.

package daemon_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/seed-a07d1050/portcullis/internal/backend"
	"github.com/seed-a07d1050/portcullis/internal/daemon"
	"github.com/seed-a07d1050/portcullis/internal/h2check"
	"github.com/seed-a07d1050/portcullis/internal/testcert"
)

// benchH2LimitsOn is benchLimitsOn on an https listener: the per-client
// connection cap, a listener-wide client limit, and a route limit with a
// queue beside a shadow limit, none of them reached by benchH2Conns x
// benchH2Streams streams. The access log is off, as in bench/peers.
const benchH2LimitsOn = `
log: {access_log: false}
listeners:
  - name: web
    protocol: https
    listen: "127.0.0.1:0"
    tls: {cert_file: "{{cert}}", key_file: "{{key}}"}
    max_conns_per_client: 64
    max_conns: 4096
    client_limit: {permits: 256}
    routes:
      - name: r
        upstreams: ["{{backend}}"]
        limit: {permits: 128, queue: {size: 64, timeout: 1s}}
        shadow_limit: {permits: 128}
`

const (
	benchH2Conns   = 4    // HTTP/2 connections, one per client address 127.0.0.10-13
	benchH2Streams = 16   // concurrent streams on each
	benchH2Batch   = 2000 // requests in a batch: a turn of server=interleaved, a measure of best-cpu-µs/req
)

// BenchmarkDaemonH2 measures HTTP/2 over TLS through the daemon and, in
// the same run, the floor it stands on:
//
//   - server=daemon: an https listener with every limit on
//     (benchH2LimitsOn) in front of one backend (internal/backend, no
//     delay, in a child process so that its CPU is not counted);
//   - server=floor: x/net/http2 behind internal/h2check, as the daemon
//     serves HTTP/2, answering every request itself with the backend's
//     answer (bench/tlsfloor -h2check in process);
//   - server=interleaved: both, b.N requests each in alternating batches
//     of benchH2Batch, so that both see the machine in the same state (it
//     is shared): its daemon/floor-cpu is the ratio to read on a loaded
//     machine, where the two runs above may see different loads.
//
// The client is x/net/http2's, over TLS 1.3 on loopback: benchH2Conns
// connections with benchH2Streams streams each, sending benchRequest's
// fields. Besides ns/op and allocs/op (client, server and daemon
// together), each reports cpu-µs/req, the process's user and system CPU
// time (getrusage, processCPU) over the timed part per request, client
// included; server=daemon and server=floor also report best-cpu-µs/req,
// the same in their least costly batch (see benchH2). All run with the daemon's GOGC (400). Compare the runs with
//
//	go test -run XXX -bench DaemonH2 -benchtime 20000x -count 6 ./internal/daemon > h2.txt
//	benchstat -col /server h2.txt
func BenchmarkDaemonH2(b *testing.B) {
	cert, err := testcert.New()
	if err != nil {
		b.Fatal(err)
	}
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	b.Run("server=daemon", func(b *testing.B) { benchH2(b, cert, startH2Daemon(b, cert)) })
	b.Run("server=floor", func(b *testing.B) { benchH2(b, cert, startH2Floor(b, cert)) })
	b.Run("server=interleaved", func(b *testing.B) {
		benchH2Interleaved(b, cert, startH2Daemon(b, cert), startH2Floor(b, cert))
	})
}

// startH2Daemon starts the daemon of benchH2LimitsOn and returns its
// address.
func startH2Daemon(b *testing.B, cert *testcert.Cert) string {
	certFile, keyFile, err := cert.WriteFiles(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	be := startBenchChild(b, "backend")
	text := strings.NewReplacer("{{cert}}", certFile, "{{key}}", keyFile).Replace(benchH2LimitsOn)
	srv, err := daemon.Start(parseConfig(b, text, "http://"+be.addr), daemon.Options{Logger: testLogger(b)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return srv.Addr("web").String()
}

// startH2Floor starts the floor: x/net/http2 behind internal/h2check
// answering every request itself as internal/backend answers "/".
func startH2Floor(b *testing.B, cert *testcert.Cert) string {
	length := strconv.Itoa(len(backend.HelloBody))
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			h := w.Header()
			h["Content-Type"] = []string{"text/plain; charset=utf-8"}
			h["Content-Length"] = []string{length}
			_, _ = io.WriteString(w, backend.HelloBody)
		}),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       60 * time.Second,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert.TLS}, MinVersion: tls.VersionTLS12},
	}
	if err := h2check.Configure(srv); err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	b.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// benchH2 drives b.N requests to addr over benchH2Conns HTTP/2
// connections, benchH2Streams at a time on each, after a warm-up, in
// batches of benchH2Batch. It reports the CPU time per request over all of
// them (cpu-µs/req) and in the batch that took the least
// (best-cpu-µs/req): on a shared machine other processes only ever add to
// it, so the least varies less from run to run.
func benchH2(b *testing.B, cert *testcert.Cert, addr string) {
	conns := dialH2(b, cert, addr)
	driveH2(b, conns, 4*benchH2Conns*benchH2Streams) // warm up
	var total time.Duration
	best := -1.0
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += benchH2Batch {
		n := min(benchH2Batch, b.N-done)
		cpu0 := processCPU()
		driveH2(b, conns, n)
		cpu := processCPU() - cpu0
		total += cpu
		if per := float64(cpu.Nanoseconds()) / 1e3 / float64(n); n == benchH2Batch && (best < 0 || per < best) {
			best = per
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(total.Microseconds())/float64(b.N), "cpu-µs/req")
	if best >= 0 {
		b.ReportMetric(best, "best-cpu-µs/req")
	}
}

// benchH2Interleaved drives b.N requests to each of the daemon and the
// floor, in alternating batches, and reports the CPU time per request of
// each and their ratio; ns/op is the time of one request to each.
func benchH2Interleaved(b *testing.B, cert *testcert.Cert, daemonAddr, floorAddr string) {
	conns := [2][]*http2.ClientConn{dialH2(b, cert, daemonAddr), dialH2(b, cert, floorAddr)}
	for _, cs := range conns {
		driveH2(b, cs, 4*benchH2Conns*benchH2Streams) // warm up
	}
	var cpu [2]time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += benchH2Batch {
		n := min(benchH2Batch, b.N-done)
		for i, cs := range conns {
			cpu0 := processCPU()
			driveH2(b, cs, n)
			cpu[i] += processCPU() - cpu0
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(cpu[0].Microseconds())/float64(b.N), "daemon-cpu-µs/req")
	b.ReportMetric(float64(cpu[1].Microseconds())/float64(b.N), "floor-cpu-µs/req")
	if cpu[1] > 0 {
		b.ReportMetric(float64(cpu[0])/float64(cpu[1]), "daemon/floor-cpu")
	}
}

// dialH2 opens benchH2Conns HTTP/2 connections to addr, each from its
// own client address; they close when b ends.
func dialH2(b *testing.B, cert *testcert.Cert, addr string) []*http2.ClientConn {
	tr := &http2.Transport{}
	conns := make([]*http2.ClientConn, benchH2Conns)
	for i := range conns {
		d := tls.Dialer{
			NetDialer: &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(10+i))}, Timeout: waitLimit},
			Config:    &tls.Config{RootCAs: cert.Pool, ServerName: "127.0.0.1", NextProtos: []string{http2.NextProtoTLS}},
		}
		nc, err := d.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		if p := nc.(*tls.Conn).ConnectionState().NegotiatedProtocol; p != http2.NextProtoTLS {
			b.Fatalf("ALPN chose %q, want h2", p)
		}
		if conns[i], err = tr.NewClientConn(nc); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = conns[i].Close() })
	}
	return conns
}

// driveH2 sends n requests over conns, benchH2Streams at a time on each,
// and fails b on any answer other than the backend's 200.
func driveH2(b *testing.B, conns []*http2.ClientConn, n int) {
	workers := len(conns) * benchH2Streams
	var wg sync.WaitGroup
	for w := range workers {
		share := n / workers
		if w < n%workers {
			share++
		}
		cc := conns[w%len(conns)]
		wg.Go(func() {
			req := benchH2Request(b)
			for range share {
				if !roundTripH2(b, cc, req) {
					return
				}
			}
		})
	}
	wg.Wait()
}

// benchH2Request is benchRequest as an HTTP/2 request; the client does not
// change it, so that one serves a worker's every request.
func benchH2Request(b *testing.B) *http.Request {
	req, err := http.NewRequest(http.MethodGet, "https://bench.example/?page=2", nil)
	if err != nil {
		b.Error(err)
		return nil
	}
	req.Header = http.Header{
		"User-Agent":      {"Mozilla/5.0 (X11; Linux x86_64) bench/1.0"},
		"Accept":          {"text/html,application/xhtml+xml,*/*;q=0.8"},
		"Accept-Encoding": {"gzip, deflate, br"},
		"Accept-Language": {"en-US,en;q=0.9"},
		"Cookie":          {"session=0123456789abcdef"},
	}
	return req
}

func roundTripH2(b *testing.B, cc *http2.ClientConn, req *http.Request) bool {
	resp, err := cc.RoundTrip(req)
	if err != nil {
		b.Error(err)
		return false
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || n != int64(len(backend.HelloBody)) {
		b.Errorf("status %d, %d bytes of body (%v); want 200 and %d bytes", resp.StatusCode, n, err, len(backend.HelloBody))
		return false
	}
	return true
}
