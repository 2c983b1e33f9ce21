package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/limit/redisstore"
	"github.com/seed-a07d1050/portcullis/rate"
)

func newRateStore(t *testing.T, addr string, policy redisstore.Policy) *redisstore.RateStore[string] {
	t.Helper()
	s, err := redisstore.NewRate(redisstore.RateConfig{Client: newClient(t, addr), Prefix: "many:", OnError: policy,
		Timeout: 200 * time.Millisecond, FlushInterval: time.Millisecond}, func(k string) string { return k })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// ReserveMany decides each key's weight all or nothing, shares the state
// with another node's RateStore, and CancelN gives a weight back through
// the flush.
func TestReserveMany(t *testing.T) {
	srv := startRedis(t)
	a, b := newRateStore(t, srv.Addr(), redisstore.Open), newRateStore(t, srv.Addr(), redisstore.Open)
	lim := rate.Limit{Rate: rate.PerMinute(6), Burst: 5, Delay: rate.NoDelay} // 6 at once, then one per 10 s
	ctx := context.Background()
	reqs := []redisstore.RateRequest[string]{{Key: "x", Limit: lim, N: 4}, {Key: "y", Limit: lim, N: 6}, {Key: "z", Limit: rate.Limit{Rate: rate.Unlimited}, N: 100}}
	if err := a.ReserveMany(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	if !reqs[0].OK || !reqs[1].OK || !reqs[2].OK {
		t.Fatalf("fresh keys: %+v", reqs)
	}
	if d := rate.DecisionFromStore(lim, 4, true, reqs[0].Ahead, false); d.Remaining() != 2 {
		t.Errorf("x after 4 of 6: remaining %d (ahead %v)", d.Remaining(), reqs[0].Ahead)
	}
	reqs = []redisstore.RateRequest[string]{{Key: "x", Limit: lim, N: 3}, {Key: "x2", Limit: lim, N: 7}}
	if err := b.ReserveMany(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	if reqs[0].OK || reqs[1].OK {
		t.Fatalf("the other node: 3 more of x (2 left), and 7 of a burst of 6, admitted: %+v", reqs)
	}
	reqs = []redisstore.RateRequest[string]{{Key: "x", Limit: lim, N: 2}}
	if err := b.ReserveMany(ctx, reqs); err != nil || !reqs[0].OK {
		t.Fatalf("the last 2 of x on the other node: %+v %v", reqs, err)
	}
	// Given back on a, seen by a once its flush has run. (b keeps its own
	// last view of x until that passes: a view that only ever refuses more
	// than Redis would, never admits more.)
	a.CancelN("x", lim, 3)
	deadline := time.Now().Add(5 * time.Second)
	for {
		reqs = []redisstore.RateRequest[string]{{Key: "x", Limit: lim, N: 3}}
		if err := a.ReserveMany(ctx, reqs); err != nil {
			t.Fatal(err)
		}
		if reqs[0].OK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("3 given back were never admitted again")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Redis away: Closed refuses every request with ErrUnavailable; Open
// decides on the node's share.
func TestReserveManyRedisAway(t *testing.T) {
	srv := startRedis(t)
	closed, open := newRateStore(t, srv.Addr(), redisstore.Closed), newRateStore(t, srv.Addr(), redisstore.Open)
	srv.Stop()
	lim := rate.Limit{Rate: rate.PerMinute(2), Burst: 1, Delay: rate.NoDelay}
	reqs := []redisstore.RateRequest[string]{{Key: "k", Limit: lim}}
	if err := closed.ReserveMany(context.Background(), reqs); !errors.Is(err, redisstore.ErrUnavailable) || reqs[0].OK {
		t.Fatalf("closed: %v %+v", err, reqs)
	}
	admitted := 0
	for range 4 {
		reqs := []redisstore.RateRequest[string]{{Key: "k", Limit: lim}}
		if err := open.ReserveMany(context.Background(), reqs); err != nil {
			t.Fatal(err)
		}
		if reqs[0].OK {
			admitted++
		}
	}
	if admitted != 2 {
		t.Fatalf("open: %d of 4 admitted, want 2", admitted)
	}
}
