package daemon_test

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/daemon"
	"github.com/seed-a07d1050/portcullis/internal/redistest"
	"github.com/seed-a07d1050/portcullis/limit/redisstore"
)

// clusterText is a daemon with one route limited to 2 permits, counted on
// the Redis at addr with the extra cluster lines given (indented by two).
func clusterText(t *testing.T, addr, extra string) string {
	return `
admin: {listen: "127.0.0.1:0"}
cluster:
  redis: {addrs: ["` + addr + `"]}
  prefix: "test:` + strings.ReplaceAll(t.Name(), "/", "-") + `:"
` + extra + `
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - name: r
        upstreams: ["{{backend}}"]
        limit: {permits: 2}
`
}

// A daemon whose Redis refuses its password does not start: before, it
// started, said ready and ran on its node-local fallback for good with
// one WARN. The right password starts it.
func TestClusterWrongPasswordFailsStart(t *testing.T) {
	redis := redistest.StartArgs(t, "--requirepass", "right-password")
	dir := t.TempDir()
	for _, pw := range []string{"wrong-password", "right-password"} {
		file := filepath.Join(dir, pw)
		if err := os.WriteFile(file, []byte(pw+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		text := strings.Replace(clusterText(t, redis.Addr(), ""), `redis: {addrs: ["`+redis.Addr()+`"]}`,
			`redis: {addrs: ["`+redis.Addr()+`"], password_file: "`+file+`"}`, 1)
		b := startBackend(t)
		srv, err := daemon.Start(parseConfig(t, text, b.URL()), daemon.Options{Logger: testLogger(t)})
		if pw == "wrong-password" {
			if err == nil {
				srv.Close()
				t.Fatal("the daemon started with a password Redis refuses")
			}
			if !errors.Is(err, redisstore.ErrAuth) {
				t.Fatalf("start: %v, want an error wrapping redisstore.ErrAuth", err)
			}
			t.Logf("start refused: %v", err)
			continue
		}
		if err != nil {
			t.Fatalf("start with the right password: %v", err)
		}
		srv.Close()
	}
}

// degradedValue returns the value of portcullis_cluster_degraded for
// reason in the daemon's /metrics, or "" when it has no such series.
func degradedValue(d *testDaemon, reason string) string {
	prefix := `portcullis_cluster_degraded{reason="` + reason + `"} `
	for _, line := range strings.Split(d.metrics(), "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			return v
		}
	}
	return ""
}

// A Redis slower than the timeout, and then a Redis that refuses
// connections, are loud: portcullis_cluster_degraded is 1 with the reason
// (timeout, then refused) while the node decides on its own, /readyz stays
// 200 but says so, and the gauge is back to 0 once Redis answers in time.
// Before, a Redis 50 ms away at the default timeout left every node on its
// own share for good with one WARN, and nothing to alert on.
func TestClusterDegradedGaugeAndReadyz(t *testing.T) {
	redis := redistest.Start(t)
	px := redistest.NewProxy(t, redis.Addr())
	d := startDaemon(t, clusterText(t, px.Addr(), "  timeout: 50ms"))
	for _, r := range []string{"timeout", "auth", "refused", "error"} {
		if v := degradedValue(d, r); v != "0" {
			t.Fatalf("before any fault, portcullis_cluster_degraded{reason=%q} is %q, want 0", r, v)
		}
	}
	c := d.client("127.0.0.2")
	// load sends n requests, one at a time; while degraded every one is
	// admitted by the node's fallback (2 permits). Just after Redis is
	// back, an acquire that timed out but ran in Redis may still count
	// there until the node's resync, which refuses (429), never admits
	// more: soon is allowed that.
	load := func(n int, soon bool) {
		t.Helper()
		for range n {
			st, _, err := get(t, c, d.url("web", "/"))
			if st != http.StatusOK && !(soon && st == http.StatusTooManyRequests) {
				t.Fatalf("request: %d %v", st, err)
			}
		}
	}
	px.SetDelay(40 * time.Millisecond) // an 80 ms round trip, over the 50 ms timeout
	load(8, false)
	if v := degradedValue(d, "timeout"); v != "1" {
		t.Fatalf("with Redis 80 ms away and a 50 ms timeout, portcullis_cluster_degraded{reason=\"timeout\"} is %q, want 1", v)
	}
	if st, body := d.readyz(); st != http.StatusOK || !strings.Contains(body, "cluster degraded (timeout)") {
		t.Fatalf("/readyz while degraded: %d %q, want 200 saying the cluster is degraded", st, body)
	}
	px.SetDelay(0)
	d.waitFor("the degraded gauge back to 0 once Redis answers in time", func() bool {
		load(1, true)
		return degradedValue(d, "timeout") == "0"
	})
	px.Down()
	load(8, false)
	if v := degradedValue(d, "refused"); v != "1" {
		t.Fatalf("with Redis refusing connections, portcullis_cluster_degraded{reason=\"refused\"} is %q, want 1", v)
	}
	px.Up()
	d.waitFor("the degraded gauge back to 0 once Redis is back", func() bool {
		load(1, true)
		return degradedValue(d, "refused") == "0"
	})
	if st, body := d.readyz(); st != http.StatusOK || body != "ready\n" {
		t.Fatalf("/readyz after the faults: %d %q", st, body)
	}
	c.CloseIdleConnections()
}
