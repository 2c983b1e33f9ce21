package caddyportcullis_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	caddyportcullis "github.com/seed-a07d1050/portcullis/caddy"
)

// waitTimeout bounds every wait in these tests.
const waitTimeout = 10 * time.Second

// caddyMu keeps tests from running two Caddy configurations at once:
// Caddy is one per process.
var caddyMu sync.Mutex

// waitFor polls cond until it holds, failing the test after waitTimeout.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// instance is a Caddy running in this process with its admin endpoint on
// a Unix socket in a temporary directory.
type instance struct {
	dir   string
	admin *http.Client
}

// globalOptions are prepended to every test Caddyfile: the admin endpoint
// on a private socket, storage in the test's directory, no automatic
// HTTPS, no log output.
const globalOptions = `
	admin unix/{dir}/admin.sock
	storage file_system {dir}/storage
	auto_https off
	log {
		output discard
	}
`

// startCaddy adapts caddyfile (in which {dir} is replaced by a temporary
// directory and the token GLOBAL by globalOptions), runs it, and stops it
// after t.
func startCaddy(t *testing.T, dir, caddyfile string) *instance {
	t.Helper()
	caddyMu.Lock()
	t.Cleanup(caddyMu.Unlock)
	caddyfile = strings.ReplaceAll(caddyfile, "GLOBAL", globalOptions)
	caddyfile = strings.ReplaceAll(caddyfile, "{dir}", dir)
	cfg, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), map[string]any{"filename": "Caddyfile"})
	if err != nil {
		t.Fatalf("adapting the Caddyfile: %v\n%s", err, caddyfile)
	}
	for _, w := range warnings {
		if strings.Contains(w.Message, "not formatted") {
			continue
		}
		t.Logf("Caddyfile warning: %s", w.String())
	}
	if err := caddy.Load(cfg, true); err != nil {
		t.Fatalf("running Caddy: %v", err)
	}
	t.Cleanup(func() {
		if err := caddy.Stop(); err != nil {
			t.Errorf("stopping Caddy: %v", err)
		}
	})
	return &instance{dir: dir, admin: adminClient(dir)}
}

// adminClient talks to the admin endpoint on dir/admin.sock.
func adminClient(dir string) *http.Client {
	sock := filepath.Join(dir, "admin.sock")
	return &http.Client{Timeout: waitTimeout, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
}

// mustConfig decodes a JSON configuration.
func mustConfig(t testing.TB, js string) *caddy.Config {
	t.Helper()
	var cfg caddy.Config
	if err := json.Unmarshal([]byte(js), &cfg); err != nil {
		t.Fatalf("decoding %s: %v", js, err)
	}
	return &cfg
}

// adminGet fetches path from the admin endpoint.
func (c *instance) adminGet(t testing.TB, path string) string {
	t.Helper()
	resp, err := c.admin.Get("http://localhost" + path)
	if err != nil {
		t.Fatalf("admin GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("admin GET %s: %d %s %v", path, resp.StatusCode, b, err)
	}
	return string(b)
}

// limits fetches the admin endpoint's snapshot.
func (c *instance) limits(t testing.TB) caddyportcullis.LimitsSnapshot {
	t.Helper()
	var s caddyportcullis.LimitsSnapshot
	if err := json.Unmarshal([]byte(c.adminGet(t, "/portcullis/limits")), &s); err != nil {
		t.Fatalf("decoding the snapshot: %v", err)
	}
	return s
}

// clientFrom is an HTTP client whose connections come from the loopback
// address src.
func clientFrom(src string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	return &http.Client{Timeout: waitTimeout, Transport: &http.Transport{DialContext: d.DialContext}}
}

// upstream is a slow backend: each request waits for the gate to open or
// for its client to go.
type upstream struct {
	addr    string
	entered atomic.Int64
	running atomic.Int64
	gate    chan struct{}
	once    sync.Once
}

func startUpstream(t *testing.T) *upstream {
	t.Helper()
	u := &upstream{gate: make(chan struct{})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.addr = ln.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.entered.Add(1)
		u.running.Add(1)
		defer u.running.Add(-1)
		select {
		case <-u.gate:
			_, _ = io.WriteString(w, "slow "+r.URL.Path)
		case <-r.Context().Done():
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		u.open()
		_ = srv.Close()
	})
	return u
}

func (u *upstream) open() { u.once.Do(func() { close(u.gate) }) }

// get sends GET url with header h from client c in the background.
func get(ctx context.Context, c *http.Client, url string, h http.Header) <-chan response {
	done := make(chan response, 1)
	go func() {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			done <- response{err: err}
			return
		}
		for k, v := range h {
			req.Header[k] = v
		}
		resp, err := c.Do(req)
		if err != nil {
			done <- response{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		done <- response{status: resp.StatusCode, header: resp.Header, body: string(b), err: err}
	}()
	return done
}

type response struct {
	status int
	header http.Header
	body   string
	err    error
}

func wait(t testing.TB, done <-chan response) response {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(waitTimeout):
		t.Fatal("timed out waiting for a response")
		return response{}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
