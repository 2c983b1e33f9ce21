package chaos

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/connlimit"
	"github.com/seed-a07d1050/portcullis/httplimit"
	"github.com/seed-a07d1050/portcullis/internal/admin"
	"github.com/seed-a07d1050/portcullis/internal/backend"
	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/daemon"
	"github.com/seed-a07d1050/portcullis/internal/testcert"
)

// Hosts select the daemon's routes; every route names its host, so a
// request for any other host gets the daemon's own 404.
const (
	hostSteady = "steady.test" // the legitimate route: an upstream that stays up
	hostQueue  = "queue.test"  // the steady upstream behind a limit with a queue
	hostFlaky  = "flaky.test"  // the upstream that is killed and restarted
	hostLib    = "lib.test"    // the panicking handler behind httplimit
)

// connCap is max_conns_per_client on every daemon listener.
const connCap = 8

// env is everything TestChaos runs: three backends and the daemon in front
// of them.
type env struct {
	t           *testing.T
	steady      *backend.Server
	steadyConns *connlimit.Listener // the steady backend's listener
	flaky       *flakyBackend
	lib         *libBackend
	daemon      *daemon.Server
	roots       *x509.CertPool
	cert        certFiles

	// rawListen is the fixed address of the raw listener, so that a reload
	// that rebinds it closes the old socket before binding the new one
	// (the other listeners move to a new port 0 socket instead).
	rawListen string

	// knobs are the settings reloads change.
	knobs   knobs
	reloads map[string]int // by what changed
}

// knobs are the parts of the daemon configuration a reload changes: the
// queue route's permits (a new limiter for that route alone), the web
// listener's client limit (a new limiter for every route of web and tls),
// the idle timeout of web or tls (a new socket for that listener, the old
// one drained), the raw listener's max_conns (the same for the tcp
// listener, on its fixed port), and a listener that cannot bind.
type knobs struct {
	queuePermits  int
	clientPermits int
	webIdle       time.Duration
	tlsIdle       time.Duration
	rawMaxConns   int
	// badListen, when set, adds a listener on this address, which is in
	// use: the reload must fail and change nothing.
	badListen string
}

// extraListener is the YAML of the listener knobs.badListen asks for, or "".
func (e *env) extraListener() string {
	if e.knobs.badListen == "" {
		return ""
	}
	return `  - name: extra
    protocol: http
    listen: "` + e.knobs.badListen + `"
    routes:
      - upstreams: ["` + e.steady.URL() + `"]
`
}

// startEnv starts the backends and the daemon. Cleanups stop whatever is
// still running if the test ends early; the normal end stops them itself,
// checking each step.
func startEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, knobs: knobs{queuePermits: 1, clientPermits: 16, webIdle: 3 * time.Second, tlsIdle: 3 * time.Second}, reloads: make(map[string]int)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("steady backend: %v", err)
	}
	// The steady backend accepts through connlimit (counting only: the
	// daemon is its one client), so that the test can see the daemon close
	// its upstream connections when it stops.
	e.steadyConns, err = connlimit.NewListener(ln, connlimit.Config{Policy: connlimit.Policy{Permits: -1}, Name: "steady"})
	if err != nil {
		t.Fatalf("steady backend: %v", err)
	}
	if e.steady, err = backend.Serve(e.steadyConns, backend.Config{}); err != nil {
		t.Fatalf("steady backend: %v", err)
	}
	t.Cleanup(func() { _ = e.steady.Close() })
	e.flaky = startFlaky(t)
	t.Cleanup(e.flaky.kill)
	e.lib = startLib(t)
	t.Cleanup(e.lib.close)
	e.cert, e.roots = selfSigned(t)
	e.rawListen = freeAddr(t)

	e.daemon, err = daemon.Start(e.config(), daemon.Options{Logger: daemonLogger()})
	if err != nil {
		t.Fatalf("daemon: %v", err)
	}
	t.Cleanup(func() { _ = e.daemon.Close() })
	return e
}

// daemonLogger discards the daemon's logs unless -chaos.log: a chaos run
// makes thousands of lines, nearly all of them expected.
func daemonLogger() *slog.Logger {
	if *logDaemon {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return slog.New(slog.DiscardHandler)
}

// configText is the daemon configuration, with the knobs as parameters.
const configText = `
admin: {listen: "127.0.0.1:0"}
shutdown_timeout: 5s
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    max_conns_per_client: {{cap}}
    read_header_timeout: 1s
    idle_timeout: {{webIdle}}
    client_limit: {permits: {{clientPermits}}}
    routes:
      - name: steady
        host: [steady.test]
        upstreams: ["{{steady}}"]
      - name: queue
        host: [queue.test]
        upstreams: ["{{steady}}"]
        limit: {permits: {{queuePermits}}, queue: {size: 3, timeout: 1s}}
        shadow_limit: {permits: 1}
      - name: flaky
        host: [flaky.test]
        upstreams: ["{{flaky}}"]
        limit: {permits: 32, tunnel_permits: 2}
      - name: lib
        host: [lib.test]
        upstreams: ["{{lib}}"]
        limit: {permits: 4, queue: {size: 4, timeout: 500ms}}
  - name: tls
    protocol: https
    listen: "127.0.0.1:0"
    tls: {cert_file: "{{cert}}", key_file: "{{key}}"}
    max_conns_per_client: {{cap}}
    read_header_timeout: 1s
    idle_timeout: {{tlsIdle}}
    routes_from: web
  - name: raw
    protocol: tcp
    listen: "{{rawListen}}"
    upstream: "{{flakyAddr}}"
    max_conns_per_client: {{cap}}
    max_conns: {{rawMaxConns}}
{{extra}}`

// config returns the daemon configuration for the current knobs.
func (e *env) config() *config.Config {
	e.t.Helper()
	text := strings.NewReplacer(
		"{{cap}}", strconv.Itoa(connCap),
		"{{steady}}", e.steady.URL(),
		"{{flaky}}", "http://"+e.flaky.addr,
		"{{flakyAddr}}", e.flaky.addr,
		"{{lib}}", "http://"+e.lib.ln.Addr().String(),
		"{{cert}}", e.cert.cert,
		"{{key}}", e.cert.key,
		"{{queuePermits}}", strconv.Itoa(e.knobs.queuePermits),
		"{{webIdle}}", e.knobs.webIdle.String(),
		"{{tlsIdle}}", e.knobs.tlsIdle.String(),
		"{{clientPermits}}", strconv.Itoa(e.knobs.clientPermits),
		"{{rawMaxConns}}", strconv.Itoa(e.knobs.rawMaxConns),
		"{{rawListen}}", e.rawListen,
		"{{extra}}", e.extraListener(),
	).Replace(configText)
	cfg, err := config.Parse("chaos.yaml", []byte(text))
	if err != nil {
		e.t.Fatalf("chaos config: %v", err)
	}
	return cfg
}

// freeAddr returns a loopback address with a port nobody listens on now,
// for a listener the test closes and binds again on the same port. The port
// lies below the kernel's ephemeral range, so that no outgoing connection
// of the test can take it as its source port while it is unbound.
func freeAddr(t *testing.T) string {
	t.Helper()
	low := ephemeralLow()
	for range 500 {
		port := 10000 + mrand.IntN(low-10000)
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		addr := ln.Addr().String()
		ln.Close()
		return addr
	}
	t.Fatal("no free port below the ephemeral port range")
	return ""
}

// ephemeralLow is the first port the kernel hands out to outgoing
// connections (32768 unless configured otherwise).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return 32768
	}
	if n, err := strconv.Atoi(f[0]); err == nil && n > 11000 {
		return n
	}
	return 32768
}

// addr returns the address of the daemon listener name.
func (e *env) addr(name string) string { return e.daemon.Addr(name).String() }

// tlsConfig is what clients of the https listener use; nextProtos chooses
// between HTTP/1.1 and HTTP/2.
func (e *env) tlsConfig(nextProtos ...string) *tls.Config {
	return &tls.Config{RootCAs: e.roots, ServerName: "127.0.0.1", NextProtos: nextProtos}
}

// flakyBackend is a backend.Server on a fixed port that the test kills and
// restarts: each incarnation is a new Server on a new listener bound to the
// same address.
type flakyBackend struct {
	addr string

	mu        sync.Mutex
	cur       *backend.Server // nil while down
	restarts  int
	closeErrs []error // from Server.Close: handlers that did not return
}

func startFlaky(t *testing.T) *flakyBackend {
	t.Helper()
	ln, err := net.Listen("tcp", freeAddr(t))
	if err != nil {
		t.Fatalf("flaky backend: %v", err)
	}
	f := &flakyBackend{addr: ln.Addr().String()}
	if f.cur, err = backend.Serve(ln, backend.Config{}); err != nil {
		t.Fatalf("flaky backend: %v", err)
	}
	return f
}

// kill closes the running incarnation, cutting its connections; Close
// waits (boundedly) for its handlers, and an error from it is recorded.
func (f *flakyBackend) kill() {
	f.mu.Lock()
	s := f.cur
	f.cur = nil
	f.mu.Unlock()
	if s == nil {
		return
	}
	if err := s.Close(); err != nil {
		f.mu.Lock()
		f.closeErrs = append(f.closeErrs, err)
		f.mu.Unlock()
	}
}

// revive starts a new incarnation on the same address. Binding may fail
// for a moment while the kernel lets go of the old socket, so it retries
// within a bound.
func (f *flakyBackend) revive() error {
	deadline := time.Now().Add(2 * time.Second)
	for {
		ln, err := net.Listen("tcp", f.addr)
		if err == nil {
			s, err := backend.Serve(ln, backend.Config{})
			if err != nil {
				return err
			}
			f.mu.Lock()
			f.cur = s
			f.restarts++
			f.mu.Unlock()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("rebind %s: %w", f.addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// inFlight is the running incarnation's requests in progress (0 while down).
func (f *flakyBackend) inFlight() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cur == nil {
		return 0
	}
	return f.cur.Handler().InFlight()
}

// libBackend is a plain http.Server whose handler is the library middleware
// (httplimit, with a limit and a queue) in front of a handler that panics
// when asked to.
type libBackend struct {
	lim      *httplimit.Limiter
	srv      *http.Server
	ln       net.Listener
	served   chan struct{}
	inFlight atomic.Int64
	panics   atomic.Int64
	closed   sync.Once
}

// libPermits and libQueue are the library middleware's limit per client.
const (
	libPermits = 3
	libQueue   = 2
)

func startLib(t *testing.T) *libBackend {
	t.Helper()
	// The daemon connects from 127.0.0.1 and names the client in
	// X-Forwarded-For: trusting it keys the limit by the real client.
	res := &clientkey.Resolver{
		Trusted: clientkey.MustParseProxySet("127.0.0.1"),
		Header:  clientkey.HeaderXForwardedFor,
	}
	lim, err := httplimit.New(httplimit.Config{
		Key: httplimit.ByClientIP(res),
		Policy: httplimit.Policy{
			Permits:      libPermits,
			QueueSize:    libQueue,
			QueueTimeout: 300 * time.Millisecond,
		},
		Logger: slog.New(slog.DiscardHandler),
		Name:   "chaos-lib",
	})
	if err != nil {
		t.Fatalf("lib limiter: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("lib backend: %v", err)
	}
	b := &libBackend{lim: lim, ln: ln, served: make(chan struct{})}
	b.srv = &http.Server{
		Handler: lim.Wrap(http.HandlerFunc(b.serve)),
		// net/http logs every recovered panic with its stack; they are
		// deliberate here, and counted instead.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	go func() {
		defer close(b.served)
		_ = b.srv.Serve(ln)
	}()
	return b
}

// serve answers "lib ok", after ?ms=N milliseconds if asked (or when the
// client leaves), and panics on ?do=panic (a plain value) or ?do=abort
// (http.ErrAbortHandler after half a body).
func (b *libBackend) serve(w http.ResponseWriter, r *http.Request) {
	b.inFlight.Add(1)
	defer b.inFlight.Add(-1)
	q := r.URL.Query()
	if ms, _ := strconv.Atoi(q.Get("ms")); ms > 0 {
		t := time.NewTimer(time.Duration(ms) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		}
	}
	switch q.Get("do") {
	case "panic":
		b.panics.Add(1)
		panic("chaos: deliberate handler panic")
	case "abort":
		b.panics.Add(1)
		w.Header().Set("Content-Length", "100")
		_, _ = w.Write([]byte("0123456789"))
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}
	_, _ = io.WriteString(w, "lib ok\n")
}

// close stops the server (cutting its connections), waits for it within a
// bound, and closes the limiter.
func (b *libBackend) close() {
	b.closed.Do(func() {
		_ = b.srv.Close()
		select {
		case <-b.served:
		case <-time.After(5 * time.Second):
		}
		_ = b.lim.Close()
	})
}

// certFiles are the paths of a PEM certificate and its key.
type certFiles struct{ cert, key string }

// selfSigned writes a self-signed certificate for 127.0.0.1 into the test's
// temporary directory and returns its files and a pool trusting it.
func selfSigned(t *testing.T) (certFiles, *x509.CertPool) {
	t.Helper()
	c, err := testcert.New()
	if err != nil {
		t.Fatal(err)
	}
	var f certFiles
	if f.cert, f.key, err = c.WriteFiles(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	return f, c.Pool
}

// held lists every count that is not back to zero: the daemon's connections
// and permits (read in process), the library middleware's permits and
// waiters, the keys each limiter remembers (a key is forgotten when its
// counts reach zero), each backend's requests in flight, and the reload
// work still running. Empty means idle.
func (e *env) held() []string {
	var out []string
	for _, l := range e.daemon.Snapshot().Listeners {
		if c := l.Connections; c.Open != 0 || c.Pending != 0 || len(l.BusyClients) != 0 {
			out = append(out, fmt.Sprintf("daemon listener %s: %d open, %d pending connections (keys %v)", l.Name, c.Open, c.Pending, l.BusyClients))
		}
		out = appendLimit(out, "daemon listener "+l.Name+" client_limit", l.ClientLimit)
		for _, r := range l.Routes {
			out = appendLimit(out, "daemon route "+r.Name+" limit", r.Limit)
			out = appendLimit(out, "daemon route "+r.Name+" shadow_limit", r.ShadowLimit)
		}
	}
	if tot := e.lib.lim.Totals(); tot.InUse != 0 || tot.Waiting != 0 || tot.Keys != 0 {
		out = append(out, fmt.Sprintf("library middleware: %d in use, %d waiting, %d keys remembered", tot.InUse, tot.Waiting, tot.Keys))
	}
	if n := e.lib.inFlight.Load(); n != 0 {
		out = append(out, fmt.Sprintf("library backend handler: %d in flight", n))
	}
	if n := e.steady.Handler().InFlight(); n != 0 {
		out = append(out, fmt.Sprintf("steady backend: %d in flight", n))
	}
	if n := e.flaky.inFlight(); n != 0 {
		out = append(out, fmt.Sprintf("flaky backend: %d in flight", n))
	}
	return append(out, reloadLeftovers()...)
}

// reloadWork are the daemon's goroutines that outlive a reload: one drains
// a listener the reload replaced (for at most shutdown_timeout), one closes
// a route limiter it replaced once its permits and waiters are gone. Once
// the daemon is idle none may be left: one that is holds a listener's
// connections or a retired limiter's permits, which no snapshot shows.
var reloadWork = []string{"proxy.(*Server).drainInBackground", "proxy.(*Server).retire"}

// reloadLeftovers describes the reload goroutines still running.
func reloadLeftovers() []string {
	var out []string
	for _, stack := range goroutines() {
		for _, fn := range reloadWork {
			if strings.Contains(stack, fn) {
				out = append(out, "reload work still running:\n"+stack)
			}
		}
	}
	return out
}

func appendLimit(out []string, what string, l *admin.LimitSnapshot) []string {
	if l == nil || (l.Totals.InUse == 0 && l.Totals.Waiting == 0 && l.Totals.Keys == 0) {
		return out
	}
	return append(out, fmt.Sprintf("%s: %d in use, %d waiting, %d keys remembered (busy %v)",
		what, l.Totals.InUse, l.Totals.Waiting, l.Totals.Keys, l.Busy))
}

// adminSnapshot reads /debug/limits from the admin listener.
func (e *env) adminSnapshot(ctx context.Context) (admin.Snapshot, error) {
	var s admin.Snapshot
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+e.daemon.AdminAddr().String()+"/debug/limits", nil)
	if err != nil {
		return s, err
	}
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("debug/limits: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return s, fmt.Errorf("debug/limits: %w", err)
	}
	return s, nil
}
