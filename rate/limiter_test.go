package rate_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/waitfor"
	"github.com/seed-a07d1050/portcullis/limit"
	"github.com/seed-a07d1050/portcullis/limit/limittest"
	"github.com/seed-a07d1050/portcullis/rate"
)

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []rate.Config[string]{
		{},
		{Rate: rate.PerSecond(1), Burst: -1},
		{Rate: rate.PerSecond(1), Delay: -5},
		{Rate: rate.Rate{Events: 0, Per: time.Second}},
	} {
		if l, err := rate.New(cfg); err == nil {
			l.Close()
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
}

func TestErrorsMatchLimitSentinels(t *testing.T) {
	if !errors.Is(rate.ErrLimited, limit.ErrLimited) || !errors.Is(rate.ErrStore, limit.ErrStore) {
		t.Fatal("rate sentinels do not match limit's")
	}
}

func TestOverridesPerKey(t *testing.T) {
	clock := limittest.NewClock()
	l, err := rate.New(rate.Config[string]{
		Rate: rate.PerSecond(1), Clock: clock,
		LimitFor: func(k string) (rate.Limit, bool) {
			switch k {
			case "batch":
				return rate.Limit{Rate: rate.PerSecond(100), Burst: 9, Delay: rate.NoDelay}, true
			case "health":
				return rate.Limit{Rate: rate.Unlimited}, true
			case "bad":
				return rate.Limit{Burst: -3}, true // invalid: the default applies
			}
			return rate.Limit{}, false
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	count := func(key string, n int) int {
		ok := 0
		for range n {
			if l.Allow(key).Verdict == rate.Admitted {
				ok++
			}
		}
		return ok
	}
	for key, want := range map[string]int{"alice": 1, "batch": 10, "health": 1000, "bad": 1} {
		if got := count(key, 1000); got != want {
			t.Errorf("%s: %d admitted at once, want %d", key, got, want)
		}
	}
	if d := l.Allow("health"); d.Remaining() != -1 || l.KeyLimit("health").Rate != rate.Unlimited {
		t.Errorf("unlimited key decision %+v", d)
	}
	if n := l.Totals().Keys; n != 3 { // alice, batch, bad; never the unlimited key
		t.Errorf("busy keys %d, want 3", n)
	}
}

// The decision carries the real state: remaining count, reset and retry.
func TestDecisionState(t *testing.T) {
	l, clock := newFakeLimiter(t, rate.Limit{Rate: rate.PerSecond(10), Burst: 4, Delay: rate.NoDelay}, false)
	for i := range 5 {
		d := l.Allow("k")
		if d.Verdict != rate.Admitted || d.Remaining() != 4-i || d.Reset != time.Duration(i+1)*100*time.Millisecond {
			t.Fatalf("request %d: %+v", i, d)
		}
	}
	d := l.Allow("k")
	if d.Verdict != rate.Refused || d.RetryAfter != 100*time.Millisecond || d.Remaining() != 0 || d.Reset != 500*time.Millisecond {
		t.Fatalf("refusal %+v", d)
	}
	clock.Advance(30 * time.Millisecond)
	if d := l.Allow("k"); d.RetryAfter != 70*time.Millisecond {
		t.Fatalf("retry after 30ms: %+v", d)
	}
	clock.Advance(70 * time.Millisecond)
	if d := l.Allow("k"); d.Verdict != rate.Admitted || d.Remaining() != 0 {
		t.Fatalf("after the retry time: %+v", d)
	}
}

// Keys back in a fresh state are forgotten: memory follows the keys busy
// within one burst window.
func TestForgetsFreshKeys(t *testing.T) {
	l, clock := newFakeLimiter(t, rate.Limit{Rate: rate.PerSecond(10), Burst: 9}, false)
	for i := range 5000 {
		l.Allow("client-" + strconv.Itoa(i))
	}
	if n := l.Totals().Keys; n != 5000 {
		t.Fatalf("busy keys %d", n)
	}
	clock.Advance(99 * time.Millisecond)
	if n := l.Sweep(); n != 0 {
		t.Fatalf("swept %d keys still busy", n)
	}
	clock.Advance(time.Millisecond) // each key's TAT is now+100ms after its first request
	if n := l.Sweep(); n != 5000 {
		t.Fatalf("swept %d, want 5000", n)
	}
	s := l.Snapshot(0)
	if s.Totals.Keys != 0 || len(s.Keys) != 0 {
		t.Fatalf("snapshot after sweep %+v", s.Totals)
	}
	// A forgotten key starts fresh.
	if d := l.Allow("client-7"); d.Verdict != rate.Admitted || d.Remaining() != 9 {
		t.Fatalf("forgotten key %+v", d)
	}
}

// The limiter sweeps by itself every second of its clock.
func TestSweepsByItself(t *testing.T) {
	l, clock := newFakeLimiter(t, rate.Limit{Rate: rate.PerSecond(10)}, false)
	for i := range 100 {
		l.Allow(strconv.Itoa(i))
	}
	waitfor.Cond(t, "the sweep's timer", func() bool { return clock.Timers() > 0 })
	clock.Advance(time.Second)
	l.Allow("late") // still busy after the sweep
	waitfor.Cond(t, "the idle keys swept", func() bool { return l.Totals().Keys == 1 })
}

func TestSnapshotOrdersByAhead(t *testing.T) {
	l, _ := newFakeLimiter(t, rate.Limit{Rate: rate.PerSecond(10), Burst: 9, Delay: rate.NoDelay}, false)
	for i, n := range []int{3, 10, 1} {
		for range n {
			l.Allow("k" + strconv.Itoa(i))
		}
	}
	s := l.Snapshot(2)
	if len(s.Keys) != 2 || s.Keys[0].Key != "k1" || s.Keys[0].Remaining != 0 || s.Keys[1].Key != "k0" || s.Keys[1].Remaining != 7 {
		t.Fatalf("snapshot %+v", s.Keys)
	}
	if s.Totals.Keys != 3 || s.Totals.Admitted != 14 {
		t.Fatalf("totals %+v", s.Totals)
	}
}

// Wait waits out the delay; a caller whose context ends while it waits
// gives its request back, so the next request is treated as if it had
// never come.
func TestWaitAndLeave(t *testing.T) {
	l, clock := newFakeLimiter(t, rate.Limit{Rate: rate.PerSecond(10), Burst: 5}, false)
	if d, err := l.Wait(context.Background(), "k"); err != nil || d.Verdict != rate.Admitted {
		t.Fatalf("first: %+v, %v", d, err)
	}
	done := make(chan error, 1)
	go func() {
		d, err := l.Wait(context.Background(), "k")
		if err == nil && d.Delay != 100*time.Millisecond {
			err = errors.New("unexpected delay " + d.Delay.String())
		}
		done <- err
	}()
	waitfor.Cond(t, "the sweep's timer and the wait's", func() bool { return clock.Timers() > 1 })
	clock.Advance(100 * time.Millisecond)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The state now: two requests counted at t=0, clock at 100ms: TAT 200ms.
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, err := l.Wait(ctx, "k")
		done <- err
	}()
	waitfor.Cond(t, "the sweep's timer and the wait's", func() bool { return clock.Timers() > 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait after cancel: %v", err)
	}
	if c := l.Totals().Cancelled; c != 1 {
		t.Fatalf("Cancelled %d", c)
	}
	if d := l.Allow("k"); d.Delay != 100*time.Millisecond {
		t.Fatalf("after the leaver, the next request waits %v, want 100ms (as if it had never come)", d.Delay)
	}
}

// Totals.Delaying counts the requests inside Wait's delay: up while they
// wait, down when their turn comes or their caller leaves.
func TestTotalsDelaying(t *testing.T) {
	l, clock := newFakeLimiter(t, rate.Limit{Rate: rate.PerSecond(10), Burst: 5}, false)
	if _, err := l.Wait(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	for _, c := range []context.Context{context.Background(), ctx} {
		go func() {
			_, err := l.Wait(c, "k")
			done <- err
		}()
	}
	waitfor.Cond(t, "two requests delaying", func() bool { return l.Totals().Delaying == 2 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the leaver's Wait: %v", err)
	}
	if d := l.Totals().Delaying; d != 1 {
		t.Fatalf("Delaying after one left: %d, want 1", d)
	}
	waitfor.Cond(t, "the sweep's timer and the wait's", func() bool { return clock.Timers() > 1 })
	clock.Advance(time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if tot := l.Totals(); tot.Delaying != 0 || tot.Delayed != 2 || tot.Cancelled != 1 {
		t.Fatalf("totals after both: %+v, want none delaying, 2 delayed, 1 cancelled", tot)
	}
}

// A request that proceeded at once, or whose delay has passed, gives
// nothing back.
func TestCancelAfterProceedingGivesNothing(t *testing.T) {
	l, clock := newFakeLimiter(t, rate.Limit{Rate: rate.PerSecond(10), Burst: 5}, false)
	r1, _ := l.Reserve(context.Background(), "k")
	r2, _ := l.Reserve(context.Background(), "k")
	if r1.Cancel() {
		t.Fatal("an admitted-at-once request was given back")
	}
	clock.Advance(100 * time.Millisecond)
	if r2.Cancel() {
		t.Fatal("a request whose delay ran out was given back")
	}
	if d := l.Allow("k"); d.Delay != 100*time.Millisecond {
		t.Fatalf("state changed: %+v", d)
	}
}

// Many goroutines on one key and on their own keys: no admission beyond
// the bound, and totals add up.
func TestConcurrentDecisions(t *testing.T) {
	clock := limittest.NewClock()
	l, err := rate.New(rate.Config[string]{Rate: rate.PerSecond(100), Burst: 49, Delay: rate.NoDelay, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var hot atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			own := "own-" + strconv.Itoa(g)
			for i := range 2000 {
				if l.Allow("hot").Allowed() {
					hot.Add(1)
				}
				l.Allow(own)
				if i%100 == 0 {
					clock.Advance(time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	// 8 × 20 advances of 1 ms = 160 ms: at most 50 + 16 admissions.
	if n := hot.Load(); n > 50+16 || n < 50 {
		t.Fatalf("hot key admitted %d", n)
	}
	tot := l.Totals()
	if tot.Admitted+tot.Refused != 8*2000*2 {
		t.Fatalf("totals %+v", tot)
	}
}

func TestObserverSeesDecisions(t *testing.T) {
	var mu sync.Mutex
	seen := map[rate.Verdict]int{}
	clock := limittest.NewClock()
	l, err := rate.New(rate.Config[string]{Rate: rate.PerSecond(1), Burst: 1, Clock: clock,
		Observer: rate.ObserverFunc[string](func(e rate.Event[string]) {
			mu.Lock()
			seen[e.Kind]++
			mu.Unlock()
		})})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Allow("k")
	r, _ := l.Reserve(context.Background(), "k")
	r.Cancel()
	l.Allow("k")
	l.Allow("k")
	want := map[rate.Verdict]int{rate.Admitted: 1, rate.Delayed: 2, rate.Cancelled: 1, rate.Refused: 1}
	for v, n := range want {
		if seen[v] != n {
			t.Errorf("%v seen %d times, want %d (all: %v)", v, seen[v], n, seen)
		}
	}
}
