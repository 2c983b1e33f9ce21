package limit_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/seed-a07d1050/portcullis/limit"
	"github.com/seed-a07d1050/portcullis/limit/limittest"
)

// TestAcquireWithSetsOnReclaim checks that the hook AcquireWith sets runs
// once when the permit is reclaimed, however the permit was granted: free
// at once, handed over to a request that waited in the queue, and over
// the limit in shadow mode; that a permit released before the reclaim
// never calls it, even from a recycled record; and that its refusals are
// Acquire's and TryAcquire's.
func TestAcquireWithSetsOnReclaim(t *testing.T) {
	cases := []struct {
		name string
		cfg  limit.Config[string]
		// get returns the permit whose hook is under test, the others
		// taken on the way to it, and the hook's call count.
		get func(t *testing.T, l *limit.Limiter[string]) (limit.Permit[string], []limit.Permit[string], *atomic.Int32)
	}{
		{"granted at once", limit.Config[string]{Policy: limit.Policy[string]{Permits: 1}}, func(t *testing.T, l *limit.Limiter[string]) (limit.Permit[string], []limit.Permit[string], *atomic.Int32) {
			var n atomic.Int32
			p, err := l.AcquireWith(context.Background(), "k", limit.AcquireOptions{NoWait: true, OnReclaim: func() { n.Add(1) }})
			if err != nil {
				t.Fatal(err)
			}
			return p, nil, &n
		}},
		{"handed over after waiting", limit.Config[string]{Policy: limit.Policy[string]{Permits: 1, QueueSize: 1}}, func(t *testing.T, l *limit.Limiter[string]) (limit.Permit[string], []limit.Permit[string], *atomic.Int32) {
			var n atomic.Int32
			first, _ := l.TryAcquire("k")
			got := make(chan limit.Permit[string], 1)
			go func() {
				p, err := l.AcquireWith(context.Background(), "k", limit.AcquireOptions{OnReclaim: func() { n.Add(1) }})
				if err != nil {
					t.Error(err)
				}
				got <- p
			}()
			waitFor(t, "the waiter", func() bool { return l.Totals().Waiting == 1 })
			first.Release()
			return <-got, nil, &n
		}},
		{"shadow over the limit", limit.Config[string]{Policy: limit.Policy[string]{Permits: 1, Shadow: true}}, func(t *testing.T, l *limit.Limiter[string]) (limit.Permit[string], []limit.Permit[string], *atomic.Int32) {
			var n atomic.Int32
			first, _ := l.TryAcquire("k")
			p, err := l.AcquireWith(context.Background(), "k", limit.AcquireOptions{NoWait: true, OnReclaim: func() { n.Add(1) }})
			if err != nil || !p.Shadowed() {
				t.Fatalf("shadow grant: shadowed %v, error %v", p.Shadowed(), err)
			}
			first.Exempt() // only the permit under test is reclaimed
			return p, []limit.Permit[string]{first}, &n
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := limittest.NewClock()
			tc.cfg.Clock, tc.cfg.Logger = clock, slog.New(slog.DiscardHandler)
			l := newLimiter(t, tc.cfg)
			p, others, calls := tc.get(t, l)

			// A permit released before the reclaim: its hook never runs,
			// and the record it leaves carries no hook to the next holder.
			var releasedCalls atomic.Int32
			if len(others) == 0 {
				p.Exempt()
				r, err := l.AcquireWith(context.Background(), "other", limit.AcquireOptions{NoWait: true, OnReclaim: func() { releasedCalls.Add(1) }})
				if err != nil {
					t.Fatal(err)
				}
				r.Release()
				fresh, _ := l.TryAcquire("other") // may reuse r's record
				fresh.Exempt()
				others = append(others, fresh)
				p.Release()
				p, _, calls = tc.get(t, l)
			}

			clock.Advance(limit.DefaultReclaimAfter)
			l.Reclaim()
			waitFor(t, "the reclaim", func() bool { return calls.Load() == 1 })
			if got := releasedCalls.Load(); got != 0 {
				t.Errorf("the hook of a released permit ran %d times", got)
			}
			if got := l.Totals().Reclaimed; got != 1 {
				t.Errorf("reclaimed %d permits, want 1", got)
			}
			p.Release()
			for _, o := range others {
				o.Release()
			}
			assertIdle(t, l)
		})
	}

	l := newLimiter(t, limit.Config[string]{Policy: limit.Policy[string]{Permits: 1}})
	held, _ := l.TryAcquire("k")
	if _, err := l.AcquireWith(context.Background(), "k", limit.AcquireOptions{NoWait: true, OnReclaim: func() {}}); !errors.Is(err, limit.ErrLimited) {
		t.Errorf("at the limit without waiting: %v, want ErrLimited", err)
	}
	held.Release()
	assertIdle(t, l)
}

// TestAcquireWithAllocatesNothing checks that setting the hook at the
// grant costs no allocation.
func TestAcquireWithAllocatesNothing(t *testing.T) {
	l := newLimiter(t, limit.Config[string]{Policy: limit.Policy[string]{Permits: 4}})
	hook := func() {}
	allocs := testing.AllocsPerRun(1000, func() {
		p, err := l.AcquireWith(context.Background(), "client", limit.AcquireOptions{NoWait: true, OnReclaim: hook})
		if err != nil {
			t.Fatal(err)
		}
		p.Release()
	})
	if allocs != 0 {
		t.Fatalf("AcquireWith+Release allocates %.1f times, want 0", allocs)
	}
}

// TestGrantRacingAReclaim grants permits while reclaims take every permit
// back as soon as it exists, so that a record is often recycled just after
// it was granted. Each grant must make its handle while it still holds
// the key's lock: a handle made after, reading a generation a reclaim had
// already moved on, would match the record's next holder and release
// that holder's permit. The race detector reports such a read; without
// it, the counts must still come back to zero.
func TestGrantRacingAReclaim(t *testing.T) {
	clock := limittest.NewClock()
	l := newLimiter(t, limit.Config[string]{Policy: limit.Policy[string]{Permits: 1000}, Clock: clock, Logger: slog.New(slog.DiscardHandler)})
	stop := make(chan struct{})
	reclaimed := make(chan struct{})
	go func() {
		defer close(reclaimed)
		for i := 0; i < 200000; i++ { // bounded: stops by itself
			select {
			case <-stop:
				return
			default:
			}
			clock.Advance(limit.DefaultReclaimAfter)
			l.Reclaim()
		}
	}()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5000 {
				p, err := l.AcquireWith(context.Background(), "k", limit.AcquireOptions{NoWait: g%2 == 0, OnReclaim: func() {}})
				if err != nil {
					t.Error(err)
					return
				}
				if g%2 == 1 {
					l.AcquireOver("k").Release()
				}
				p.Release()
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-reclaimed
	assertIdle(t, l)
}
