package daemon_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/seed-a07d1050/portcullis/internal/redistest"
)

// A route whose limit counts in the cluster stays on the byte path: a
// steady client's requests take the permit its node holds in Redis
// without asking Redis, and only a request whose permit Redis must grant
// goes to the full server. The count stays one for the cluster: while
// the client holds its one permit on node A through the byte path, node B
// refuses it; once A is done, B admits it, and every count is back to zero.
func TestClusterRouteOnTheBytePath(t *testing.T) {
	redis := redistest.Start(t)
	text := oneRouteLimitInCluster(t, redis.Addr())
	a := startDaemon(t, text)
	urlB := startNodeB(t, text)
	c := a.client("127.0.0.2")

	const n = 200
	relayed := leanRelayed(t, a)
	for i := range n {
		if st, _, _ := get(t, c, a.url("web", "/")); st != http.StatusOK {
			t.Fatalf("request %d on node A: %d", i, st)
		}
	}
	onBytePath := leanRelayed(t, a) - relayed
	t.Logf("%d of %d sequential requests of one client relayed on the byte path", onBytePath, n)
	if onBytePath < n*3/4 {
		t.Fatalf("%d of %d requests of a steady client took the byte path; want most", onBytePath, n)
	}

	// One slow request holds the key's one permit on A, taken on the
	// byte path (the request before it left the permit held).
	if st, _, _ := get(t, c, a.url("web", "/")); st != http.StatusOK {
		t.Fatal("warm-up request failed")
	}
	relayed = leanRelayed(t, a)
	slow := getAsync(c, a.url("web", "/slow?ms=1500"))
	// Admitted on A (the backend has it), not only counted there: a
	// permit A counts may still be on its way to Redis.
	a.waitFor("the slow request admitted on node A", func() bool { return a.backend.inFlight.Load() == 1 })
	if st, _, _ := get(t, c, urlB); st != http.StatusTooManyRequests {
		t.Fatalf("same client on node B while A holds its permit: %d, want 429 (one cluster-wide count)", st)
	}
	if r := await(t, slow); r.status != http.StatusOK {
		t.Fatalf("slow request on node A: %d %v", r.status, r.err)
	}
	if got := leanRelayed(t, a) - relayed; got != 1 {
		t.Logf("the slow request was served by the full server (relayed %d): the held permit had been sent back", got)
	}
	a.waitFor("permit back on node A", func() bool { return a.route("web", "r").Limit.Totals.InUse == 0 })
	if !waitUntil(func() bool {
		st, _, _ := get(t, c, urlB)
		return st == http.StatusOK
	}) {
		t.Fatal("node B never admitted the client after node A was done")
	}
	c.CloseIdleConnections() // the connection caps' counts go too
	waitRedisCountsZero(t, redis.Addr(), "test:"+strings.ReplaceAll(t.Name(), "/", "-")+":")
}

// waitRedisCountsZero waits until no node holds a permit in any
// concurrency hash under prefix (the fields "c:NODE" of redisstore): route
// limits and connection caps.
func waitRedisCountsZero(t *testing.T, addr, prefix string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	held := func() (int, error) {
		keys, err := rdb.Keys(t.Context(), prefix+"*").Result()
		if err != nil {
			return 0, err
		}
		n := 0
		for _, k := range keys {
			h, err := rdb.HGetAll(t.Context(), k).Result()
			if err != nil {
				continue // not a hash (a rate's key)
			}
			for f, v := range h {
				if c, err := strconv.Atoi(v); err == nil && strings.HasPrefix(f, "c:") {
					n += c
				}
			}
		}
		return n, nil
	}
	if !waitUntil(func() bool { n, err := held(); return err == nil && n == 0 }) {
		n, err := held()
		keys, _ := rdb.Keys(t.Context(), prefix+"*").Result()
		for _, k := range keys {
			h, _ := rdb.HGetAll(t.Context(), k).Result()
			t.Logf("%s: %v", k, h)
		}
		t.Fatalf("Redis still counts %d permits under %s (%v)", n, prefix, err)
	}
}

// leanRelayed is how many exchanges d's listener web relayed on the byte
// path so far.
func leanRelayed(t *testing.T, d *testDaemon) int {
	t.Helper()
	line := grepLines(d.metrics(), `portcullis_http_lean_exchanges_total{listener="web",outcome="relayed"}`)
	if line == "" {
		return 0
	}
	n, err := strconv.Atoi(line[strings.LastIndexByte(line, ' ')+1:])
	if err != nil {
		t.Fatalf("metric line %q: %v", line, err)
	}
	return n
}
