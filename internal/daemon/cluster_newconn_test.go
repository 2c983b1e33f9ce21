package daemon_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-a07d1050/portcullis/internal/daemon"
	"github.com/seed-a07d1050/portcullis/internal/redistest"
)

// newConnText is a listener whose connection cap, client limit and one
// route's limit (2 per client) all count on the Redis at addr, under
// prefix.
func newConnText(addr, prefix string) string {
	return `
admin: {listen: "127.0.0.1:0"}
cluster:
  redis: {addrs: ["` + addr + `"]}
  timeout: 2s          # this machine is shared: never fall back to the node's own count
  on_error: closed
  release_hold: 200ms  # a request that a loaded machine delays still finds its spares
  lease: 60s           # and no heartbeat (every lease/3) drops them meanwhile
  prefix: "` + prefix + `"
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    max_conns_per_client: 16
    client_limit: {permits: 8}
    routes:
      - name: r
        upstreams: ["{{backend}}"]
        limit: {permits: 2}
`
}

// A new connection's cap and its first request's client and route limits
// cost one Redis round trip, not three: the cap's acquire at accept
// carries prefetches of the two limits' permits, which the request takes
// without a call. Across two nodes the route limit stays exact (a backend
// never sees more than 2 requests of the client at once), connections
// that close without a request give their prefetched permits back, and
// every count in Redis goes back to zero.
func TestClusterNewConnectionOneRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	prefix := "test:" + strings.ReplaceAll(t.Name(), "/", "-") + ":"
	text := newConnText(srv.Addr(), prefix)
	a := startDaemon(t, text)
	nodeB, err := daemon.Start(parseConfig(t, text, a.backend.URL()), daemon.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = nodeB.Shutdown(context.Background()) }()
	urlA, urlB := a.url("web", "/"), "http://"+nodeB.Addr("web").String()+"/"

	// One request on each new connection, from a client address not seen
	// before (its keys quiet in Redis).
	const conns = 20
	before := acquireTrips(t, a)
	for i := range conns {
		c := oneShotClient("127.0.0." + strconv.Itoa(30+i))
		if st, _, _ := get(t, c, urlA); st != http.StatusOK {
			t.Fatalf("connection %d: status %d", i, st)
		}
	}
	trips := acquireTrips(t, a) - before
	t.Logf("%d new connections with one request each: %d acquire round trips", conns, trips)
	if trips != conns {
		t.Fatalf("%d acquire round trips for %d new connections; want one each", trips, conns)
	}

	// Exact across the nodes: one client opening new connections to both,
	// each a request of 30 ms, 8 at a time, under a route limit of 2.
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := oneShotClient("127.0.0.2")
			for i := range 10 {
				url := urlA
				if (w+i)%2 == 1 {
					url = urlB
				}
				resp, err := c.Get(url + "?ms=30")
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				statuses[resp.StatusCode]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	t.Logf("statuses %v, backend peak %d", statuses, a.backend.maxInFlight.Load())
	if p := a.backend.maxInFlight.Load(); p > 2 {
		t.Fatalf("the backend saw %d requests of one client at once; the cluster-wide route limit is 2", p)
	}
	if statuses[http.StatusOK] == 0 || statuses[http.StatusOK]+statuses[http.StatusTooManyRequests] != 80 {
		t.Fatalf("statuses %v: want 200s and 429s only, some 200s", statuses)
	}

	// Connections that never send a request: their prefetched permits go
	// back with the release batch.
	granted := metricSum(t, a, "portcullis_redisstore_prefetches_total{", `result="granted"`)
	for i := range 5 {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(60+i))}}
		nc, err := d.Dial("tcp", a.srv.Addr("web").String())
		if err != nil {
			t.Fatal(err)
		}
		a.waitFor("the connection admitted", func() bool { return a.snapshot().InUse() > 0 })
		_ = nc.Close()
	}

	// Two limits (client_limit and the route's limit) for each new key.
	a.waitFor("the unused connections' prefetches granted", func() bool {
		return metricSum(t, a, "portcullis_redisstore_prefetches_total{", `result="granted"`)-granted == 10
	})

	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	a.waitFor("every count in Redis back to zero", func() bool { return countsHeld(t, rdb, prefix) == 0 })
}

// oneShotClient is an HTTP client from source address ip that opens a new
// connection for every request.
func oneShotClient(ip string) *http.Client {
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: waitLimit}
	return &http.Client{Timeout: 2 * waitLimit, Transport: &http.Transport{DialContext: dialer.DialContext, DisableKeepAlives: true}}
}

// acquireTrips is the sum of d's acquire round trips over every cluster
// Store (portcullis_redisstore_calls_total{kind="acquire"}): a pipeline
// is one, whatever it carries.
func acquireTrips(t *testing.T, d *testDaemon) int {
	t.Helper()
	return metricSum(t, d, `portcullis_redisstore_calls_total{kind="acquire"`, "")
}

// metricSum is the sum of d's metric lines that start with prefix and
// contain label.
func metricSum(t *testing.T, d *testDaemon, prefix, label string) int {
	t.Helper()
	n := 0
	for line := range strings.Lines(d.metrics()) {
		if !strings.HasPrefix(line, prefix) || !strings.Contains(line, label) {
			continue
		}
		_, v, _ := strings.Cut(strings.TrimSpace(line), "} ")
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		n += int(f)
	}
	return n
}

// countsHeld is the sum of every node's count in every hash under prefix.
func countsHeld(t *testing.T, rdb *redis.Client, prefix string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	keys, err := rdb.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0
	for _, k := range keys {
		h, err := rdb.HGetAll(ctx, k).Result()
		if err != nil {
			continue // not a hash: a rate's state
		}
		for f, v := range h {
			if n, err := strconv.Atoi(v); err == nil && strings.HasPrefix(f, "c:") {
				sum += n
			}
		}
	}
	return sum
}
