package rate_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/limit/limittest"
	"github.com/seed-a07d1050/portcullis/rate"
)

// AllowN(key, 1) decides exactly as Allow, and AllowN(key, n) as n calls of
// Allow at the same instant would when all n fit, while refusing all of
// them (counting none) when they do not.
func TestAllowNMatchesAllow(t *testing.T) {
	for _, lim := range []rate.Limit{
		{Rate: rate.PerSecond(10)},
		{Rate: rate.PerSecond(10), Burst: 5},
		{Rate: rate.PerSecond(10), Burst: 5, Delay: 2},
		{Rate: rate.PerMinute(100), Burst: 99, Delay: rate.NoDelay},
	} {
		t.Run(lim.String(), func(t *testing.T) {
			clk := limittest.NewClock()
			mk := func() *rate.Limiter[string] {
				l, err := rate.New(rate.Config[string]{Rate: lim.Rate, Burst: lim.Burst, Delay: lim.Delay, Clock: clk})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = l.Close() })
				return l
			}
			weighted, probe := mk(), mk()
			rng := rand.New(rand.NewPCG(1, 2))
			for i := range 2000 {
				clk.Advance(time.Duration(rng.IntN(int(lim.Rate.Interval() * 2))))
				n := 1
				if rng.IntN(4) == 0 {
					n = 1 + rng.IntN(lim.Burst+2)
				}
				got := weighted.AllowN("k", n)
				// The oracle: n single decisions at the same instant on a
				// limiter in the same state, the admitted ones given back
				// unless all n were admitted.
				admitted := 0
				var last rate.Decision
				for range n {
					last = probe.Allow("k")
					if last.Allowed() {
						admitted++
					}
				}
				if admitted < n {
					probe.GiveBackN("k", admitted)
				}
				switch {
				case got.Allowed() != (admitted == n):
					t.Fatalf("step %d: AllowN(%d) allowed=%v, %d single calls admitted %d", i, n, got.Allowed(), n, admitted)
				case n == 1 && got != last:
					t.Fatalf("step %d: Allow %+v, AllowN(1) %+v", i, last, got)
				case got.Allowed() && (got.Reset != last.Reset || got.Delay != last.Delay):
					t.Fatalf("step %d: AllowN(%d) %+v, last single call %+v", i, n, got, last)
				case !got.Allowed() && got.RetryAfter <= 0:
					t.Fatalf("step %d: refused weight %d with no RetryAfter: %+v", i, n, got)
				}
			}
		})
	}
}

// GiveBackN returns budget: after n admitted requests are given back, n
// more are admitted at the same instant, and no more.
func TestGiveBackN(t *testing.T) {
	clk := limittest.NewClock()
	l, err := rate.New(rate.Config[string]{Rate: rate.PerSecond(1), Burst: 4, Delay: rate.NoDelay, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if d := l.AllowN("k", 5); !d.Allowed() || d.Remaining() != 0 {
		t.Fatalf("AllowN(5) on a fresh key: %+v", d)
	}
	if d := l.AllowN("k", 1); d.Allowed() {
		t.Fatalf("a sixth request was admitted: %+v", d)
	}
	if !l.GiveBackN("k", 3) {
		t.Fatal("GiveBackN moved nothing")
	}
	if d := l.AllowN("k", 3); !d.Allowed() {
		t.Fatalf("three given back, three refused: %+v", d)
	}
	if d := l.AllowN("k", 1); d.Allowed() {
		t.Fatalf("more than was given back was admitted: %+v", d)
	}
	if d := l.AllowN("k", 6); d.Allowed() || d.RetryAfter <= 24*time.Hour {
		t.Fatalf("a weight above the burst capacity: %+v, want refused for good", d)
	}
	if l.GiveBackN("unknown", 1) {
		t.Fatal("GiveBackN of a key with no state moved something")
	}
}

// DecisionFromStore gives what the Limiter gives for the same state.
func TestDecisionFromStore(t *testing.T) {
	lim := rate.Limit{Rate: rate.PerSecond(10), Burst: 9, Delay: 3}
	clk := limittest.NewClock()
	l, err := rate.New(rate.Config[string]{Rate: lim.Rate, Burst: lim.Burst, Delay: lim.Delay, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := range 12 {
		d := l.AllowN("k", 2)
		s := rate.DecisionFromStore(lim, 2, d.Allowed(), d.Reset, false)
		if d != s {
			t.Fatalf("step %d: limiter %+v, from store %+v", i, d, s)
		}
		clk.Advance(50 * time.Millisecond)
	}
}

// AllowLimitN judges by the limit it is given, whatever the Config says,
// and GiveBackLimitN undoes it under the same limit.
func TestAllowLimitN(t *testing.T) {
	clk := limittest.NewClock()
	l, err := rate.New(rate.Config[string]{Rate: rate.Unlimited, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lim := rate.Limit{Rate: rate.PerMinute(3), Burst: 2, Delay: rate.NoDelay}
	for i := range 3 {
		if d := l.AllowLimitN("k", lim, 1); !d.Allowed() || d.Remaining() != 2-i {
			t.Fatalf("request %d: %+v (remaining %d)", i, d, d.Remaining())
		}
	}
	if d := l.AllowLimitN("k", lim, 1); d.Allowed() || d.RetryAfter != 20*time.Second {
		t.Fatalf("fourth request: %+v, want refused with RetryAfter 20s", d)
	}
	if !l.GiveBackLimitN("k", lim, 2) {
		t.Fatal("GiveBackLimitN moved nothing")
	}
	if d := l.AllowLimitN("k", lim, 2); !d.Allowed() {
		t.Fatalf("two given back, two refused: %+v", d)
	}
	if d := l.AllowLimitN("k", rate.Limit{}, 1); d.Allowed() {
		t.Fatalf("an invalid limit admitted: %+v", d)
	}
	if d := l.AllowN("other", 100); !d.Allowed() {
		t.Fatalf("the Config's Unlimited refused: %+v", d)
	}
}
