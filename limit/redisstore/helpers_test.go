package redisstore_test

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-a07d1050/portcullis/internal/redistest"
	"github.com/seed-a07d1050/portcullis/internal/waitfor"
	"github.com/seed-a07d1050/portcullis/limit"
	"github.com/seed-a07d1050/portcullis/limit/redisstore"
)

const testPrefix = "t:"

// quiet discards logs: breaker changes are expected in these tests.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newClient(t testing.TB, addr string) redis.UniversalClient {
	t.Helper()
	c, err := redisstore.NewClient(redisstore.ClientOptions{Addrs: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// node is one cluster member: a limiter counting through its own Store.
type node struct {
	l  *limit.Limiter[string]
	st *redisstore.Store[string]
}

// newNode builds a node on addr. cfg.Client, Prefix, Logger and Timeout
// are filled in when left zero; the timeout is 200 ms rather than 50 ms so
// that -race on a shared machine does not turn slow calls into fallbacks
// in tests that are not about them.
func newNode(t testing.TB, addr string, cfg redisstore.Config, lc limit.Config[string]) node {
	t.Helper()
	if cfg.Client == nil {
		cfg.Client = newClient(t, addr)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = testPrefix
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 200 * time.Millisecond
	}
	st, err := redisstore.New[string](cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	lc.Store = st
	if lc.Logger == nil {
		lc.Logger = quiet
	}
	l, err := limit.New(lc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.Close()
		st.Close()
	})
	return node{l, st}
}

// waitFor polls cond until it holds or limit passes.
// (internal/waitfor holds the loop; this package keeps the name while
// another branch edits its tests: issue 37 item 6.)
func waitFor(t testing.TB, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	waitfor.Within(t, limit, what, cond)
}

// counts reads the key's hash and returns each live node's count.
func counts(t testing.TB, c redis.UniversalClient, key string) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	h, err := c.HGetAll(ctx, testPrefix+"{"+key+"}").Result()
	if err != nil {
		t.Fatalf("HGETALL: %v", err)
	}
	out := map[string]int{}
	for f, v := range h {
		if len(f) > 2 && f[:2] == "c:" {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("field %s = %q", f, v)
			}
			out[f[2:]] = n
		}
	}
	return out
}

// sameCounts reports whether Redis holds exactly what each node holds for
// key (nodes holding nothing have no field).
func sameCounts(t testing.TB, c redis.UniversalClient, key string, nodes ...node) bool {
	got := counts(t, c, key)
	want := map[string]int{}
	for _, n := range nodes {
		if v := n.l.InUse(key); v > 0 {
			want[n.st.NodeID()] = v
		}
	}
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

func acquireN(t testing.TB, n node, key string, count int) []limit.Permit[string] {
	t.Helper()
	var ps []limit.Permit[string]
	for i := range count {
		p, err := n.l.Acquire(context.Background(), key)
		if err != nil {
			t.Fatalf("acquire %d of %s on %s: %v", i+1, key, n.st.NodeID(), err)
		}
		ps = append(ps, p)
	}
	return ps
}

func releaseAll(ps []limit.Permit[string]) {
	for _, p := range ps {
		p.Release()
	}
}

func startRedis(t testing.TB) *redistest.Server { return redistest.Start(t) }
