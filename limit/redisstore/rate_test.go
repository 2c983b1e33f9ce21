package redisstore_test

import (
	"context"
	"errors"
	"math"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/doctest"
	"github.com/seed-a07d1050/portcullis/internal/redistest"
	"github.com/seed-a07d1050/portcullis/limit/limittest"
	"github.com/seed-a07d1050/portcullis/limit/redisstore"
	"github.com/seed-a07d1050/portcullis/rate"
)

func TestRateConfigFieldsDocumentZero(t *testing.T) {
	doctest.ZeroValuesDocumented(t, "rateconfig.go", reflect.TypeFor[redisstore.RateConfig]())
}

func TestRateConfigErrors(t *testing.T) {
	c := newClient(t, "127.0.0.1:1")
	for name, cfg := range map[string]redisstore.RateConfig{
		"no client":   {},
		"timeout":     {Client: c, Timeout: -1},
		"on error":    {Client: c, OnError: 7},
		"node share":  {Client: c, NodeShare: 1.5},
		"local share": {Client: c, LocalShare: -0.1},
		"lease":       {Client: c, LeaseTokens: -1},
		"flush":       {Client: c, FlushInterval: -time.Second},
		"breaker":     {Client: c, BreakerThreshold: -1},
		"backoff":     {Client: c, BreakerBackoff: -1},
	} {
		if st, err := redisstore.NewRate[string](cfg, nil); err == nil {
			st.Close()
			t.Errorf("%s: NewRate succeeded", name)
		}
	}
}

// rateNode is one cluster member: a rate limiter deciding through its own
// RateStore.
type rateNode struct {
	l  *rate.Limiter[string]
	st *redisstore.RateStore[string]
}

func newRateNode(t testing.TB, addr string, cfg redisstore.RateConfig, lim rate.Limit) rateNode {
	t.Helper()
	if cfg.Client == nil {
		cfg.Client = newClient(t, addr)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "tr:"
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 200 * time.Millisecond
	}
	st, err := redisstore.NewRate[string](cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := rate.New(rate.Config[string]{Rate: lim.Rate, Burst: lim.Burst, Delay: lim.Delay, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.Close()
		st.Close()
	})
	return rateNode{l, st}
}

func reserveOK(t testing.TB, n rateNode, key string) bool {
	t.Helper()
	_, err := n.l.Reserve(context.Background(), key)
	if err != nil && !errors.Is(err, rate.ErrLimited) {
		t.Fatalf("Reserve: %v", err)
	}
	return err == nil
}

// Two nodes share one burst exactly: together they admit Burst+1 at once,
// and then neither admits more.
func TestRateStoreSharesBurstExactly(t *testing.T) {
	srv := redistest.Start(t)
	lim := rate.Limit{Rate: rate.PerMinute(1), Burst: 9, Delay: rate.NoDelay}
	a, b := newRateNode(t, srv.Addr(), redisstore.RateConfig{}, lim), newRateNode(t, srv.Addr(), redisstore.RateConfig{}, lim)
	admitted := 0
	for i := range 20 {
		n := a
		if i%2 == 1 {
			n = b
		}
		if reserveOK(t, n, "k") {
			admitted++
		}
	}
	if admitted != 10 {
		t.Fatalf("two nodes admitted %d of one burst of 10", admitted)
	}
	// Each further request is refused from the TAT Redis last returned,
	// with no round trip.
	calls := a.st.Stats().Reserve.Calls + b.st.Stats().Reserve.Calls
	for range 10 {
		if reserveOK(t, a, "k") || reserveOK(t, b, "k") {
			t.Fatal("admitted past the burst")
		}
	}
	if got := a.st.Stats().Reserve.Calls + b.st.Stats().Reserve.Calls; got != calls {
		t.Fatalf("refusals cost %d round trips; want none", got-calls)
	}
	if c := a.st.Stats().Cached + b.st.Stats().Cached; c < 20 {
		t.Fatalf("only %d refusals from the cache", c)
	}
}

// offerLoad offers the key from both nodes, three goroutines each, for d,
// through decide, and returns how many requests were admitted and when each
// was offered, since the start. The machine may stall the offering
// goroutines (other work shares its cores): what a rate admits depends on
// when requests came, so tests compare with gcraAdmits over these times
// rather than with the rate times d.
func offerLoad(nodes []rateNode, d time.Duration, decide func(n rateNode) bool) (admitted int64, offers offered) {
	var ok atomic.Int64
	var mu sync.Mutex
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for _, n := range nodes {
		for range 3 {
			wg.Go(func() {
				var asked, decided []time.Duration
				for now := time.Now(); now.Before(deadline); now = time.Now() {
					asked = append(asked, now.Sub(start))
					if decide(n) {
						ok.Add(1)
					}
					decided = append(decided, time.Since(start))
					time.Sleep(200 * time.Microsecond)
				}
				mu.Lock()
				offers.asked = append(offers.asked, asked...)
				offers.decided = append(offers.decided, decided...)
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	slices.Sort(offers.asked)
	slices.Sort(offers.decided)
	return ok.Load(), offers
}

// offered are the times of a load's requests, from its start: when each
// was asked for, and when its decision had come. A decision was made
// between the two; on a loaded machine the gap grows, and a limiter that
// decides late has had more time to refill than the time asked says.
type offered struct {
	asked, decided []time.Duration
}

// reference returns how many of the requests offered one limiter of lim
// admits at the earliest (deciding each when it was asked) and at the
// latest (deciding each when its decision had come).
func (o offered) reference(t *testing.T, lim rate.Limit) (least, most float64) {
	return float64(gcraAdmits(t, lim, o.asked)), float64(gcraAdmits(t, lim, o.decided))
}

// gcraAdmits is the reference: how many of the requests offered at the
// given times (sorted) one limiter of lim admits on a clock that follows
// them exactly.
func gcraAdmits(t *testing.T, lim rate.Limit, offers []time.Duration) int64 {
	clock := limittest.NewClock()
	ref, err := rate.New(rate.Config[string]{Rate: lim.Rate, Burst: lim.Burst, Delay: lim.Delay, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	var at time.Duration
	var n int64
	for _, o := range offers {
		clock.Advance(o - at)
		at = o
		if ref.Allow("k").Allowed() {
			n++
		}
	}
	return n
}

// checkHeldRate fails the test unless got is within 5 % of what the
// reference admits over the same offers, and within the fast path's bound
// above it: N·L more for N nodes, L = floor(share × (Burst+1)), plus one
// interval at each end of the measured window.
func checkHeldRate(t *testing.T, got int64, offers offered, lim rate.Limit, nodes int, share float64) {
	t.Helper()
	least, most := offers.reference(t, lim)
	if float64(got) < 0.95*least || float64(got) > 1.05*most {
		t.Fatalf("admitted %d of %d offered on %d nodes; one limiter admits %v to %v of the same offers; want ± 5%%", got, len(offers.asked), nodes, least, most)
	}
	if bound := most + float64(nodes)*math.Floor(share*float64(lim.Burst+1)) + 2; float64(got) > bound {
		t.Fatalf("admitted %d, above the bound %v", got, bound)
	}
}

// Two nodes on one Redis hold one rate for a key within 5 %, exact
// (LocalShare 0, Reserve) and with the fast path (LocalShare 0.2, where
// the bound allows 2 × 2 more).
func TestRateStoreTwoNodesHoldOneRate(t *testing.T) {
	srv := redistest.Start(t)
	lim := rate.Limit{Rate: rate.PerSecond(100), Burst: 9, Delay: rate.NoDelay}
	const d = 3 * time.Second
	for _, tc := range []struct {
		name  string
		share float64
	}{{"exact", 0}, {"fast path", 0.2}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := redisstore.RateConfig{LocalShare: tc.share, Prefix: "two:" + tc.name + ":"}
			nodes := []rateNode{newRateNode(t, srv.Addr(), cfg, lim), newRateNode(t, srv.Addr(), cfg, lim)}
			// Reserve, so that every decision the cache does not refuse goes to Redis.
			got, offers := offerLoad(nodes, d, func(n rateNode) bool {
				r, err := n.l.Reserve(context.Background(), "k")
				return err == nil && r.Allowed()
			})
			if want := 2 * (float64(lim.Burst+1) + 100*d.Seconds()); float64(len(offers.asked)) < want {
				t.Fatalf("offered only %d requests; the test needs at least twice the rate", len(offers.asked))
			}
			checkHeldRate(t, got, offers, lim, len(nodes), tc.share)
			calls := nodes[0].st.Stats().Reserve.Calls + nodes[1].st.Stats().Reserve.Calls
			t.Logf("admitted %d of %d offered; %d reserve round trips, %.3f per request",
				got, len(offers.asked), calls, float64(calls)/float64(len(offers.asked)))
		})
	}
}

// Allow (TryReserve) never blocks on Redis; with the flushes it still
// holds the rate within 5 % on two nodes.
func TestRateStoreTryReserveHoldsRate(t *testing.T) {
	srv := redistest.Start(t)
	lim := rate.Limit{Rate: rate.PerSecond(100), Burst: 9, Delay: rate.NoDelay}
	nodes := []rateNode{newRateNode(t, srv.Addr(), redisstore.RateConfig{Prefix: "try:"}, lim), newRateNode(t, srv.Addr(), redisstore.RateConfig{Prefix: "try:"}, lim)}
	ok, offers := offerLoad(nodes, 3*time.Second, func(n rateNode) bool { return n.l.Allow("k").Allowed() })
	if least, most := offers.reference(t, lim); float64(ok) < 0.95*least || float64(ok) > 1.05*most {
		t.Fatalf("admitted %d of %d; one limiter admits %v to %v of the same offers; want ± 5%%", ok, len(offers.asked), least, most)
	}
	if c := nodes[0].st.Stats().Reserve.Calls + nodes[1].st.Stats().Reserve.Calls; c != 0 {
		t.Fatalf("Allow made %d round trips on the request path", c)
	}
}

// A delayed request cancelled on one node gives its place back
// cluster-wide.
func TestRateStoreCancelReachesRedis(t *testing.T) {
	srv := redistest.Start(t)
	lim := rate.Limit{Rate: rate.PerMinute(1), Burst: 2}
	a, b := newRateNode(t, srv.Addr(), redisstore.RateConfig{Prefix: "cancel:"}, lim), newRateNode(t, srv.Addr(), redisstore.RateConfig{Prefix: "cancel:"}, lim)
	if !reserveOK(t, a, "k") {
		t.Fatal("first refused")
	}
	r, err := a.l.Reserve(context.Background(), "k")
	if err != nil || r.Verdict != rate.Delayed {
		t.Fatalf("second: %v %v", r.Verdict, err)
	}
	if !r.Cancel() {
		t.Fatal("Cancel gave nothing back")
	}
	waitFor(t, "the cancellation flushed", 5*time.Second, func() bool { return a.st.Stats().Flush.Calls > 0 })
	// The burst has two places left cluster-wide: b takes both.
	got := 0
	for range 3 {
		if reserveOK(t, b, "k") {
			got++
		}
	}
	if got != 2 {
		t.Fatalf("the other node got %d places; want the 2 left, the cancelled one included", got)
	}
}

// When Redis goes away, Open decides on the node-local share and Closed
// refuses with ErrStore; when it comes back, decisions go to Redis again.
func TestRateStoreRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	lim := rate.Limit{Rate: rate.PerMinute(1), Burst: 9, Delay: rate.NoDelay}
	open := newRateNode(t, srv.Addr(), redisstore.RateConfig{Prefix: "down:", NodeShare: 0.5, Timeout: 50 * time.Millisecond}, lim)
	closed := newRateNode(t, srv.Addr(), redisstore.RateConfig{Prefix: "down:", OnError: redisstore.Closed, Timeout: 50 * time.Millisecond}, lim)
	srv.Stop()
	admitted := 0
	for range 10 {
		if reserveOK(t, open, "k") {
			admitted++
		}
	}
	if admitted != 5 {
		t.Fatalf("Open with NodeShare 0.5 admitted %d of a burst of 10 alone; want 5", admitted)
	}
	if _, err := closed.l.Reserve(context.Background(), "k"); !errors.Is(err, rate.ErrStore) || !errors.Is(err, redisstore.ErrUnavailable) {
		t.Fatalf("Closed: %v, want ErrStore wrapping ErrUnavailable", err)
	}
	if st := closed.l.Totals(); st.StoreFailed != 1 {
		t.Fatalf("totals %+v", st)
	}
	srv.Restart()
	// Once the breaker lets a probe through, the node's fallback admissions
	// reach Redis, which then holds 4 of the 10: the 5 the node admitted
	// alone, less the newest, which the fallback's charge takes as paid
	// (see RateStore: at most one request per node beyond the exact rate,
	// once after an outage).
	waitFor(t, "the fallback admissions flushed", 10*time.Second, func() bool {
		return open.st.Stats().Breaker == redisstore.BreakerClosed && open.st.Stats().Flush.Calls > open.st.Stats().Flush.Errors
	})
	b := newRateNode(t, srv.Addr(), redisstore.RateConfig{Prefix: "down:"}, lim)
	got := 0
	for range 10 {
		if reserveOK(t, b, "k") {
			got++
		}
	}
	if got != 6 {
		t.Fatalf("after Redis came back another node got %d; want the 6 the first did not charge", got)
	}
}
