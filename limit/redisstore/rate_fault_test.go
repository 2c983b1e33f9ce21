package redisstore_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/redistest"
	"github.com/seed-a07d1050/portcullis/limit/redisstore"
	"github.com/seed-a07d1050/portcullis/rate"
)

// The local fast path holds its stated bound while the round trip is slow:
// three nodes with local_share 0.5 over a burst of 10 (L = 5 each), Redis
// behind a proxy adding 20 ms each way, admit at most (Burst+1) + N·L = 25
// of a burst sent by 8 goroutines per node, however many arrive while a
// call is in flight. (Before the fix, a node forgot what it had sent while
// the call was in flight and admitted L more locally on every round trip:
// 125 of the 240 offered here in one run.) The rate is 1 a minute, so nothing
// refills during the test.
func TestRateLocalShareBoundUnderSlowRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	px := redistest.NewProxy(t, srv.Addr())
	px.SetDelay(20 * time.Millisecond)
	lim := rate.Limit{Rate: rate.PerMinute(1), Burst: 9, Delay: rate.NoDelay}
	const nodes, share, perNode, workers = 3, 0.5, 80, 8
	var stores []*redisstore.RateStore[string]
	for range nodes {
		st, err := redisstore.NewRate[string](redisstore.RateConfig{
			Client: newClient(t, px.Addr()), Prefix: "slowrt:", LocalShare: share,
			Timeout: 2 * time.Second, Logger: quiet,
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		stores = append(stores, st)
	}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for _, st := range stores {
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range perNode / workers {
					ok, _, err := st.Reserve(context.Background(), "k", lim)
					if err != nil {
						t.Errorf("Reserve: %v", err)
						return
					}
					if ok {
						admitted.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	local := int(float64(lim.Burst+1) * share)
	bound := int64(lim.Burst + 1 + nodes*local)
	t.Logf("admitted %d of %d offered; bound (Burst+1) + N·L = %d", admitted.Load(), nodes*perNode, bound)
	if admitted.Load() > bound {
		t.Fatalf("%d nodes admitted %d of one burst; the local_share bound is %d", nodes, admitted.Load(), bound)
	}
	if admitted.Load() < int64(lim.Burst+1) {
		t.Fatalf("admitted %d, fewer than the burst of %d", admitted.Load(), lim.Burst+1)
	}
}

// A client that keeps to its rate through a Redis outage is not refused
// after it. Three nodes with node_share 0.34 share a rate of 20/s (burst
// 2); the client sends one request every 50 ms, round robin over the
// nodes, for 0.4 s, then Redis is cut off (the proxy refuses dials) for
// 1.5 s, then back for 1.2 s. During the outage each node admits on its own
// third of the rate; after it, the admissions the nodes made alone must not
// be charged as a debt that outlasts the outage. (Before the fix, the 30 or
// so admissions of the outage were sent as 30 intervals past Redis's now,
// and the client was refused for about as long as the outage had lasted.)
func TestRateOutageDebtCreditsElapsedTime(t *testing.T) {
	testRateOutageDebt(t, "debt:", func(st *redisstore.RateStore[string], key string, lim rate.Limit) (bool, time.Duration, error) {
		return st.Reserve(context.Background(), key, lim)
	}, 1)
}

// The same through ReserveMany, whose fallback (fallbackN) charges by the
// node-local lead too. (Before, it sent each admission of the outage as
// one interval: 24 of 24 refused after the outage in one run.)
func TestRateOutageDebtCreditsElapsedTimeReserveMany(t *testing.T) {
	testRateOutageDebt(t, "debtmany:", reserveOne, 1)
}

// The same with a weight of 2 every two intervals through ReserveMany.
// A node leaves uncharged one interval of its newest decision, whatever
// its weight (so the overshoot after an outage stays one request per
// node); the rest of that weight is a debt the client at its rate has
// repaid by its next request: a weighted client is not refused.
func TestRateOutageDebtCreditsElapsedTimeWeighted(t *testing.T) {
	testRateOutageDebt(t, "debtweighted:", func(st *redisstore.RateStore[string], key string, lim rate.Limit) (bool, time.Duration, error) {
		reqs := []redisstore.RateRequest[string]{{Key: key, Limit: lim, N: 2}}
		err := st.ReserveMany(context.Background(), reqs)
		return reqs[0].OK, reqs[0].Ahead, err
	}, 2)
}

// testRateOutageDebt is TestRateOutageDebtCreditsElapsedTime with reserve
// deciding each request of weight, sent every weight intervals.
func testRateOutageDebt(t *testing.T, prefix string, reserve func(*redisstore.RateStore[string], string, rate.Limit) (bool, time.Duration, error), weight int) {
	srv := redistest.Start(t)
	px := redistest.NewProxy(t, srv.Addr())
	lim := rate.Limit{Rate: rate.PerSecond(20), Burst: 2, Delay: rate.NoDelay}
	var stores []*redisstore.RateStore[string]
	for range 3 {
		st, err := redisstore.NewRate[string](redisstore.RateConfig{
			Client: newClient(t, px.Addr()), Prefix: prefix, NodeShare: 0.34,
			Timeout: 200 * time.Millisecond, BreakerBackoff: 100 * time.Millisecond, Logger: quiet,
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		stores = append(stores, st)
	}
	iv := lim.Rate.Interval() * time.Duration(weight)
	start := time.Now()
	i := 0
	// send offers requests at the client's rate until d after start and
	// returns how many of them were refused.
	send := func(until time.Duration) (sent, refused int) {
		for {
			at := start.Add(time.Duration(i) * iv)
			if at.Sub(start) >= until {
				return sent, refused
			}
			if late := time.Since(at); late > 0 {
				// The machine fell behind (-race, a loaded machine): keep the
				// client's spacing instead of catching up in a burst, which
				// a client at its rate does not send.
				start, at = start.Add(late), at.Add(late)
			}
			time.Sleep(time.Until(at))
			ok, wait, err := reserve(stores[i%len(stores)], "k", lim)
			// Redis decided the request at some moment between at and
			// now. A call that came back more than iv/4 late (a dial after
			// the outage, a script load, a stall under -race) moves the
			// schedule: the next request goes iv after this one came back.
			// So any two requests reach Redis at least their schedule's
			// distance less iv/4 apart, within the limit's tolerance (one
			// interval for weight 2 and Burst 2, two for weight 1): a
			// client at its rate as Redis sees it, whatever the latency.
			// (Without it, one slow first call, 75 ms for a dial and a
			// script load, refused the next request before the outage.)
			if late := time.Since(at); late > iv/4 {
				start = start.Add(late)
			}
			if !ok {
				t.Logf("refused at %v by node %d: wait %v %+v", time.Since(start), i%3, wait, stores[i%3].Stats())
			}
			if err != nil {
				t.Fatalf("Reserve: %v", err)
			}
			i++
			sent++
			if !ok {
				refused++
			}
		}
	}
	if _, refused := send(400 * time.Millisecond); refused > 0 {
		t.Fatalf("%d refused before the outage, at the client's rate", refused)
	}
	px.Down()
	sent, refused := send(1900 * time.Millisecond)
	t.Logf("outage: %d sent, %d refused by the nodes' shares %+v", sent, refused, stores[0].Stats())
	px.Up()
	sent, refused = send(3100 * time.Millisecond)
	t.Logf("after the outage: %d sent, %d refused", sent, refused)
	var fb uint64
	for _, st := range stores {
		fb += st.Stats().Fallbacks
	}
	if fb < 10 {
		t.Fatalf("only %d fallback admissions: the outage did not happen as planned", fb)
	}
	if refused > 0 {
		t.Fatalf("a client at its rate was refused %d of %d times after the outage", refused, sent)
	}
}

// reserveOne decides one request of key through ReserveMany.
func reserveOne(st *redisstore.RateStore[string], key string, lim rate.Limit) (bool, time.Duration, error) {
	reqs := []redisstore.RateRequest[string]{{Key: key, Limit: lim}}
	err := st.ReserveMany(context.Background(), reqs)
	return reqs[0].OK, reqs[0].Ahead, err
}

// TestRateLocalShareBoundUnderSlowRoundTrip with ReserveMany: a pipeline
// that carries the admissions the fast path made still counts them
// against the node's L while it is in flight. One node (L = 5 of a burst
// of 10, Redis 50 ms away each way) takes four rounds, each of 5 Reserves
// and then one ReserveMany, all within the first round trip; whatever the
// interleaving, the node may admit at most (Burst+1) + L = 15. (Before
// ReserveMany counted what it carried as in flight, each of its pipelines
// let the fast path admit L more: 21 here.)
func TestRateLocalShareBoundUnderSlowRoundTripReserveMany(t *testing.T) {
	srv := redistest.Start(t)
	px := redistest.NewProxy(t, srv.Addr())
	px.SetDelay(50 * time.Millisecond)
	lim := rate.Limit{Rate: rate.PerMinute(1), Burst: 9, Delay: rate.NoDelay}
	const share, rounds = 0.5, 4
	st, err := redisstore.NewRate[string](redisstore.RateConfig{
		Client: newClient(t, px.Addr()), Prefix: "slowrtmany:", LocalShare: share,
		Timeout: 2 * time.Second, Logger: quiet,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	local := int(float64(lim.Burst+1) * share)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	decide := func(f func() (bool, time.Duration, error)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, _, err := f()
			if err != nil {
				t.Errorf("decide: %v", err)
			}
			if ok {
				admitted.Add(1)
			}
		}()
	}
	for range rounds {
		for range local {
			decide(func() (bool, time.Duration, error) { return st.Reserve(context.Background(), "k", lim) })
		}
		time.Sleep(5 * time.Millisecond)
		decide(func() (bool, time.Duration, error) { return reserveOne(st, "k", lim) })
		time.Sleep(5 * time.Millisecond)
	}
	wg.Wait()
	bound := int64(lim.Burst + 1 + local)
	t.Logf("admitted %d of %d offered (%d without asking); bound (Burst+1) + L = %d", admitted.Load(), rounds*(local+1), st.Stats().Local, bound)
	if admitted.Load() > bound {
		t.Fatalf("one node admitted %d of one burst; the local_share bound is %d", admitted.Load(), bound)
	}
	if admitted.Load() < int64(lim.Burst+1) {
		t.Fatalf("admitted %d, fewer than the burst of %d", admitted.Load(), lim.Burst+1)
	}
}
