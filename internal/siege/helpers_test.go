package siege_test

import (
	"bufio"
	"context"
	"encoding/hex"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/backend"
	"github.com/seed-a07d1050/portcullis/internal/siege"
)

// runMargin is how far past Warmup+Duration a run may end: closing sockets
// and joining goroutines, slowed by the race detector on a machine whose two
// cores are shared. TestRunEndsOnTime makes every timer in the run much
// longer than this, so a wait on any of them would still show.
const runMargin = 2 * time.Second

var (
	attackerIP = netip.MustParseAddr("127.0.0.2")
	firstIP    = netip.MustParseAddr("127.0.0.3")
)

func startBackend(t *testing.T, cfg backend.Config) *backend.Server {
	t.Helper()
	s, err := backend.StartConfig("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// runChecked runs cfg and checks what every run must satisfy: it ends on
// time, leaves no goroutine of the siege package and no socket from its
// source addresses behind, and its report adds up.
func runChecked(t *testing.T, ctx context.Context, cfg siege.Config) *siege.Report {
	t.Helper()
	start := time.Now()
	rep, err := siege.Run(ctx, cfg)
	elapsed := time.Since(start)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if g := siegeGoroutines(); len(g) > 0 {
		t.Errorf("%d goroutines of package siege still running after Run:\n%s", len(g), strings.Join(g, "\n\n"))
	}
	if n := openSocketsFrom(t, sourceAddrs(cfg), targetPort(t, cfg.Target)); n != 0 {
		t.Errorf("%d sockets from the run's source addresses still open after Run", n)
	}
	if limit := cfg.Warmup + cfg.Duration + runMargin; elapsed > limit {
		t.Errorf("Run took %v, want ≤ %v", elapsed, limit)
	}
	checkConsistent(t, rep)
	return rep
}

func checkConsistent(t *testing.T, rep *siege.Report) {
	t.Helper()
	l := rep.Legit
	if got := l.Successes + l.Errors.Total(); got != l.Requests {
		t.Errorf("Successes %d + errors %d = %d, want Requests %d", l.Successes, l.Errors.Total(), got, l.Requests)
	}
	secs := rep.Duration.Seconds()
	if !near(l.RequestsPerSec, float64(l.Requests)/secs) || !near(l.GoodputPerSec, float64(l.Successes)/secs) {
		t.Errorf("rates %.3f/%.3f do not match %d/%d requests in %v", l.RequestsPerSec, l.GoodputPerSec, l.Requests, l.Successes, rep.Duration)
	}
	if l.Requests > 0 && !near(l.SuccessRate, float64(l.Successes)/float64(l.Requests)) {
		t.Errorf("SuccessRate %v, want %d/%d", l.SuccessRate, l.Successes, l.Requests)
	}
	if !(l.P50 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) {
		t.Errorf("latencies out of order: p50 %v p99 %v p999 %v max %v", l.P50, l.P99, l.P999, l.Max)
	}
	if l.Successes == 0 && l.Max != 0 {
		t.Errorf("no successes but max latency %v", l.Max)
	}
	if l.Successes > 0 && l.P50 <= 0 {
		t.Errorf("successes but p50 %v", l.P50)
	}
	if a := rep.Attack; a != nil {
		if sum := a.DialErrors + a.Admitted + a.Refused + a.Unsettled; sum != a.Attempts {
			t.Errorf("attacker: dial errors %d + admitted %d + refused %d + unsettled %d = %d, want attempts %d",
				a.DialErrors, a.Admitted, a.Refused, a.Unsettled, sum, a.Attempts)
		}
		if uint64(a.PeakHeld) > a.Admitted || a.Answered > a.Admitted || a.Answered429 > a.Answered {
			t.Errorf("attacker: peak %d, answered %d (429: %d) inconsistent with admitted %d", a.PeakHeld, a.Answered, a.Answered429, a.Admitted)
		}
		workers := uint64(a.Slowloris + a.SlowRequests)
		if a.Reconnects > a.Attempts || a.Reconnects+workers < a.Attempts {
			t.Errorf("attacker: reconnects %d not within attempts %d minus %d workers", a.Reconnects, a.Attempts, workers)
		}
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func sourceAddrs(cfg siege.Config) []netip.Addr {
	out := []netip.Addr{attackerIP}
	if cfg.AttackerAddr.IsValid() {
		out[0] = cfg.AttackerAddr
	}
	if len(cfg.ClientAddrs) > 0 {
		return append(out, cfg.ClientAddrs...)
	}
	a := firstIP
	if cfg.FirstClientAddr.IsValid() {
		a = cfg.FirstClientAddr
	}
	n := cfg.Clients
	if n == 0 {
		n = siege.DefaultClients
	}
	for range n {
		out = append(out, a)
		a = a.Next()
	}
	return out
}

// siegeGoroutines returns the stacks of goroutines running code of package
// siege (the external test package's frames read "siege_test.", not "siege.")
// that are still there after up to a second. A goroutine Run waited for may
// still be leaving its last frame when Run returns: an AfterFunc callback
// that closed the channel Run waits on is runnable at its closing brace
// for a moment (a clean-clone CI run saw one). One that is blocked stays,
// and is reported.
func siegeGoroutines() []string {
	deadline := time.Now().Add(time.Second)
	for {
		g := siegeStacks()
		if len(g) == 0 || time.Now().After(deadline) {
			return g
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func siegeStacks() []string {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "portcullis/internal/siege.") {
			out = append(out, g)
		}
	}
	return out
}

// targetPort is the port of the URL u, whose sockets are the server's.
func targetPort(t *testing.T, u string) string {
	t.Helper()
	parsed, err := url.Parse(u)
	if err != nil || parsed.Port() == "" {
		t.Fatalf("target %q has no port", u)
	}
	return parsed.Port()
}

// openSocketsFrom counts this process's TCP sockets whose local address is
// one of srcs, by matching /proc/self/fd against /proc/net/tcp. Sockets on
// serverPort are the target's own, when it shares an address with a client.
func openSocketsFrom(t *testing.T, srcs []netip.Addr, serverPort string) int {
	t.Helper()
	inodes := map[string]bool{}
	fds, err := filepath.Glob("/proc/self/fd/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		if link, err := os.Readlink(fd); err == nil && strings.HasPrefix(link, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	want := map[netip.Addr]bool{}
	for _, a := range srcs {
		want[a] = true
	}
	n := 0
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		n += countSockets(t, table, inodes, want, serverPort)
	}
	return n
}

// countSockets counts the lines of a /proc/net/tcp{,6} table whose inode is
// in inodes and whose local address is in want.
func countSockets(t *testing.T, table string, inodes map[string]bool, want map[netip.Addr]bool, serverPort string) int {
	t.Helper()
	f, err := os.Open(table)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || !inodes[fields[9]] {
			continue
		}
		ipHex, portHex, _ := strings.Cut(fields[1], ":")
		if port, err := strconv.ParseUint(portHex, 16, 16); err == nil && strconv.FormatUint(port, 10) == serverPort {
			continue
		}
		b, err := hex.DecodeString(ipHex)
		if err != nil || len(b)%4 != 0 {
			continue
		}
		// The address is printed as host-order (little-endian) 32-bit words.
		for i := 0; i < len(b); i += 4 {
			b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
		}
		a, _ := netip.AddrFromSlice(b)
		if want[a.Unmap()] {
			n++
		}
	}
	return n
}

// cappedListener closes, right after accept and before reading a byte, every
// connection from ip beyond limit open at once: a per-client cap enforced at
// accept time, as connlimit does.
type cappedListener struct {
	net.Listener
	ip    netip.Addr
	limit int

	mu      sync.Mutex
	open    int
	maxOpen int
	refused int
	read    atomic.Int64 // bytes read from admitted connections from ip
}

func newCappedListener(t *testing.T, ip netip.Addr, limit int) *cappedListener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return &cappedListener{Listener: ln, ip: ip, limit: limit}
}

func (l *cappedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap() != l.ip {
			return c, nil
		}
		if l.admit() {
			return &cappedConn{Conn: c, l: l}, nil
		}
		_ = c.Close()
	}
}

func (l *cappedListener) admit() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open >= l.limit {
		l.refused++
		return false
	}
	l.open++
	l.maxOpen = max(l.maxOpen, l.open)
	return true
}

func (l *cappedListener) stats() (open, maxOpen, refused int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open, l.maxOpen, l.refused
}

type cappedConn struct {
	net.Conn
	l    *cappedListener
	once sync.Once
}

func (c *cappedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.l.read.Add(int64(n))
	return n, err
}

func (c *cappedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.open--
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// rawServer accepts connections and hands each to handle on a goroutine of
// its own; Close stops it, closes every connection and waits for handlers.
type rawServer struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]bool
}

func startRaw(t *testing.T, handle func(net.Conn)) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{ln: ln, conns: map[net.Conn]bool{}}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns[c] = true
			s.mu.Unlock()
			s.wg.Go(func() {
				defer c.Close()
				handle(c)
			})
		}
	})
	t.Cleanup(s.Close)
	return s
}

func (s *rawServer) URL() string { return "http://" + s.ln.Addr().String() + "/" }

func (s *rawServer) Close() {
	_ = s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// readHead reads one request head from br, reporting false at EOF or error.
func readHead(br *bufio.Reader) bool {
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return false
		}
		if line == "\r\n" {
			return true
		}
	}
}

// TestSocketCheckSeesOpenSockets proves the leak check can fail: it must see
// a socket left open from a client address.
func TestSocketCheckSeesOpenSockets(t *testing.T) {
	b := startBackend(t, backend.Config{})
	d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(firstIP, 0)), Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	port := targetPort(t, b.URL())
	if n := openSocketsFrom(t, []netip.Addr{firstIP}, port); n != 1 {
		t.Errorf("with one socket open from %v, counted %d", firstIP, n)
	}
	c.Close()
	if n := openSocketsFrom(t, []netip.Addr{firstIP}, port); n != 0 {
		t.Errorf("after closing it, counted %d", n)
	}
}
