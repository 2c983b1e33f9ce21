package daemon_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/admin"
	"github.com/seed-a07d1050/portcullis/internal/backend"
	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/daemon"
	"github.com/seed-a07d1050/portcullis/internal/waitfor"
)

// waitLimit bounds every wait in these tests.
const waitLimit = 10 * time.Second

// testBackend answers every path: after ?ms=N milliseconds when asked,
// with the headers it received under /headers, and a WebSocket echo at /ws.
type testBackend struct {
	srv         *http.Server
	ln          net.Listener
	inFlight    atomic.Int64
	maxInFlight atomic.Int64
	requests    atomic.Int64
	bigEnded    chan error // what ended each /big response
}

func startBackend(t testing.TB) *testBackend {
	t.Helper()
	ws, err := backend.New(backend.Config{})
	if err != nil {
		t.Fatal(err)
	}
	b := &testBackend{bigEnded: make(chan error, 16)}
	mux := http.NewServeMux()
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		// An endless body, for clients that stop reading; at most 1 GiB.
		chunk := make([]byte, 64<<10)
		for range 1 << 14 {
			if _, err := w.Write(chunk); err != nil {
				b.bigEnded <- err
				return
			}
		}
		b.bigEnded <- nil
	})
	mux.Handle("/ws", ws)
	mux.HandleFunc("/headers", func(w http.ResponseWriter, r *http.Request) {
		out := map[string]string{"Host": r.Host}
		for k := range r.Header {
			out[k] = strings.Join(r.Header.Values(k), ", ")
		}
		_ = json.NewEncoder(w).Encode(out)
	})
	mux.HandleFunc("/abort", func(w http.ResponseWriter, r *http.Request) {
		// Half a body, then the connection is cut: the proxy's copy fails
		// after the head was sent.
		w.Header().Set("Content-Length", "100")
		_, _ = w.Write([]byte("0123456789"))
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		// A first part, flushed, then nothing until the client goes: a
		// proxy that buffers never shows the first part.
		if ct := r.URL.Query().Get("type"); ct != "" {
			w.Header().Set("Content-Type", ct)
		}
		if n := r.URL.Query().Get("length"); n != "" {
			w.Header().Set("Content-Length", n)
		}
		_, _ = io.WriteString(w, "first part\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		b.requests.Add(1)
		n := b.inFlight.Add(1)
		defer b.inFlight.Add(-1)
		for m := b.maxInFlight.Load(); n > m && !b.maxInFlight.CompareAndSwap(m, n); m = b.maxInFlight.Load() {
		}
		if ms, _ := strconv.Atoi(r.URL.Query().Get("ms")); ms > 0 {
			select {
			case <-time.After(time.Duration(ms) * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
		_, _ = fmt.Fprintf(w, "ok %s\n", r.URL.Path)
	})
	b.ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b.srv = &http.Server{Handler: mux}
	go func() { _ = b.srv.Serve(b.ln) }()
	t.Cleanup(func() { _ = b.srv.Close() })
	return b
}

func (b *testBackend) URL() string { return "http://" + b.ln.Addr().String() }

// testDaemon is a daemon.Server under test with the clients the test made.
type testDaemon struct {
	t       *testing.T
	srv     *daemon.Server
	backend *testBackend
	mu      sync.Mutex
	clients []*http.Client
	// manualStop is set by tests that stop the daemon themselves: the
	// final check then reads the snapshot in process, the admin listener
	// being gone.
	manualStop bool
}

// servers are the HTTP/1.x modes an http or https listener can run
// (http1_server), by the name of the subtests bothServers runs.
var servers = []struct {
	name   string
	server config.HTTP1Server
}{
	{"eventloop", config.HTTP1ServerEventLoop},
	{"nethttp", config.HTTP1ServerNetHTTP},
}

// parts are the internal parts of the eventloop mode that a test may run
// alone, as a subtest server=NAME (lean: the byte path in Go's poller on
// every connection; fast: the daemon's server without the byte path).
var parts = []struct {
	name   string
	server config.HTTP1Server
}{
	{"lean", config.HTTP1ServerLean},
	{"fast", config.HTTP1ServerFast},
}

// bothServers runs test once per HTTP/1.x mode, as the subtests
// server=eventloop and server=nethttp: every configuration parseConfig
// parses within a subtest gives its http and https listeners that
// subtest's server, unless the configuration names one itself. The
// end-to-end tests whose subject is how the daemon reads, answers and
// relays HTTP/1.x (framing, refusals, hang-ups, timeouts, shutdown,
// forwarding fields, upgrades, the access line of an exchange, the
// permits of an exchange that ends badly) run under it, so that both
// modes are held to the same behaviour.
func bothServers(t *testing.T, test func(t *testing.T)) {
	for _, s := range servers {
		t.Run("server="+s.name, test)
	}
}

// defaultServer runs test on the default HTTP/1.x server alone: for the
// end-to-end tests whose subject does not depend on how the server reads
// and writes HTTP/1.x (reloads, lists, clusters, metrics, the admin API,
// the forward proxy's policies and counts). The net/http server reaches
// the same limiters, reload plan and forward proxy through the same
// handler chain that the default server hands a connection back to.
func defaultServer(t *testing.T, test func(t *testing.T)) { test(t) }

// serverOf returns the HTTP/1.x server of the bothServers subtest (or the
// server=NAME subtest of an internal part) t runs in, or "" (the default)
// outside one.
func serverOf(t testing.TB) config.HTTP1Server {
	for _, part := range strings.Split(t.Name(), "/") {
		if name, ok := strings.CutPrefix(part, "server="); ok {
			for _, s := range append(servers[:len(servers):len(servers)], parts...) {
				if s.name == name {
					return s.server
				}
			}
		}
	}
	return ""
}

// parseConfig parses YAML text after replacing {{backend}} with url, and
// gives its http and https listeners the server of the bothServers
// subtest t runs in.
func parseConfig(t testing.TB, text, url string) *config.Config {
	t.Helper()
	text = strings.ReplaceAll(text, "{{backend}}", url)
	cfg, err := config.Parse("test.yaml", []byte(text))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	// The tests' targets listen on random loopback ports; CONNECT reaches
	// 443 only by default. A test about connect_ports names them itself.
	if !strings.Contains(text, "connect_ports") {
		for i := range cfg.Listeners {
			if l := &cfg.Listeners[i]; l.Mode == config.ModeForward {
				if l.Forward == nil {
					l.Forward = &config.Forward{}
				}
				l.Forward.ConnectPorts = []string{"1-65535"}
			}
		}
	}
	if s := serverOf(t); s != "" {
		for i := range cfg.Listeners {
			if l := &cfg.Listeners[i]; l.Protocol.Uses("http1_server") && l.HTTP1Server == "" {
				l.HTTP1Server = s
			}
		}
	}
	return cfg
}

// startDaemon starts a backend and a daemon from text, and checks after the
// test that the daemon holds nothing (no connection, permit or waiter).
func startDaemon(t *testing.T, text string) *testDaemon {
	t.Helper()
	b := startBackend(t)
	cfg := parseConfig(t, text, b.URL())
	srv, err := daemon.Start(cfg, daemon.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	checkServers(t, srv, cfg)
	d := &testDaemon{t: t, srv: srv, backend: b}
	t.Cleanup(func() {
		if !t.Failed() {
			d.checkIdle()
		}
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return d
}

// checkServers fails t unless every http and https listener of cfg is
// served by the HTTP/1.x server it names, or by the subtest's.
func checkServers(t *testing.T, srv *daemon.Server, cfg *config.Config) {
	t.Helper()
	for _, l := range cfg.Effective().Listeners {
		if !l.Protocol.Uses("http1_server") {
			continue
		}
		if got := daemon.HTTP1ServerOf(srv, l.Name); got != l.HTTP1Server {
			t.Fatalf("listener %s is served by %q, want %q", l.Name, got, l.HTTP1Server)
		}
	}
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// url returns the http URL of path on the named listener.
func (d *testDaemon) url(listener, path string) string {
	return "http://" + d.srv.Addr(listener).String() + path
}

func (d *testDaemon) adminURL(path string) string {
	return "http://" + d.srv.AdminAddr().String() + path
}

// client returns an HTTP client whose connections come from source address
// ip (127.0.0.X).
func (d *testDaemon) client(ip string) *http.Client {
	c := clientFrom(ip)
	d.mu.Lock()
	d.clients = append(d.clients, c)
	d.mu.Unlock()
	return c
}

func clientFrom(ip string) *http.Client {
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: waitLimit}
	return &http.Client{
		Timeout: 2 * waitLimit,
		Transport: &http.Transport{
			DialContext:         dialer.DialContext,
			MaxIdleConnsPerHost: 64,
			DisableCompression:  true,
		},
	}
}

// snapshot reads /debug/limits.
func (d *testDaemon) snapshot() admin.Snapshot {
	d.t.Helper()
	resp, err := http.Get(d.adminURL("/debug/limits"))
	if err != nil {
		d.t.Fatalf("debug/limits: %v", err)
	}
	defer resp.Body.Close()
	var s admin.Snapshot
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		d.t.Fatalf("debug/limits: %v", err)
	}
	return s
}

// checkIdle closes the test's idle client connections and waits until
// /debug/limits shows nothing in use.
func (d *testDaemon) checkIdle() {
	d.t.Helper()
	closeIdle := func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, c := range d.clients {
			c.CloseIdleConnections()
		}
	}
	var last admin.Snapshot
	read := d.snapshot
	if d.manualStop {
		read = d.srv.Snapshot
	}
	// Again at every look: an HTTP/2 connection whose last stream the
	// client was still tearing down is not idle to the first call.
	ok := waitUntil(func() bool { closeIdle(); last = read(); return last.InUse() == 0 })
	if !ok {
		b, _ := json.MarshalIndent(last, "", "  ")
		d.t.Errorf("daemon not idle after the test:\n%s", b)
	}
}

// waitUntil polls cond until it holds or waitLimit passes.
func waitUntil(cond func() bool) bool { return waitfor.Until(waitLimit, cond) }

func (d *testDaemon) waitFor(what string, cond func() bool) {
	d.t.Helper()
	if !waitUntil(cond) {
		d.t.Fatalf("timed out waiting for %s", what)
	}
}

// get sends GET url with c and returns the status and body.
func get(t *testing.T, c *http.Client, url string) (int, string, http.Header) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read body: %v", url, err)
	}
	return resp.StatusCode, string(body), resp.Header
}

// result is the outcome of a request made in the background.
type result struct {
	status int
	err    error
}

func getAsync(c *http.Client, url string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		resp, err := c.Get(url)
		if err != nil {
			ch <- result{err: err}
			return
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		ch <- result{status: resp.StatusCode, err: err}
	}()
	return ch
}

func await(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(2 * waitLimit):
		t.Fatal("request did not end in time")
		return result{}
	}
}

// route returns the snapshot of the named route of the named listener.
func (s routeFinder) route(listener, name string) admin.RouteSnapshot {
	for _, l := range s.Listeners {
		if l.Name != listener {
			continue
		}
		for _, r := range l.Routes {
			if r.Name == name {
				return r
			}
		}
	}
	return admin.RouteSnapshot{}
}

type routeFinder struct{ admin.Snapshot }

func (d *testDaemon) route(listener, name string) admin.RouteSnapshot {
	return routeFinder{d.snapshot()}.route(listener, name)
}

func (d *testDaemon) listener(name string) admin.ListenerSnapshot {
	for _, l := range d.snapshot().Listeners {
		if l.Name == name {
			return l
		}
	}
	d.t.Fatalf("no listener %s in snapshot", name)
	return admin.ListenerSnapshot{}
}

// readKeptOK reads the next response from br and fails t unless it is a
// 200 that keeps the connection open; what names the request.
func readKeptOK(t *testing.T, br *bufio.Reader, what string) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("%s: %d (close %v), want 200 on a kept connection", what, resp.StatusCode, resp.Close)
	}
}

// onHTTPS returns text with its first http listener served as https with
// the certificate in certFile and keyFile.
func onHTTPS(text, certFile, keyFile string) string {
	return strings.Replace(text, "    protocol: http\n",
		"    protocol: https\n    tls: {cert_file: \""+certFile+"\", key_file: \""+keyFile+"\"}\n", 1)
}
