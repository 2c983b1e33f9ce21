package daemon_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/daemon"
	"github.com/seed-a07d1050/portcullis/internal/redistest"
)

// Two nodes sharing one Redis count a route limit together: a client
// holding its one permit on node A is refused on node B.
func TestClusterSharesRouteLimitsAcrossNodes(t *testing.T) {
	defaultServer(t, testClusterSharesRouteLimitsAcrossNodes)
}

func testClusterSharesRouteLimitsAcrossNodes(t *testing.T) {
	redis := redistest.Start(t)
	text := oneRouteLimitInCluster(t, redis.Addr())
	a := startDaemon(t, text)
	urlB := startNodeB(t, text)

	c := a.client("127.0.0.2")
	slow := getAsync(c, a.url("web", "/?ms=2000"))
	// Admitted on A (the backend has it), not only counted there: a
	// permit A counts may still be on its way to Redis.
	a.waitFor("the slow request admitted on node A", func() bool { return a.backend.inFlight.Load() == 1 })
	if st, _, _ := get(t, c, urlB); st != http.StatusTooManyRequests {
		t.Fatalf("same client on node B: %d, want 429 (one cluster-wide count)", st)
	}
	if st, _, _ := get(t, a.client("127.0.0.3"), urlB); st != http.StatusOK {
		t.Fatalf("another client on node B: %d", st)
	}
	if m := a.metrics(); !strings.Contains(m, `portcullis_redisstore_calls_total{kind="acquire",limit="route_limit",listener="web",route="r"}`) {
		t.Errorf("/metrics lacks the route limit's Redis calls")
	}
	if r := await(t, slow); r.status != http.StatusOK {
		t.Fatalf("slow on node A: %d %v", r.status, r.err)
	}
	a.waitFor("permit back on node A", func() bool { return a.route("web", "r").Limit.Totals.InUse == 0 })
	ok := waitUntil(func() bool {
		resp, err := c.Get(urlB)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if !ok {
		t.Fatal("node B never admitted the client after node A released its permit")
	}
	c.CloseIdleConnections()
}

// oneRouteLimitInCluster is a daemon on the Redis at addr whose one route
// has a cluster-wide limit of 1, and which never falls back to its own
// count, with keys of its own test.
func oneRouteLimitInCluster(t *testing.T, addr string) string {
	return `
admin: {listen: "127.0.0.1:0"}
cluster:
  redis: {addrs: ["` + addr + `"]}
  timeout: 2s        # this machine is shared: never fall back to the node's own count
  on_error: closed
  prefix: "test:` + strings.ReplaceAll(t.Name(), "/", "-") + `:"
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - name: r
        upstreams: ["{{backend}}"]
        limit: {permits: 1}
`
}

// startNodeB starts a second daemon from text, with a backend of its own,
// stopped when t ends, and returns the URL of its listener web's root.
func startNodeB(t *testing.T, text string) string {
	t.Helper()
	nodeB, err := daemon.Start(parseConfig(t, text, startBackend(t).URL()), daemon.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nodeB.Shutdown(context.Background()) })
	return "http://" + nodeB.Addr("web").String() + "/"
}

// Two nodes sharing one Redis count a client's connections together: a
// client holding its cap of connections on node A is refused at accept on
// node B, and admitted there again once it closes one on A.
func TestClusterSharesConnectionCapsAcrossNodes(t *testing.T) {
	defaultServer(t, testClusterSharesConnectionCapsAcrossNodes)
}

func testClusterSharesConnectionCapsAcrossNodes(t *testing.T) {
	redis := redistest.Start(t)
	text := `
admin: {listen: "127.0.0.1:0"}
cluster:
  redis: {addrs: ["` + redis.Addr() + `"]}
  timeout: 2s        # this machine is shared: never fall back to the node's own count
  on_error: closed
  prefix: "test:` + strings.ReplaceAll(t.Name(), "/", "-") + `:"
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    max_conns_per_client: 2
    routes:
      - upstreams: ["{{backend}}"]
`
	a := startDaemon(t, text)
	b := startDaemon(t, text)
	addrA, addrB := a.srv.Addr("web").String(), b.srv.Addr("web").String()

	first := dialFrom(t, "127.0.0.2", addrA)
	dialFrom(t, "127.0.0.2", addrA)
	a.waitFor("2 open connections on node A", func() bool { return a.listener("web").Connections.Open == 2 })

	if !refusedAtOnce(t, dialFrom(t, "127.0.0.2", addrB)) {
		t.Fatal("node B served a third connection of 127.0.0.2 over a cluster-wide cap of 2")
	}
	if st, _, _ := get(t, b.client("127.0.0.3"), b.url("web", "/")); st != http.StatusOK {
		t.Fatalf("another client on node B got %d, want 200", st)
	}
	if n := b.listener("web").Connections.Refused.ClientCap; n != 1 {
		t.Fatalf("node B client_cap refusals = %d, want 1", n)
	}
	// An operator sees the Redis side of the connection caps in /metrics.
	metrics := b.metrics()
	for _, want := range []string{
		`portcullis_redisstore_breaker_state{limit="connections",listener="web",route=""} 0`,
		`portcullis_redisstore_calls_total{kind="acquire",limit="connections",listener="web",route=""}`,
		`portcullis_redisstore_call_duration_seconds_count{limit="connections",listener="web",route=""}`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	first.Close()
	a.waitFor("1 open connection on node A", func() bool { return a.listener("web").Connections.Open == 1 })
	c := b.client("127.0.0.2")
	ok := waitUntil(func() bool {
		resp, err := c.Get(b.url("web", "/"))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if !ok {
		t.Fatal("node B never admitted 127.0.0.2 after it closed a connection on node A")
	}
	c.CloseIdleConnections()
}
