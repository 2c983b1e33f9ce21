package daemon_test

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/bench/floor/floorproxy"
	"github.com/seed-a07d1050/portcullis/internal/backend"
	"github.com/seed-a07d1050/portcullis/internal/benchclient"
	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/daemon"
	"github.com/seed-a07d1050/portcullis/internal/proccpu"
)

// BenchmarkDaemon compares builds of the daemon's data path in one run:
// each daemon runs in a child process (this test binary, re-executed with
// PORTCULLIS_BENCH_DAEMON set, GOGC=400 as cmd/portcullis sets it) in
// front of one backend child (internal/backend, no delay), with every
// limit on (benchLimitsOn: the connection caps, a client limit, a route
// limit with a queue and a shadow limit, none reached). 64 keep-alive
// connections from 8 client addresses send browser-sized requests; b.N
// requests go to each daemon in alternating batches of 2000, so that all
// see the machine in the same state. For each it reports the daemon's CPU
// time per request (user + system, /proc/PID/stat) and requests per second,
// and the ratios of both to the first daemon's:
//
//	go test -run XXX -bench Daemon -benchtime 20000x -count 6 ./internal/daemon
//
// The daemons: eventloop and nethttp are the daemon in each HTTP/1.x mode
// (http1_server; eventloop is the default); lean and fast run one internal
// part of eventloop alone (lean: its byte path in Go's poller on every
// connection; fast: its server without the byte path);
// fast-rp and nethttp-rp are fast and nethttp with httputil.ReverseProxy
// in place of the relay, as before it; a -log suffix turns the access log
// on, written to a file (every other daemon has it off); -tls serves the
// listener as https (the test certificate), the clients handshaking
// before the timed part (eventloop-tls against lean-tls: the event loops'
// HTTPS/1.1 against the byte path in Go's poller; nginx-tls and
// haproxy-tls are the peers with their bench/peers TLS configurations);
// -nometrics
// leaves out the request metrics (the portcullis_http_* series and the
// upstream histogram); -nolimits turns every limit off (benchLimitsOff),
// as in lean-log, fast-nometrics or lean-nolimits; floor and floor-probe are
// bench/floor/floorproxy, the least a Go proxy can do per request (without and
// with the daemon's peek at a kept upstream connection); floor-admit is
// floor-probe with the work a data path relaying bytes could not skip
// (floorproxy.ServeAdmitting with benchLimitsOn's limits: see
// benchAdmission); floor-epoll is the floor on epoll loops of its own, one
// per GOMAXPROCS, outside the runtime's poller (floorproxy.ServeEpoll), and
// floor-epoll-admit the same with floor-admit's work on those loops
// (floorproxy.ServeEpollAdmitting); nginx and haproxy are
// those proxies with their bench/peers configurations, when installed
// (name them in PORTCULLIS_BENCH_DAEMONS, a space-separated list that
// replaces the default set). A Go daemon's name may end in @N to run it
// with GOMAXPROCS=N ("lean@1"), to see what the scheduler's work between
// processors costs. Setting
// PORTCULLIS_BENCH_CPUPROFILE=prefix makes each daemon write a CPU profile
// to prefix.NAME, and PORTCULLIS_BENCH_MEMPROFILE=prefix an allocation
// profile (every 4 KiB allocated sampled) to prefix.NAME.
func BenchmarkDaemon(b *testing.B) {
	names := []string{"lean", "fast", "nethttp", "fast-rp", "nethttp-rp", "lean-log"}
	if s := os.Getenv("PORTCULLIS_BENCH_DAEMONS"); s != "" {
		names = strings.Fields(s)
	}
	benchDaemons(b, names)
}

// benchRequest is a browser-sized keep-alive request head.
const benchRequest = "GET /?page=2 HTTP/1.1\r\nHost: bench.example\r\n" +
	"User-Agent: Mozilla/5.0 (X11; Linux x86_64) bench/1.0\r\nAccept: text/html,application/xhtml+xml,*/*;q=0.8\r\n" +
	"Accept-Encoding: gzip, deflate, br\r\nAccept-Language: en-US,en;q=0.9\r\nCookie: session=0123456789abcdef\r\n\r\n"

// TestMain runs this test binary as one of BenchmarkDaemon's children when
// PORTCULLIS_BENCH_DAEMON says so, and otherwise runs the tests, then stops
// the children a benchmark started.
func TestMain(m *testing.M) {
	if name := os.Getenv("PORTCULLIS_BENCH_DAEMON"); name != "" {
		os.Exit(runBenchChild(name))
	}
	code := m.Run()
	stopBenchChildren()
	os.Exit(code)
}

// runBenchChild serves as the child name until its standard input closes:
// the backend, or a daemon in front of PORTCULLIS_BENCH_BACKEND.
func runBenchChild(name string) int {
	if prefix := os.Getenv("PORTCULLIS_BENCH_CPUPROFILE"); prefix != "" && name != "backend" {
		f, err := os.Create(prefix + "." + name)
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
	if prefix := os.Getenv("PORTCULLIS_BENCH_MEMPROFILE"); prefix != "" && name != "backend" {
		runtime.MemProfileRate = 4096
		defer writeAllocProfile(prefix + "." + name)
	}
	name, _, _ = strings.Cut(name, "@") // the profiles above keep the whole name
	if name == "backend" {
		srv, err := backend.StartConfig("127.0.0.1:0", backend.Config{})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer srv.Close()
		fmt.Println(srv.Addr())
		_, _ = io.Copy(io.Discard, os.Stdin)
		return 0
	}
	if strings.HasPrefix(name, "floor") {
		return runFloor(name)
	}
	server, rest, _ := strings.Cut(name, "-")
	limits := benchLimitsOn
	if rest == "nolimits" {
		limits = benchLimitsOff
	}
	text := limits
	if r, ok := strings.CutSuffix(rest, "rate"); ok && (r == "" || r == "cluster+") {
		rest, text = strings.TrimSuffix(r, "+"), benchRated(text) // BenchmarkDaemonCluster with PORTCULLIS_BENCH_RATE
	}
	switch rest {
	case "rp":
		daemon.SetReverseProxy(true)
	case "nometrics":
		daemon.SetRequestMetrics(false)
	}
	if rest == "cluster" { // BenchmarkDaemonCluster: the limits counted on Redis
		text = benchClusterBlock(os.Getenv("PORTCULLIS_BENCH_REDIS")) + text
	}
	if rest == "tls" {
		dir := os.Getenv("PORTCULLIS_BENCH_TLS_DIR")
		text = onHTTPS(text, dir+"/cert.pem", dir+"/key.pem")
	}
	if rest == "log" {
		text = "log: {access_log: true}\n" + text
	} else {
		text = "log: {access_log: false}\n" + text // on by default
	}
	cfg := parseConfig(nopTB{}, text, "http://"+os.Getenv("PORTCULLIS_BENCH_BACKEND"))
	// Set in Go, not in the text: a file reads lean and fast, retired as
	// modes, as eventloop; here they select eventloop's parts alone.
	for i := range cfg.Listeners {
		if cfg.Listeners[i].Protocol == config.ProtocolHTTP || cfg.Listeners[i].Protocol == config.ProtocolHTTPS {
			cfg.Listeners[i].HTTP1Server = map[string]config.HTTP1Server{
				"fast": config.HTTP1ServerFast, "nethttp": config.HTTP1ServerNetHTTP,
				"lean": config.HTTP1ServerLean, "eventloop": config.HTTP1ServerEventLoop,
			}[server]
			break
		}
	}
	logs, err := os.CreateTemp("", "portcullis-bench-log-*")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.Remove(logs.Name())
	defer logs.Close()
	srv, err := daemon.Start(cfg, daemon.Options{LogOutput: logs})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer srv.Close()
	fmt.Println(srv.Addr("web"))
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// runFloor serves bench/floor/floorproxy in front of the backend until
// standard input closes: floor, floor-probe, floor-admit (the probing
// floor with benchAdmission's work), floor-epoll or floor-epoll-admit.
func runFloor(name string) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer ln.Close()
	backend := os.Getenv("PORTCULLIS_BENCH_BACKEND")
	var a *floorproxy.Admission
	if strings.HasSuffix(name, "-admit") {
		if a, err = benchAdmission(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	stop, workers := func() {}, runtime.GOMAXPROCS(0)
	switch name {
	case "floor", "floor-probe":
		go func() { _ = floorproxy.Serve(ln, backend, name == "floor-probe") }()
	case "floor-admit":
		go func() { _ = floorproxy.ServeAdmitting(ln, backend, a) }()
	case "floor-epoll":
		stop, err = floorproxy.ServeEpoll(ln, backend, workers)
	case "floor-epoll-admit":
		stop, err = floorproxy.ServeEpollAdmitting(ln, backend, workers, a)
	default:
		err = fmt.Errorf("no floor named %q", name)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stop()
	fmt.Println(ln.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// benchAdmission is the admission work of benchLimitsOn for
// floorproxy.ServeAdmitting, on benchRequest's host.
func benchAdmission() (*floorproxy.Admission, error) {
	a, err := floorproxy.NewAdmission()
	if err != nil {
		return nil, err
	}
	a.Host = "bench.example"
	return a, nil
}

// nopTB lets a child process use parseConfig, which reports through a
// testing.TB; the child has none, and its configurations are valid.
type nopTB struct{ testing.TB }

func (nopTB) Helper()                   {}
func (nopTB) Name() string              { return "" }
func (nopTB) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }

// benchChild is a running child process.
type benchChild struct {
	cmd   *exec.Cmd
	stdin io.Closer // nil for nginx and HAProxy
	addr  string
	dir   string // nginx's and HAProxy's configuration; removed by stop
	conns []*benchclient.Conn
	tls   bool // the clients speak TLS (a -tls daemon)
}

var (
	benchMu       sync.Mutex
	benchChildren = map[string]*benchChild{}
)

// startBenchChild returns the child serving as name, started once.
func startBenchChild(b *testing.B, name string) *benchChild {
	var backendAddr string
	if name != "backend" {
		backendAddr = startBenchChild(b, "backend").addr
	}
	benchMu.Lock()
	defer benchMu.Unlock()
	if c := benchChildren[name]; c != nil {
		return c
	}
	if peer, _ := strings.CutSuffix(name, "-tls"); peer == "nginx" || peer == "haproxy" {
		c := startPeer(b, name, backendAddr)
		benchChildren[name] = c
		return c
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	_, procs, _ := strings.Cut(name, "@")
	cmd.Env = append(os.Environ(), "PORTCULLIS_BENCH_DAEMON="+name, "PORTCULLIS_BENCH_BACKEND="+backendAddr, "GOGC=400")
	if strings.HasSuffix(name, "-tls") {
		cmd.Env = append(cmd.Env, "PORTCULLIS_BENCH_TLS_DIR="+benchCertDir(b))
	}
	if procs != "" {
		cmd.Env = append(cmd.Env, "GOMAXPROCS="+procs)
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
		b.Fatalf("%s: %v", name, err)
	}
	c := &benchChild{cmd: cmd, stdin: stdin, addr: strings.TrimSpace(line), tls: strings.HasSuffix(name, "-tls")}
	benchChildren[name] = c
	return c
}

// startPeer starts nginx or HAProxy, with their bench/peers
// configuration, in front of backend, or skips the benchmark when the
// program is missing. It runs in the foreground and stops on SIGTERM.
func startPeer(b *testing.B, name, backendAddr string) *benchChild {
	peer, overTLS := strings.CutSuffix(name, "-tls")
	bin, err := exec.LookPath(peer)
	if err != nil {
		b.Skipf("%s is not installed: %v", peer, err)
	}
	file := map[string]string{"nginx": "nginx.conf", "haproxy": "haproxy.cfg",
		"nginx-tls": "nginx-tls.conf", "haproxy-tls": "haproxy-tls.cfg"}[name]
	tmpl, err := os.ReadFile("../../bench/peers/" + file)
	if err != nil {
		b.Fatal(err)
	}
	addr, static := freeAddr(b), freeAddr(b)
	for static == addr {
		static = freeAddr(b)
	}
	dir, err := os.MkdirTemp("", "portcullis-bench-"+name+"-*")
	if err != nil {
		b.Fatal(err)
	}
	if overTLS {
		writePeerCert(b, dir)
	}
	conf := strings.NewReplacer("@TMP@", dir, "@LISTEN@", addr, "@LISTEN_STATIC@", static, "@BACKEND@", backendAddr).Replace(string(tmpl))
	if err := os.WriteFile(dir+"/"+file, []byte(conf), 0o644); err != nil {
		b.Fatal(err)
	}
	var cmd *exec.Cmd
	if peer == "nginx" {
		cmd = exec.Command(bin, "-p", dir, "-e", dir+"/error.log", "-c", dir+"/"+file)
	} else {
		cmd = exec.Command(bin, "-db", "-f", dir+"/"+file)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	c := &benchChild{cmd: cmd, addr: addr, dir: dir, tls: overTLS}
	for i := 0; ; i++ {
		nc, err := net.Dial("tcp", addr)
		if err == nil {
			_ = nc.Close()
			return c
		}
		if i == 100 {
			c.stop()
			b.Fatalf("%s did not listen on %s within 10 s", name, addr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func stopBenchChildren() {
	benchMu.Lock()
	defer benchMu.Unlock()
	for _, c := range benchChildren {
		c.stop()
	}
	if benchCertPath != "" {
		_ = os.RemoveAll(benchCertPath)
	}
}

// stop closes the child's connections and stops it: a daemon child when
// its standard input closes, nginx and HAProxy by SIGTERM to the PID this
// process started.
func (c *benchChild) stop() {
	for _, bc := range c.conns {
		_ = bc.Close()
	}
	if c.stdin != nil {
		_ = c.stdin.Close()
	} else {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
	}
	_ = c.cmd.Wait()
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
	}
}

// cpuTime returns the user and system CPU time of the child and of its
// own children (nginx's workers).
func (c *benchChild) cpuTime(b *testing.B) proccpu.Times {
	t, err := proccpu.TimesWithChildren(c.cmd.Process.Pid)
	if err != nil {
		b.Skipf("no /proc: %v", err) // CPU time is read from /proc on Linux only
	}
	return t
}

const (
	benchConns = 64 // keep-alive connections per daemon
	benchAddrs = 8  // client addresses 127.0.0.10-17 they come from
)

// connsFor returns the child's benchConns connections, dialled once.
func (c *benchChild) connsFor(b *testing.B) []*benchclient.Conn {
	for i := len(c.conns); i < benchConns; i++ {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(10+i%benchAddrs))}}
		nc, err := d.Dial("tcp", c.addr)
		if err != nil {
			b.Fatal(err)
		}
		if c.tls {
			tc := tls.Client(nc, &tls.Config{RootCAs: sharedCert(b).Pool, ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}})
			if err := tc.Handshake(); err != nil {
				b.Fatal(err)
			}
			nc = tc
		}
		c.conns = append(c.conns, benchclient.NewConn(nc, benchRequest))
	}
	return c.conns
}

func benchDaemons(b *testing.B, names []string) {
	children := make([]*benchChild, len(names))
	conns := make([][]*benchclient.Conn, len(names))
	for i, name := range names {
		children[i] = startBenchChild(b, name)
		conns[i] = children[i].connsFor(b)
		benchclient.Drive(b, conns[i], 2*benchConns) // warm up
	}
	cpu := make([]time.Duration, len(names))
	sys := make([]time.Duration, len(names))
	wall := make([]time.Duration, len(names))
	const batch = 2000
	b.ResetTimer()
	for done := 0; done < b.N; done += batch {
		n := min(batch, b.N-done)
		for i, c := range children {
			c0 := c.cpuTime(b)
			wall[i] += benchclient.Drive(b, conns[i], n)
			c1 := c.cpuTime(b)
			cpu[i] += c1.User + c1.System - c0.User - c0.System
			sys[i] += c1.System - c0.System
		}
	}
	b.StopTimer()
	for i, name := range names {
		b.ReportMetric(float64(cpu[i].Microseconds())/float64(b.N), name+"-cpu-µs/req")
		b.ReportMetric(float64(sys[i].Microseconds())/float64(b.N), name+"-sys-µs/req")
		b.ReportMetric(float64(b.N)/wall[i].Seconds(), name+"-req/s")
		if i > 0 && cpu[0] > 0 {
			b.ReportMetric(float64(cpu[i])/float64(cpu[0]), name+"/"+names[0]+"-cpu")
			b.ReportMetric(wall[0].Seconds()/wall[i].Seconds(), name+"/"+names[0]+"-req/s")
		}
	}
}

// writeAllocProfile writes the allocations profile to path, for
// PORTCULLIS_BENCH_MEMPROFILE.
func writeAllocProfile(path string) {
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	defer f.Close()
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
}

var (
	benchCertOnce sync.Once
	benchCertPath string
)

// benchCertDir writes the test certificate and key, once, for the -tls
// daemons: the children read them, the clients trust sharedCert's pool.
func benchCertDir(b *testing.B) string {
	benchCertOnce.Do(func() {
		dir, err := os.MkdirTemp("", "portcullis-bench-tls-*")
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := sharedCert(b).WriteFiles(dir); err != nil {
			b.Fatal(err)
		}
		benchCertPath = dir
	})
	return benchCertPath
}

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// writePeerCert writes the test certificate and key into dir as the TLS
// configurations of bench/peers read them: cert.pem and key.pem (nginx),
// and both in cert-key.pem (HAProxy).
func writePeerCert(b *testing.B, dir string) {
	c := sharedCert(b)
	if _, _, err := c.WriteFiles(dir); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(dir+"/cert-key.pem", append(append([]byte(nil), c.CertPEM...), c.KeyPEM...), 0o600); err != nil {
		b.Fatal(err)
	}
}
