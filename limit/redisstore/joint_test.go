package redisstore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-a07d1050/portcullis/internal/redistest"
	"github.com/seed-a07d1050/portcullis/limit/redisstore"
)

// trips counts a client's round trips that run scripts (the Stores' other
// calls, such as subscribing, are not counted): single commands and
// pipelines, and the scripts those pipelines carried.
type trips struct{ cmds, pipes, scripts atomic.Int64 }

func isScript(cmd redis.Cmder) bool { return cmd.Name() == "evalsha" || cmd.Name() == "eval" }

func (h *trips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *trips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isScript(cmd) {
			h.cmds.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *trips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := int64(0)
		for _, c := range cmds {
			if isScript(c) {
				n++
			}
		}
		if n > 0 {
			h.pipes.Add(1)
			h.scripts.Add(n)
		}
		return next(ctx, cmds)
	}
}

// jointNode is one node's connection-cap store and route store on one
// client, as the daemon has them.
type jointNode struct {
	conns, route *redisstore.Store[string]
	trips        *trips
}

func newJointNode(t *testing.T, addr, id string, policy redisstore.Policy) jointNode {
	c := newClient(t, addr)
	h := &trips{}
	c.AddHook(h)
	mk := func(prefix string) *redisstore.Store[string] {
		st, err := redisstore.New[string](redisstore.Config{Client: c, NodeID: id, Prefix: prefix, Logger: quiet, Timeout: 200 * time.Millisecond, OnError: policy}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	return jointNode{conns: mk(testPrefix + "conns:"), route: mk(testPrefix + "route:"), trips: h}
}

// AcquireJointly takes a connection cap and a route limit in one round
// trip, all or none: a part refused releases the part granted, the counts
// in Redis stay exact and go back to zero.
func TestAcquireJointlyOneRoundTripAllOrNone(t *testing.T) {
	srv := startRedis(t)
	a, b := newJointNode(t, srv.Addr(), "a", redisstore.Open), newJointNode(t, srv.Addr(), "b", redisstore.Open)
	ctx := context.Background()
	c := newClient(t, srv.Addr())
	hash := func(prefix, key string) map[string]string {
		h, err := c.HGetAll(ctx, testPrefix+prefix+"{"+key+"}").Result()
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	// Scripts loaded, as the daemon's start does (Probe), so that the
	// first pipeline is not answered NOSCRIPT and sent again.
	if err := redisstore.Probe(ctx, c); err != nil {
		t.Fatal(err)
	}
	// A connection cap of 2 and a route limit of 1 for client k.
	ok, err := redisstore.AcquireJointly(ctx, a.conns.Part("k", 2, 0), a.route.Part("k", 1, 0))
	if !ok || err != nil {
		t.Fatalf("a: %v %v", ok, err)
	}
	if p, n := a.trips.pipes.Load(), a.trips.cmds.Load(); p != 1 || n != 0 {
		t.Fatalf("a made %d pipelines and %d single calls; want 1 and 0", p, n)
	}
	if h := hash("conns:", "k"); h["c:a"] != "1" {
		t.Fatalf("conns hash %v", h)
	}
	if h := hash("route:", "k"); h["c:a"] != "1" {
		t.Fatalf("route hash %v", h)
	}
	// b's connection fits the cap but its route is full: neither is kept.
	conn, route := b.conns.Part("k", 2, 0), b.route.Part("k", 1, 0)
	ok, err = redisstore.AcquireJointly(ctx, conn, route)
	if ok || err != nil {
		t.Fatalf("b over the route limit: %v %v", ok, err)
	}
	if ok, _ := conn.Result(); !ok {
		t.Fatal("b's connection cap refused; want it granted, then given back")
	}
	if ok, _ := route.Result(); ok {
		t.Fatal("b's route granted past its limit of 1")
	}
	if p := b.trips.pipes.Load(); p != 1 {
		t.Fatalf("b made %d pipelines; want 1", p)
	}
	if st := b.conns.Stats(); st.Held != 0 {
		t.Fatalf("b still holds %d connection permits", st.Held)
	}
	waitFor(t, "b's connection permit given back in Redis", time.Second, func() bool { return hash("conns:", "k")["c:b"] == "0" || hash("conns:", "k")["c:b"] == "" })
	// A part decided without Redis (a's own unsent release taken back)
	// costs nothing; the other still goes in one pipeline.
	a.route.Release("k")
	before := a.trips.pipes.Load()
	ok, err = redisstore.AcquireJointly(ctx, a.conns.Part("k", 2, 1), a.route.Part("k", 1, 0))
	if !ok || err != nil {
		t.Fatalf("a again: %v %v", ok, err)
	}
	if st := a.route.Stats(); st.Reused != 1 {
		t.Fatalf("the route permit was not taken back: %+v", st)
	}
	if p := a.trips.pipes.Load() - before; p != 1 {
		t.Fatalf("%d pipelines for the connection cap alone; want 1", p)
	}
	for range 2 {
		a.conns.Release("k")
	}
	a.route.Release("k")
	waitFor(t, "counts back to zero", 2*time.Second, func() bool {
		return hash("conns:", "k")["c:a"] == "" && hash("route:", "k")["c:a"] == ""
	})
}

// With Redis away and on_error closed, AcquireJointly refuses both parts
// with ErrUnavailable and holds nothing; once Redis is back it grants
// both, in one pipeline.
func TestAcquireJointlyRedisAway(t *testing.T) {
	srv := startRedis(t)
	n := newJointNode(t, srv.Addr(), "a", redisstore.Closed)
	ctx := context.Background()
	srv.Stop()
	conn, route := n.conns.Part("k", 2, 0), n.route.Part("k", 1, 0)
	ok, err := redisstore.AcquireJointly(ctx, conn, route)
	if ok || !errors.Is(err, redisstore.ErrUnavailable) {
		t.Fatalf("with Redis away: %v %v; want a refusal wrapping ErrUnavailable", ok, err)
	}
	for _, p := range []redisstore.JointPart{conn, route} {
		if ok, err := p.Result(); ok || !errors.Is(err, redisstore.ErrUnavailable) {
			t.Fatalf("part: %v %v", ok, err)
		}
	}
	if h1, h2 := n.conns.Stats().Held, n.route.Stats().Held; h1 != 0 || h2 != 0 {
		t.Fatalf("held %d connection and %d route permits after a refusal", h1, h2)
	}
	srv.Restart()
	waitFor(t, "both granted once Redis is back", 5*time.Second, func() bool {
		ok, _ := redisstore.AcquireJointly(ctx, n.conns.Part("k", 2, 0), n.route.Part("k", 1, 0))
		return ok
	})
	n.conns.Release("k")
	n.route.Release("k")
	c := newClient(t, srv.Addr())
	waitFor(t, "counts back to zero", 2*time.Second, func() bool {
		n, err := c.Exists(ctx, testPrefix+"conns:{k}", testPrefix+"route:{k}").Result()
		return err == nil && n == 0
	})
}

// A pipeline that times out is Redis failing, not the caller giving up:
// each part follows its Store's on_error (open: granted on the node cap),
// and the counts go back to zero once Redis answers in time again.
func TestAcquireJointlyTimeoutFollowsOnError(t *testing.T) {
	srv := startRedis(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	n := newJointNode(t, proxy.Addr(), "a", redisstore.Open)
	ctx := context.Background()
	proxy.SetDelay(300 * time.Millisecond) // beyond the 200 ms timeout
	conn, route := n.conns.Part("k", 2, 0), n.route.Part("k", 1, 0)
	ok, err := redisstore.AcquireJointly(ctx, conn, route)
	if !ok || err != nil {
		t.Fatalf("a timed out pipeline under on_error open: %v %v; want both granted on the node cap", ok, err)
	}
	if st := n.conns.Stats(); st.Fallbacks != 1 || st.Acquire.Errors != 1 {
		t.Fatalf("conns store: %+v", st)
	}
	n.conns.Release("k")
	n.route.Release("k")
	proxy.SetDelay(0)
	c := newClient(t, srv.Addr())
	waitFor(t, "counts back to zero", 10*time.Second, func() bool {
		n, err := c.Exists(ctx, testPrefix+"conns:{k}", testPrefix+"route:{k}").Result()
		if err != nil || n == 0 {
			return err == nil
		}
		for _, key := range []string{testPrefix + "conns:{k}", testPrefix + "route:{k}"} {
			if v, _ := c.HGet(ctx, key, "c:a").Int(); v != 0 {
				return false
			}
		}
		return true
	})
}
