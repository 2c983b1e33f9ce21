package daemon_test

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-a07d1050/portcullis/internal/daemon"
	"github.com/seed-a07d1050/portcullis/internal/redistest"
)

// startDaemonLogging is startDaemon with the daemon's own logger (built from
// the configuration's log section) writing to out.
func startDaemonLogging(t *testing.T, text string, out io.Writer) *testDaemon {
	t.Helper()
	b := startBackend(t)
	srv, err := daemon.Start(parseConfig(t, text, b.URL()), daemon.Options{LogOutput: out})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
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

// commandCalls reads INFO commandstats and returns the calls per command,
// leaving out INFO itself (the test's own reads).
func commandCalls(t *testing.T, c *redis.Client) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	text, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	out := make(map[string]int)
	for _, line := range strings.Split(text, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd || name == "info" {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, err := strconv.Atoi(calls)
		if err != nil {
			t.Fatalf("commandstats line %q", line)
		}
		out[name] = n
	}
	return out
}

// callsSince returns the commands run between two commandCalls readings.
func callsSince(before, after map[string]int) map[string]int {
	diff := make(map[string]int)
	for name, n := range after {
		if d := n - before[name]; d != 0 {
			diff[name] = d
		}
	}
	return diff
}

func redisClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// A listener with max_conns_per_client: -1 under a cluster makes no Redis
// call per connection, nor does an unlimited route limit; a client that a
// conn_overrides entry caps still counts in Redis.
func TestClusterUncappedListenerMakesNoRedisCalls(t *testing.T) {
	defaultServer(t, testClusterUncappedListenerMakesNoRedisCalls)
}

func testClusterUncappedListenerMakesNoRedisCalls(t *testing.T) {
	srv := redistest.Start(t)
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
cluster:
  redis: {addrs: ["`+srv.Addr()+`"]}
  timeout: 2s
  on_error: closed
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    max_conns_per_client: -1
    conn_overrides:
      - {cidr: "127.0.0.9", max: 4}
    routes:
      - name: r
        upstreams: ["{{backend}}"]
        limit: {permits: -1}
`)
	rc := redisClient(t, srv.Addr())
	// The Stores subscribe to release notices on their own goroutines once
	// started: wait for that before counting.
	if !waitUntil(func() bool { return commandCalls(t, rc)["subscribe"] >= 2 }) {
		t.Fatalf("the daemon's Stores never subscribed: %v", commandCalls(t, rc))
	}
	time.Sleep(100 * time.Millisecond)
	before := commandCalls(t, rc)
	const conns = 20
	for i := range conns {
		c := clientFrom("127.0.0.2")
		if st, _, _ := get(t, c, d.url("web", "/"+strconv.Itoa(i))); st != http.StatusOK {
			t.Fatalf("request %d: %d", i, st)
		}
		c.CloseIdleConnections()
	}
	d.waitFor("connections closed", func() bool { return d.listener("web").Connections.Open == 0 })
	if diff := callsSince(before, commandCalls(t, rc)); len(diff) != 0 {
		t.Fatalf("%d connections and requests of an uncapped client ran Redis commands %v, want none", conns, diff)
	}

	// The counter sees what it should: the capped network's client asks.
	before = commandCalls(t, rc)
	c := d.client("127.0.0.9")
	if st, _, _ := get(t, c, d.url("web", "/")); st != http.StatusOK {
		t.Fatalf("capped client: %d", st)
	}
	if diff := callsSince(before, commandCalls(t, rc)); len(diff) == 0 {
		t.Fatal("a client capped by conn_overrides ran no Redis command: the count above proves nothing")
	}
}

// With on_error: closed, a Redis outage refuses the connections a
// cluster-wide cap counts, and nothing else: a listener without a cap, and a
// route whose limit is unlimited, keep serving.
func TestClusterOutageLeavesUncappedListenerServing(t *testing.T) {
	defaultServer(t, testClusterOutageLeavesUncappedListenerServing)
}

func testClusterOutageLeavesUncappedListenerServing(t *testing.T) {
	srv := redistest.Start(t)
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
cluster:
  redis: {addrs: ["`+srv.Addr()+`"]}
  timeout: 200ms
  on_error: closed
listeners:
  - name: free
    protocol: http
    listen: "127.0.0.1:0"
    max_conns_per_client: -1
    routes:
      - name: r
        upstreams: ["{{backend}}"]
        limit: {permits: -1}
  - name: capped
    protocol: http
    listen: "127.0.0.1:0"
    max_conns_per_client: 8
    routes:
      - upstreams: ["{{backend}}"]
`)
	srv.Stop()
	for i := range 10 {
		c := clientFrom("127.0.0.2")
		if st, _, _ := get(t, c, d.url("free", "/")); st != http.StatusOK {
			t.Fatalf("uncapped listener during the outage, request %d: %d", i, st)
		}
		c.CloseIdleConnections()
	}
	if !refusedAtOnce(t, dialFrom(t, "127.0.0.3", d.srv.Addr("capped").String())) {
		t.Fatal("a capped listener admitted a connection its closed policy should refuse while Redis is down")
	}
	if n := d.listener("capped").Connections.Refused.Store; n == 0 {
		t.Fatal("the capped listener's refusal was not counted as a store refusal")
	}
	if r := d.listener("free").Connections.Refused; r.Total() != 0 {
		t.Fatalf("the uncapped listener refused connections: %+v", r)
	}
	srv.Restart()
}

// A Redis outage seen by every Store of a daemon (connection caps, a client
// limit, a route limit) is logged once when it starts and once when it
// ends, naming the Stores.
func TestClusterOutageLoggedOnce(t *testing.T) { defaultServer(t, testClusterOutageLoggedOnce) }

func testClusterOutageLoggedOnce(t *testing.T) {
	srv := redistest.Start(t)
	var out syncBuffer
	d := startDaemonLogging(t, `
log: {level: info}
admin: {listen: "127.0.0.1:0"}
cluster:
  redis: {addrs: ["`+srv.Addr()+`"]}
  timeout: 200ms
  lease: 1s
  on_error: open
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    max_conns_per_client: 8
    client_limit: {permits: 8}
    routes:
      - name: r
        upstreams: ["{{backend}}"]
        limit: {permits: 8}
`, &out)
	hit := func() {
		c := clientFrom("127.0.0.2")
		if resp, err := c.Get(d.url("web", "/")); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		c.CloseIdleConnections()
	}
	hit()
	srv.Stop()
	stores := []string{"web/connections", "web/client_limit", "web/r/limit"}
	breakers := func(state string) bool {
		m := d.metrics()
		for _, s := range stores {
			parts := strings.Split(s, "/")
			route, limit := "", parts[len(parts)-1]
			if len(parts) == 3 {
				route = parts[1]
			}
			if limit == "limit" {
				limit = "route_limit" // the store's name keeps the config's word; its label says what it is
			}
			line := `portcullis_redisstore_breaker_state{limit="` + limit + `",listener="web",route="` + route + `"} `
			if !strings.Contains(m, line+state) {
				return false
			}
		}
		return true
	}
	d.waitFor("every breaker open", func() bool { hit(); return breakers("2") })
	srv.Restart()
	d.waitFor("every breaker closed", func() bool { hit(); return breakers("0") })

	log := out.String()
	if n := strings.Count(log, "redis unavailable"); n != 1 {
		t.Errorf("%d outage lines for one outage, want 1:\n%s", n, log)
	}
	if n := strings.Count(log, "reachable again"); n != 1 {
		t.Errorf("%d recovery lines for one outage, want 1:\n%s", n, log)
	}
	for _, s := range stores {
		if !strings.Contains(log, s) {
			t.Errorf("the outage lines do not name %s:\n%s", s, log)
		}
	}
}
