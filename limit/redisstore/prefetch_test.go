package redisstore_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-a07d1050/portcullis/internal/redistest"
	"github.com/seed-a07d1050/portcullis/limit"
	"github.com/seed-a07d1050/portcullis/limit/redisstore"
)

// prefetchNode is one node as the daemon has it: a connection cap whose
// Store prefetches, in the pipeline of its acquire script, a spare permit
// of the client limit and of the route limit for the same client key; a
// limiter over each Store; and the round trips of its Redis client.
type prefetchNode struct {
	conns, client, route *limit.Limiter[string]
	cs, cls, rs          *redisstore.Store[string]
	trips                *trips
}

// prefetchLimits are a node's limits: a connection cap, a client limit
// and a route limit, all per client key.
type prefetchLimits struct{ conns, client, route int }

func newPrefetchNode(t *testing.T, addr, id string, lim prefetchLimits, cfg redisstore.Config) prefetchNode {
	t.Helper()
	c := newClient(t, addr)
	h := &trips{}
	c.AddHook(h)
	var n prefetchNode
	n.trips = h
	mk := func(prefix string, permits int, prefetch func(string) []redisstore.Prefetch) (*limit.Limiter[string], *redisstore.Store[string]) {
		sc := cfg
		sc.Client, sc.NodeID, sc.Prefix, sc.Logger, sc.Prefetch = c, id, testPrefix+prefix, quiet, prefetch
		if sc.Timeout == 0 {
			sc.Timeout = 200 * time.Millisecond
		}
		st, err := redisstore.New[string](sc, nil)
		if err != nil {
			t.Fatal(err)
		}
		l, err := limit.New(limit.Config[string]{Policy: limit.Policy[string]{Permits: permits}, Store: st, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			l.Close()
			st.Close()
		})
		return l, st
	}
	n.client, n.cls = mk("client:", lim.client, nil)
	n.route, n.rs = mk("route:", lim.route, nil)
	n.conns, n.cs = mk("conns:", lim.conns, func(key string) []redisstore.Prefetch {
		return []redisstore.Prefetch{n.cls.Spare(key, lim.client), n.rs.Spare(key, lim.route)}
	})
	// Scripts loaded, as the daemon's start does (Probe), so that the
	// first pipeline is not answered NOSCRIPT and sent again.
	if err := redisstore.Probe(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	return n
}

// roundTrips is how many script round trips (pipelines and single calls)
// and scripts the node has sent so far.
func (n prefetchNode) roundTrips() (trips, scripts int64) {
	return n.trips.pipes.Load() + n.trips.cmds.Load(), n.trips.scripts.Load() + n.trips.cmds.Load()
}

// prefetchCounts are the node's counts in Redis for key k of each limit.
func prefetchCounts(t *testing.T, c redis.UniversalClient, id, k string) (conns, client, route int) {
	t.Helper()
	return limitCounts(t, c, "conns:", k)[id], limitCounts(t, c, "client:", k)[id], limitCounts(t, c, "route:", k)[id]
}

// limitCounts are the live nodes' counts of key k of the Stores whose
// Prefix is testPrefix+prefix.
func limitCounts(t *testing.T, c redis.UniversalClient, prefix, k string) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	h, err := c.HGetAll(ctx, testPrefix+prefix+"{"+k+"}").Result()
	if err != nil {
		t.Fatalf("HGETALL: %v", err)
	}
	out := map[string]int{}
	for f, v := range h {
		if n, err := strconv.Atoi(v); err == nil && strings.HasPrefix(f, "c:") && n != 0 {
			out[f[2:]] = n
		}
	}
	return out
}

func allZero(t *testing.T, c redis.UniversalClient, k string) func() bool {
	return func() bool {
		for _, p := range []string{"conns:", "client:", "route:"} {
			if len(limitCounts(t, c, p, k)) != 0 {
				return false
			}
		}
		return true
	}
}

// A new connection's cap and the client and route limits of its first
// request cost one round trip: the cap's acquire script carries a prefetch
// of each limit's permit in its pipeline, and the request's acquires take
// those spares back without a call. A prefetch refused holds nothing, and
// every count goes back to zero.
func TestPrefetchOneRoundTripForCapAndLimits(t *testing.T) {
	srv := startRedis(t)
	c := newClient(t, srv.Addr())
	ctx := context.Background()
	a := newPrefetchNode(t, srv.Addr(), "a", prefetchLimits{conns: 2, client: 4, route: 1}, redisstore.Config{ReleaseHold: time.Second, Lease: 30 * time.Second})
	b := newPrefetchNode(t, srv.Addr(), "b", prefetchLimits{conns: 2, client: 4, route: 1}, redisstore.Config{ReleaseHold: time.Second, Lease: 30 * time.Second})

	conn, err := a.conns.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if rt, sc := a.roundTrips(); rt != 1 || sc != 3 {
		t.Fatalf("the cap's acquire: %d round trips, %d scripts; want 1 pipeline of 3", rt, sc)
	}
	if cn, cl, rt := prefetchCounts(t, c, "a", "k"); cn != 1 || cl != 1 || rt != 1 {
		t.Fatalf("Redis counts a for k: conns %d, client %d, route %d; want 1 each (the spares counted)", cn, cl, rt)
	}
	// The request: its client and route limits take the spares back.
	cp, err := a.client.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	rp, err := a.route.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if rt, _ := a.roundTrips(); rt != 1 {
		t.Fatalf("%d round trips for the cap and the request's two limits; want 1", rt)
	}
	if st := a.rs.Stats(); st.Reused != 1 || st.Prefetches != 1 || st.PrefetchGrants != 1 || st.Acquire.Calls != 0 {
		t.Fatalf("route store: %+v", st)
	}
	// Exact: the route permit a holds is the key's only one.
	bc, err := b.conns.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if st := b.rs.Stats(); st.Prefetches != 1 || st.PrefetchGrants != 0 {
		t.Fatalf("b's route prefetch past the limit of 1: %+v", st)
	}
	if _, _, rt := prefetchCounts(t, c, "b", "k"); rt != 0 {
		t.Fatalf("b's refused prefetch counts %d route permits in Redis", rt)
	}
	if _, err := b.route.Acquire(ctx, "k"); !errors.Is(err, limit.ErrLimited) {
		t.Fatalf("b's request over the route limit of 1: %v", err)
	}
	// b's client limit spare was granted and is taken.
	bcp, err := b.client.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if st := b.cls.Stats(); st.Reused != 1 || st.Acquire.Calls != 0 {
		t.Fatalf("b's client store: %+v", st)
	}
	for _, p := range []limit.Permit[string]{conn, cp, rp, bc, bcp} {
		p.Release()
	}
	waitFor(t, "every count back to zero", 10*time.Second, allZero(t, c, "k"))
}

// A prefetch whose request never comes (a connection reset before it
// sends one, or a request for another route) is sent back by the release
// batch, not left to the lease or the heartbeat: Redis counts it for at
// least ReleaseHold after its grant (kept for the request) and about
// 2 × ReleaseHold plus a round trip at most. A cap refused keeps none of
// its prefetches: they go back with the next batch.
func TestPrefetchUnusedGoesBack(t *testing.T) {
	srv := startRedis(t)
	c := newClient(t, srv.Addr())
	ctx := context.Background()
	const hold = time.Second // long, so that the test sees the spare before it goes
	cfg := redisstore.Config{ReleaseHold: hold, Lease: 30 * time.Second}
	a := newPrefetchNode(t, srv.Addr(), "a", prefetchLimits{conns: 1, client: 4, route: 4}, cfg)
	b := newPrefetchNode(t, srv.Addr(), "b", prefetchLimits{conns: 1, client: 4, route: 4}, cfg)

	start := time.Now()
	conn, err := a.conns.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	conn.Release() // the connection closes without a request
	if _, cl, rt := prefetchCounts(t, c, "a", "k"); cl != 1 || rt != 1 {
		t.Fatalf("Redis counts a's prefetched spares: client %d, route %d; want 1 each", cl, rt)
	}
	waitFor(t, "unused spares back", 10*hold, allZero(t, c, "k"))
	took := time.Since(start)
	t.Logf("unused prefetches back in Redis after %v (ReleaseHold %v)", took, hold)
	if took < hold {
		t.Fatalf("spares sent back after %v, before ReleaseHold (%v): the request could not have used them", took, hold)
	}
	for _, st := range []redisstore.Stats{a.cls.Stats(), a.rs.Stats()} {
		if st.Heartbeat.Calls != 0 || st.Sync.Calls == 0 || st.Held != 0 {
			t.Fatalf("spares not sent back by the release batch: %+v", st)
		}
	}

	// The cap of 1 refused on b (a holds it): its prefetches, granted,
	// are not kept for a request that will not come.
	conn, err = a.conns.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if _, err := b.conns.Acquire(ctx, "k"); !errors.Is(err, limit.ErrLimited) {
		t.Fatalf("b over the cap of 1: %v", err)
	}
	if st := b.rs.Stats(); st.PrefetchGrants != 1 {
		t.Fatalf("b's route prefetch: %+v", st)
	}
	waitFor(t, "b's spares back", 10*hold, func() bool {
		_, cl, rt := prefetchCounts(t, c, "b", "k")
		return cl == 0 && rt == 0
	})
	t.Logf("prefetches of a refused cap back after %v", time.Since(start))
	conn.Release()
	waitFor(t, "every count back to zero", 10*hold, allZero(t, c, "k"))
}

// Redis slower than the Timeout mid-call: the cap follows on_error (open:
// granted on the node cap) and the prefetches are dropped. Their scripts
// may have run (here they reach Redis late and do), so Redis may count
// permits the node does not know of: the key is rewritten by the next
// heartbeat, and every count goes back to zero. No request takes a spare
// Redis may not count.
func TestPrefetchRedisAwayMidCall(t *testing.T) {
	srv := startRedis(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	c := newClient(t, srv.Addr())
	ctx := context.Background()
	cfg := redisstore.Config{Timeout: 50 * time.Millisecond, Lease: 600 * time.Millisecond, ReleaseHold: 10 * time.Millisecond, BreakerThreshold: 100}
	a := newPrefetchNode(t, proxy.Addr(), "a", prefetchLimits{conns: 2, client: 2, route: 2}, cfg)

	proxy.SetDelay(100 * time.Millisecond) // a round trip of 200 ms: every call times out
	conn, err := a.conns.Acquire(ctx, "k")
	if err != nil {
		t.Fatalf("the cap under on_error open: %v", err)
	}
	if st := a.cs.Stats(); st.Fallbacks != 1 || st.Acquire.Errors != 1 {
		t.Fatalf("cap store: %+v", st)
	}
	if st := a.rs.Stats(); st.Prefetches != 1 || st.PrefetchGrants != 0 {
		t.Fatalf("route store: %+v", st)
	}
	proxy.SetDelay(0)
	// The request asks Redis: nothing is taken back that Redis may not count.
	rp, err := a.route.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if st := a.rs.Stats(); st.Reused != 0 || st.Acquire.Calls != 1 {
		t.Fatalf("route store after the failed prefetch: %+v", st)
	}
	rp.Release()
	conn.Release()
	waitFor(t, "every count back to zero (the heartbeat's rewrite)", 10*time.Second, allZero(t, c, "k"))
}

// A cap acquire decided without Redis (its own released permit taken
// back) sends no prefetch; neither does one for a key whose spare is
// still there.
func TestPrefetchOnlyWithACall(t *testing.T) {
	srv := startRedis(t)
	c := newClient(t, srv.Addr())
	ctx := context.Background()
	a := newPrefetchNode(t, srv.Addr(), "a", prefetchLimits{conns: 4, client: 4, route: 4}, redisstore.Config{ReleaseHold: time.Second, Lease: 30 * time.Second})
	p1, err := a.conns.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	p1.Release()
	p2, err := a.conns.Acquire(ctx, "k") // takes back p1's permit
	if err != nil {
		t.Fatal(err)
	}
	p3, err := a.conns.Acquire(ctx, "k") // a call; the spares are there
	if err != nil {
		t.Fatal(err)
	}
	if rt, sc := a.roundTrips(); rt != 2 || sc != 4 {
		t.Fatalf("%d round trips, %d scripts; want 2 and 4 (3 then 1)", rt, sc)
	}
	if st := a.rs.Stats(); st.Prefetches != 1 {
		t.Fatalf("route store: %+v", st)
	}
	p2.Release()
	p3.Release()
	waitFor(t, "every count back to zero", 10*time.Second, allZero(t, c, "k"))
}
