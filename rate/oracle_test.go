package rate_test

import (
	"context"
	"fmt"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/limit/limittest"
	"github.com/seed-a07d1050/portcullis/rate"
)

// bucket is the slow, obvious reference: nginx's leaky bucket in exact
// rational arithmetic. Its level is how many requests are in the bucket; it
// drains at the rate; a request adds one and is admitted while the level
// stays within Burst+1; an admitted request whose excess (level - 1) is
// above Delay waits (excess - Delay) / rate. It knows nothing of TATs.
type bucket struct {
	lim   rate.Limit
	level *big.Rat
	last  time.Duration
}

type outcome struct {
	admitted bool
	delay    time.Duration
}

func (b *bucket) arrive(at time.Duration) outcome {
	perNs := big.NewRat(int64(b.lim.Rate.Events), int64(b.lim.Rate.Per))
	if b.level == nil {
		b.level = new(big.Rat)
	}
	drained := new(big.Rat).Mul(perNs, big.NewRat(int64(at-b.last), 1))
	level := new(big.Rat).Sub(b.level, drained)
	if level.Sign() < 0 {
		level.SetInt64(0)
	}
	level.Add(level, big.NewRat(1, 1))
	if level.Cmp(big.NewRat(int64(b.lim.Burst+1), 1)) > 0 {
		return outcome{} // refused: the bucket is left as it was
	}
	b.level, b.last = level, at
	excess := new(big.Rat).Sub(level, big.NewRat(1, 1))
	delay := b.lim.Delay
	if delay == rate.NoDelay {
		return outcome{admitted: true}
	}
	over := new(big.Rat).Sub(excess, big.NewRat(int64(delay), 1))
	if over.Sign() <= 0 {
		return outcome{admitted: true}
	}
	ns := new(big.Rat).Quo(over, perNs) // (excess - delay) / rate, in ns
	q := new(big.Int).Quo(ns.Num(), ns.Denom())
	return outcome{admitted: true, delay: time.Duration(q.Int64())}
}

// scripts are arrival sequences over 10 s, as offsets from the start.
func scripts() map[string][]time.Duration {
	s := map[string][]time.Duration{}
	var flood, bursts, poisson, steady, trickle []time.Duration
	for at := time.Duration(0); at < 10*time.Second; at += time.Millisecond {
		flood = append(flood, at)
	}
	for at := time.Duration(0); at < 10*time.Second; at += 1700 * time.Millisecond {
		for i := range 30 {
			bursts = append(bursts, at+time.Duration(i)*time.Microsecond)
		}
	}
	rng := rand.New(rand.NewPCG(16, 2026))
	for at := time.Duration(0); at < 10*time.Second; at += time.Duration(rng.ExpFloat64() * float64(40*time.Millisecond)) {
		poisson = append(poisson, at)
	}
	for at := time.Duration(0); at < 10*time.Second; at += 100 * time.Millisecond {
		steady = append(steady, at)
	}
	for at := time.Duration(0); at < 10*time.Second; at += 333 * time.Millisecond {
		trickle = append(trickle, at, at+time.Millisecond)
	}
	s["flood-1ms"], s["bursts-of-30"], s["poisson-25/s"], s["steady-10/s"], s["pairs-every-333ms"] = flood, bursts, poisson, steady, trickle
	return s
}

// limits are nginx-style settings whose intervals are whole nanoseconds, so
// that the reference and the limiter must agree exactly.
var oracleLimits = []rate.Limit{
	{Rate: rate.PerSecond(10)},
	{Rate: rate.PerSecond(10), Burst: 5, Delay: rate.NoDelay},
	{Rate: rate.PerSecond(10), Burst: 5},
	{Rate: rate.PerSecond(4), Burst: 10, Delay: 3},
	{Rate: rate.PerMinute(600), Burst: 20, Delay: 5},
	{Rate: rate.PerSecond(50), Burst: 1},
	{Rate: rate.PerSecond(2), Burst: 8, Delay: 8},
}

func newFakeLimiter(t testing.TB, lim rate.Limit, shadow bool) (*rate.Limiter[string], *limittest.Clock) {
	t.Helper()
	clock := limittest.NewClock()
	l, err := rate.New(rate.Config[string]{Rate: lim.Rate, Burst: lim.Burst, Delay: lim.Delay, Clock: clock, Shadow: shadow})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, clock
}

// Over 10 s of scripted arrivals, the limiter admits, delays and refuses
// exactly the requests the reference does, with exactly its delays.
func TestMatchesReferenceBucket(t *testing.T) {
	for name, arrivals := range scripts() {
		for _, lim := range oracleLimits {
			t.Run(fmt.Sprintf("%s/%v", name, lim), func(t *testing.T) {
				l, clock := newFakeLimiter(t, lim, false)
				ref := &bucket{lim: lim}
				var now time.Duration
				admitted, refAdmitted := 0, 0
				for i, at := range arrivals {
					clock.Advance(at - now)
					now = at
					want := ref.arrive(at)
					got := l.Allow("client")
					if want.admitted {
						refAdmitted++
					}
					if got.Allowed() {
						admitted++
					}
					if got.Allowed() != want.admitted || got.Delay != want.delay {
						t.Fatalf("request %d at %v: got %v delay %v; reference admitted=%v delay %v",
							i, at, got.Verdict, got.Delay, want.admitted, want.delay)
					}
				}
				if admitted != refAdmitted {
					t.Fatalf("admitted %d, reference %d", admitted, refAdmitted)
				}
				// The GCRA bound: over 10 s at most Burst+1 plus one per interval.
				if bound := lim.Burst + 1 + int(10*time.Second/lim.Rate.Interval()); admitted > bound {
					t.Fatalf("admitted %d > bound %d", admitted, bound)
				}
				tot := l.Totals()
				if got := int(tot.Admitted + tot.Delayed); got != admitted || int(tot.Refused) != len(arrivals)-admitted {
					t.Fatalf("totals %+v for %d admitted of %d", tot, admitted, len(arrivals))
				}
			})
		}
	}
}

// A flood at 1 ms for 10 s: the admitted count is the closed form
// Burst+1 + floor(10 s / interval) (the first admission at 0 ends
// (Burst+1) intervals ahead; every later one needs one interval).
func TestFloodAdmitsClosedForm(t *testing.T) {
	for _, lim := range oracleLimits {
		l, clock := newFakeLimiter(t, lim, false)
		admitted := 0
		for at := time.Duration(0); at < 10*time.Second; at += time.Millisecond {
			if l.Allow("k").Allowed() {
				admitted++
			}
			clock.Advance(time.Millisecond)
		}
		iv := lim.Rate.Interval()
		want := lim.Burst + 1 + int((10*time.Second-time.Millisecond)/iv)
		if admitted != want {
			t.Errorf("%v: admitted %d, want %d", lim, admitted, want)
		}
	}
}

// Cancelling a delayed request leaves the key exactly as if that request
// had never arrived: the rest of the script then matches a reference run
// without it.
func TestCancelIsExact(t *testing.T) {
	lim := rate.Limit{Rate: rate.PerSecond(10), Burst: 10, Delay: 2}
	arrivals := scripts()["poisson-25/s"]
	// Pick delayed requests from a full reference run.
	var delayed []int
	full := &bucket{lim: lim}
	for i, at := range arrivals {
		if o := full.arrive(at); o.delay > 0 {
			delayed = append(delayed, i)
		}
	}
	if len(delayed) < 20 {
		t.Fatalf("only %d delayed requests in the script", len(delayed))
	}
	for _, drop := range []int{delayed[0], delayed[5], delayed[len(delayed)/2], delayed[len(delayed)-1]} {
		l, clock := newFakeLimiter(t, lim, false)
		ref := &bucket{lim: lim}
		var now time.Duration
		for i, at := range arrivals {
			clock.Advance(at - now)
			now = at
			r, err := l.Reserve(context.Background(), "k")
			if i == drop {
				if err != nil || r.Verdict != rate.Delayed {
					t.Fatalf("drop %d: request not delayed (%v, %v): pick another index", drop, r.Verdict, err)
				}
				if !r.Cancel() || r.Cancel() {
					t.Fatalf("drop %d: Cancel did not give back exactly once", drop)
				}
				continue
			}
			want := ref.arrive(at)
			if r.Allowed() != want.admitted || r.Delay != want.delay {
				t.Fatalf("drop %d: request %d at %v: got %v %v; reference %v %v", drop, i, at, r.Verdict, r.Delay, want.admitted, want.delay)
			}
		}
		if c := l.Totals().Cancelled; c != 1 {
			t.Fatalf("Cancelled = %d", c)
		}
	}
}

// Shadow mode lets everything through at once and reports what enforcing
// would have done, request by request, from the same evolving state.
func TestShadowMatchesEnforcing(t *testing.T) {
	lim := rate.Limit{Rate: rate.PerSecond(10), Burst: 5, Delay: 2}
	enf, ce := newFakeLimiter(t, lim, false)
	sh, cs := newFakeLimiter(t, lim, true)
	var now time.Duration
	for _, at := range scripts()["poisson-25/s"] {
		ce.Advance(at - now)
		cs.Advance(at - now)
		now = at
		e, s := enf.Allow("k"), sh.Allow("k")
		want := map[rate.Verdict]rate.Verdict{rate.Admitted: rate.Admitted, rate.Delayed: rate.ShadowDelayed, rate.Refused: rate.ShadowRefused}[e.Verdict]
		if s.Verdict != want || s.Delay != 0 || !s.Allowed() {
			t.Fatalf("at %v: enforcing %v, shadow %v (delay %v)", at, e.Verdict, s.Verdict, s.Delay)
		}
		if s.Remaining() != e.Remaining() || s.Reset != e.Reset || s.RetryAfter != e.RetryAfter {
			t.Fatalf("at %v: shadow state %+v differs from enforcing %+v", at, s, e)
		}
	}
	te, ts := enf.Totals(), sh.Totals()
	if te.Delayed != ts.ShadowDelayed || te.Refused != ts.ShadowRefused || te.Admitted != ts.Admitted || ts.Refused+ts.Delayed != 0 {
		t.Fatalf("enforcing %+v, shadow %+v", te, ts)
	}
}
