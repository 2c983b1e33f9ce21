package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/redistest"
	"github.com/seed-a07d1050/portcullis/limit/limittest"
	"github.com/seed-a07d1050/portcullis/limit/redisstore"
	"github.com/seed-a07d1050/portcullis/rate"
)

// Three nodes with leases share one burst exactly: offered three times the
// burst in turn, they admit Burst+1 and not one more, mostly from leased
// tokens, and a node without a lease then finds nothing left.
func TestRateLeaseBurstExactAcrossNodes(t *testing.T) {
	srv := redistest.Start(t)
	lim := rate.Limit{Rate: rate.PerMinute(1), Burst: 29, Delay: rate.NoDelay}
	cfg := redisstore.RateConfig{Prefix: "lease:", LeaseTokens: 8}
	nodes := []rateNode{newRateNode(t, srv.Addr(), cfg, lim), newRateNode(t, srv.Addr(), cfg, lim), newRateNode(t, srv.Addr(), cfg, lim)}
	admitted := 0
	for i := range 90 {
		if reserveOK(t, nodes[i%3], "k") {
			admitted++
		}
	}
	if admitted != 30 {
		t.Fatalf("three nodes with leases admitted %d of one burst of 30", admitted)
	}
	var calls, leased, taken uint64
	for _, n := range nodes {
		st := n.st.Stats()
		calls += st.Reserve.Calls
		leased += st.Leased
		taken += st.LeaseTaken
	}
	if leased != taken || leased < 15 {
		t.Fatalf("leases took %d tokens and admitted %d; want every token taken used, at least 15", taken, leased)
	}
	// Every admission not from a lease was a call's; some calls were
	// refusals (a node's cached state was older than another's lease).
	if calls+leased < 30 || calls > 15 {
		t.Fatalf("%d calls and %d leased admissions for 30 admitted; want at most 15 calls", calls, leased)
	}
	exact := newRateNode(t, srv.Addr(), redisstore.RateConfig{Prefix: "lease:"}, lim)
	if reserveOK(t, exact, "k") {
		t.Fatal("a node without a lease was admitted past the burst")
	}
	t.Logf("30 admitted with %d reserve calls (%d from leases)", calls, leased)
}

// A leased token expires when its slot in Redis's schedule starts (by the
// node's clock, here a fake one moved ahead), never later: a node that took
// a batch and waited admits only the tokens whose slot is still ahead,
// and the tokens a node holds cost the other nodes exactly those tokens
// (what a dead node's lease costs), no more.
func TestRateLeaseTokensExpireAtTheirSlot(t *testing.T) {
	srv := redistest.Start(t)
	lim := rate.Limit{Rate: rate.PerMinute(1), Burst: 9, Delay: rate.NoDelay}
	clock := limittest.NewClock()
	a := newRateNode(t, srv.Addr(), redisstore.RateConfig{Prefix: "slot:", LeaseTokens: 4, Clock: clock}, lim)
	b := newRateNode(t, srv.Addr(), redisstore.RateConfig{Prefix: "slot:"}, lim)
	// The first request is not busy yet: its own token only. The second
	// is: its own (slot 1-2 min ahead) and 3 more (2-5 min ahead).
	for i := range 2 {
		if !reserveOK(t, a, "k") {
			t.Fatalf("request %d refused", i+1)
		}
	}
	if st := a.st.Stats(); st.LeaseTaken != 3 || st.Reserve.Calls != 2 {
		t.Fatalf("after two requests: %d tokens leased in %d calls; want 3 in 2", st.LeaseTaken, st.Reserve.Calls)
	}
	// The other node gets what is left of the burst of 10: 5.
	got := 0
	for range 10 {
		if reserveOK(t, b, "k") {
			got++
		}
	}
	if got != 5 {
		t.Fatalf("the other node got %d; want the 5 neither admitted nor leased", got)
	}
	// Two and a half minutes on (by a's clock) the token whose slot starts
	// two minutes ahead has expired; the two starting at 3 and 4 remain.
	clock.Advance(150 * time.Second)
	for i := range 2 {
		if !reserveOK(t, a, "k") {
			t.Fatalf("leased request %d refused", i+1)
		}
	}
	if reserveOK(t, a, "k") {
		t.Fatal("admitted a token whose slot had started")
	}
	if st := a.st.Stats(); st.Leased != 2 {
		t.Fatalf("%d admitted from the lease; want 2", st.Leased)
	}
}

// A steady client well under its rate costs a fraction of a round trip
// per request, every request admitted, and the cluster rate stays exact
// when two nodes share a key flooded beyond it.
func TestRateLeaseSteadyClientAndFlood(t *testing.T) {
	srv := redistest.Start(t)
	t.Run("steady", func(t *testing.T) {
		lim := rate.Limit{Rate: rate.PerSecond(200), Burst: 99, Delay: rate.NoDelay}
		n := newRateNode(t, srv.Addr(), redisstore.RateConfig{Prefix: "steady:", LeaseTokens: 32}, lim)
		const offered = 150
		for i := range offered {
			if !reserveOK(t, n, "k") {
				t.Fatalf("request %d of a client at half its rate refused", i+1)
			}
			time.Sleep(10 * time.Millisecond) // 100 a second, the rate's half (slower if the machine is busy)
		}
		st := n.st.Stats()
		if st.Reserve.Calls+st.Leased != offered {
			t.Fatalf("%d calls and %d leased for %d admitted", st.Reserve.Calls, st.Leased, offered)
		}
		// At half the rate a batch of 32 serves about 16; a machine that
		// sleeps twice as long still gets about 8 (a quarter of the rate).
		if st.Reserve.Calls*4 > offered {
			t.Fatalf("%d round trips for %d requests; want at most a quarter", st.Reserve.Calls, offered)
		}
		t.Logf("%d requests, %d round trips: %.3f per request", offered, st.Reserve.Calls, float64(st.Reserve.Calls)/offered)
	})
	t.Run("flood", func(t *testing.T) {
		lim := rate.Limit{Rate: rate.PerSecond(100), Burst: 19, Delay: rate.NoDelay}
		cfg := redisstore.RateConfig{Prefix: "flood:", LeaseTokens: 8}
		nodes := []rateNode{newRateNode(t, srv.Addr(), cfg, lim), newRateNode(t, srv.Addr(), cfg, lim)}
		got, offers := offerLoad(nodes, 2*time.Second, func(n rateNode) bool {
			r, err := n.l.Reserve(context.Background(), "k")
			if err != nil && !errors.Is(err, rate.ErrLimited) {
				t.Errorf("Reserve: %v", err)
			}
			return err == nil && r.Allowed()
		})
		checkHeldRate(t, got, offers, lim, len(nodes), 0)
		t.Logf("admitted %d of %d offered; leased %d", got, len(offers.asked), nodes[0].st.Stats().Leased+nodes[1].st.Stats().Leased)
	})
}

// With nginx's delay=N a leased token never makes a request wait that
// one asked for then would not: the lease reaches only into the
// undelayed part of the burst, and with delay=0 there is none.
func TestRateLeaseKeepsToTheUndelayedPart(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		delay, leased int
	}{{0, 0}, {3, 2}} {
		lim := rate.Limit{Rate: rate.PerMinute(1), Burst: 9, Delay: tc.delay}
		n := newRateNode(t, srv.Addr(), redisstore.RateConfig{Prefix: "delay:" + string(rune('0'+tc.delay)) + ":", LeaseTokens: 8}, lim)
		for i := range 4 {
			r, err := n.l.Reserve(context.Background(), "k")
			if err != nil || r.Verdict != rate.Admitted {
				t.Fatalf("delay=%d: request %d: %v %v", tc.delay, i+1, r.Verdict, err)
			}
			if tc.delay == 0 {
				break // the second would wait its turn, lease or not
			}
		}
		if st := n.st.Stats(); st.LeaseTaken != uint64(tc.leased) {
			t.Fatalf("delay=%d: %d tokens leased; want %d", tc.delay, st.LeaseTaken, tc.leased)
		}
	}
}
