package http1

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/benchclient"
	"github.com/seed-a07d1050/portcullis/internal/proccpu"
	uptransport "github.com/seed-a07d1050/portcullis/internal/upstream"
)

// The loopback benchmarks run each server in a child process (this test
// binary, re-executed with HTTP1_BENCH_SERVER set), so that the server's
// CPU time can be read from /proc apart from the load generator's.
//
//	go test -run XXX -bench Serve -benchtime 20000x -count 6 ./internal/http1
//
// BenchmarkServe drives both servers in alternating batches and reports,
// for each, server CPU time per request (user + system, from
// /proc/PID/stat) and requests per second, and their ratios. Setting
// HTTP1_BENCH_CPUPROFILE=prefix makes each child write a CPU profile to
// prefix.nethttp and prefix.http1.

// benchHandler is the small handler both servers serve: 13 bytes, no
// header set (Content-Type is sniffed), nothing allocated.
var benchHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	_, _ = io.WriteString(w, "hello, world\n")
})

// benchRequest is a browser-sized keep-alive request head.
const benchRequest = "GET /api/v1/items?page=2 HTTP/1.1\r\nHost: bench.example\r\n" +
	"User-Agent: Mozilla/5.0 (X11; Linux x86_64) bench/1.0\r\nAccept: */*\r\n" +
	"Accept-Encoding: gzip, deflate, br\r\nAccept-Language: en-US,en;q=0.9\r\n" +
	"X-Forwarded-For: 192.0.2.10\r\n\r\n"

func TestMain(m *testing.M) {
	if kind := os.Getenv("HTTP1_BENCH_SERVER"); kind != "" {
		os.Exit(runBenchServer(kind))
	}
	code := m.Run()
	stopBenchServers()
	os.Exit(code)
}

// runBenchServer serves benchHandler until its standard input closes,
// with the daemon's default timeouts (10 s head, 60 s idle).
func runBenchServer(kind string) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if prefix := os.Getenv("HTTP1_BENCH_CPUPROFILE"); prefix != "" {
		f, err := os.Create(prefix + "." + kind)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	hnd := http.Handler(benchHandler)
	if strings.HasSuffix(kind, "-proxy") {
		p, err := benchProxy(os.Getenv("HTTP1_BENCH_BACKEND"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		hnd = p
	}
	switch kind {
	case "nethttp", "nethttp-proxy", "backend":
		srv := &http.Server{Handler: hnd, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 60 * time.Second}
		go func() { _ = srv.Serve(ln) }()
	case "http1", "http1-proxy":
		srv := &Server{Handler: hnd, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 60 * time.Second}
		go func() { _ = srv.Serve(ln) }()
	default:
		fmt.Fprintln(os.Stderr, "unknown server", kind)
		return 1
	}
	fmt.Println(ln.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// benchProxy is the daemon's data path as it is today, for the proxy
// benchmark: httputil.ReverseProxy over internal/upstream, with the
// daemon's settings (one write per small response, pooled copy buffers).
func benchProxy(backend string) (http.Handler, error) {
	target, err := url.Parse("http://" + backend)
	if err != nil {
		return nil, err
	}
	up, err := uptransport.New(uptransport.Config{})
	if err != nil {
		return nil, err
	}
	bufs := &copyBuffers{}
	bufs.p.New = func() any { b := make([]byte, 32<<10); return &b }
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
		},
		Transport:     up.WithHeadTimeout(30 * time.Second),
		FlushInterval: 0,
		BufferPool:    bufs,
	}, nil
}

type copyBuffers struct{ p sync.Pool }

func (b *copyBuffers) Get() []byte  { return *(b.p.Get().(*[]byte)) }
func (b *copyBuffers) Put(p []byte) { b.p.Put(&p) }

// benchServer is a running child server.
type benchServer struct {
	kind  string
	cmd   *exec.Cmd
	stdin io.Closer
	addr  string
	conns []*benchclient.Conn
}

var (
	benchMu      sync.Mutex
	benchServers = map[string]*benchServer{}
)

// startBenchServer returns the child serving kind, started once.
func startBenchServer(b *testing.B, kind string) *benchServer {
	benchMu.Lock()
	defer benchMu.Unlock()
	if s := benchServers[kind]; s != nil {
		return s
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "HTTP1_BENCH_SERVER="+kind, "GOGC=400")
	if strings.HasSuffix(kind, "-proxy") {
		benchMu.Unlock()
		backend := startBenchServer(b, "backend")
		benchMu.Lock()
		cmd.Env = append(cmd.Env, "HTTP1_BENCH_BACKEND="+backend.addr)
	}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatalf("%s server: %v", kind, err)
	}
	s := &benchServer{kind: kind, cmd: cmd, stdin: stdin, addr: strings.TrimSpace(line)}
	benchServers[kind] = s
	return s
}

func stopBenchServers() {
	benchMu.Lock()
	defer benchMu.Unlock()
	for _, s := range benchServers {
		for _, c := range s.conns {
			_ = c.Close()
		}
		_ = s.stdin.Close()
		_ = s.cmd.Wait()
	}
}

// cpuTime returns the child's user + system CPU time.
func (s *benchServer) cpuTime(b *testing.B) time.Duration {
	d, err := proccpu.Of(strconv.Itoa(s.cmd.Process.Pid))
	if err != nil {
		b.Skipf("no /proc: %v", err) // CPU time is read from /proc on Linux only
	}
	return d
}

// connsFor returns n open connections to s, dialled once.
func (s *benchServer) connsFor(b *testing.B, n int) []*benchclient.Conn {
	for len(s.conns) < n {
		c, err := net.Dial("tcp", s.addr)
		if err != nil {
			b.Fatal(err)
		}
		s.conns = append(s.conns, benchclient.NewConn(c, benchRequest))
	}
	return s.conns[:n]
}

// benchConns is how many keep-alive connections the load uses.
const benchConns = 64

// BenchmarkServe compares the two servers over loopback in one run: b.N
// requests to each, in alternating batches of 2000, so that both see the
// machine in the same state.
func BenchmarkServe(b *testing.B) { benchInterleaved(b, "nethttp", "http1") }

// BenchmarkProxy is BenchmarkServe with the daemon's reverse proxy
// (httputil.ReverseProxy over internal/upstream) as the handler, in front
// of a backend child serving the small handler: what changing only the
// server does to the daemon's data path. The CPU figures are the proxy's
// alone.
func BenchmarkProxy(b *testing.B) { benchInterleaved(b, "nethttp-proxy", "http1-proxy") }

func benchInterleaved(b *testing.B, baseKind, kind string) {
	servers := []*benchServer{startBenchServer(b, baseKind), startBenchServer(b, kind)}
	conns := [][]*benchclient.Conn{servers[0].connsFor(b, benchConns), servers[1].connsFor(b, benchConns)}
	for i := range servers {
		benchclient.Drive(b, conns[i], 2*benchConns) // warm up
	}
	var cpu, wall [2]time.Duration
	const batch = 2000
	b.ResetTimer()
	for done := 0; done < b.N; done += batch {
		n := min(batch, b.N-done)
		for i, s := range servers {
			c0 := s.cpuTime(b)
			wall[i] += benchclient.Drive(b, conns[i], n)
			cpu[i] += s.cpuTime(b) - c0
		}
	}
	b.StopTimer()
	perReq := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
	b.ReportMetric(perReq(cpu[0]), "nethttp-cpu-µs/req")
	b.ReportMetric(perReq(cpu[1]), "http1-cpu-µs/req")
	b.ReportMetric(float64(b.N)/wall[0].Seconds(), "nethttp-req/s")
	b.ReportMetric(float64(b.N)/wall[1].Seconds(), "http1-req/s")
	if cpu[0] > 0 {
		b.ReportMetric(float64(cpu[1])/float64(cpu[0]), "cpu-ratio")
	}
	b.ReportMetric(wall[0].Seconds()/wall[1].Seconds(), "throughput-ratio")
}

// BenchmarkServeOne drives one server alone, for profiling its child
// (HTTP1_BENCH_CPUPROFILE).
func BenchmarkServeOne(b *testing.B) {
	for _, kind := range []string{"nethttp", "http1"} {
		b.Run("server="+kind, func(b *testing.B) {
			s := startBenchServer(b, kind)
			conns := s.connsFor(b, benchConns)
			benchclient.Drive(b, conns, 2*benchConns)
			c0 := s.cpuTime(b)
			b.ResetTimer()
			benchclient.Drive(b, conns, b.N)
			b.StopTimer()
			b.ReportMetric(float64((s.cpuTime(b)-c0).Microseconds())/float64(b.N), "server-cpu-µs/req")
		})
	}
}

// BenchmarkServeInProcess measures each server's own work per request with
// no socket at all: 1000 pipelined requests on an in-memory connection
// whose output is dropped. It shows the user-space cost (parsing, the
// request's structures, the response) that the loopback figures add
// system calls to.
func BenchmarkServeInProcess(b *testing.B) {
	in := bytes.Repeat([]byte(benchRequest), 1000)
	b.Run("server=nethttp", func(b *testing.B) {
		srv := &http.Server{Handler: benchHandler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 60 * time.Second, ErrorLog: discardLog}
		ln := newChanListener()
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		b.ReportAllocs()
		b.SetBytes(int64(len(benchRequest)))
		for i := 0; i < b.N; i += 1000 {
			c := newMemConn(in[:len(benchRequest)*min(1000, b.N-i)], 0)
			ln.conns <- sinkConn{c}
			<-c.closed
		}
	})
	b.Run("server=http1", func(b *testing.B) {
		srv := &Server{Handler: benchHandler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 60 * time.Second}
		b.ReportAllocs()
		b.SetBytes(int64(len(benchRequest)))
		for i := 0; i < b.N; i += 1000 {
			_ = srv.ServeConn(sinkConn{newMemConn(in[:len(benchRequest)*min(1000, b.N-i)], 0)})
		}
	})
}
