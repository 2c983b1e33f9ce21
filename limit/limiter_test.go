package limit_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/waitfor"
	"github.com/seed-a07d1050/portcullis/limit"
	"github.com/seed-a07d1050/portcullis/limit/limittest"
)

func newLimiter[K comparable](t *testing.T, cfg limit.Config[K]) *limit.Limiter[K] {
	t.Helper()
	l, err := limit.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// assertIdle fails unless the limiter holds nothing and tracks no key.
func assertIdle[K comparable](t *testing.T, l *limit.Limiter[K]) {
	t.Helper()
	tot := l.Totals()
	if tot.InUse != 0 || tot.Waiting != 0 || tot.Keys != 0 {
		t.Fatalf("limiter not idle: in use %d, waiting %d, keys %d", tot.InUse, tot.Waiting, tot.Keys)
	}
}

// waitFor polls cond until it holds, failing the test after waitfor.Limit.
// (internal/waitfor holds the loop; this package keeps the name while
// another branch edits its tests: issue 37 item 6.)
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitfor.Cond(t, what, cond)
}

func TestConfigErrors(t *testing.T) {
	cases := []struct {
		name string
		cfg  limit.Config[string]
		want string
	}{
		{"negative global", limit.Config[string]{GlobalPermits: -1}, "GlobalPermits must not be negative (got -1)"},
		{"negative queue", limit.Config[string]{Policy: limit.Policy[string]{QueueSize: -2}}, "QueueSize must not be negative (got -2)"},
		{"negative timeout", limit.Config[string]{Policy: limit.Policy[string]{QueueTimeout: -time.Second}}, "QueueTimeout must not be negative (got -1s)"},
		{"too many permits", limit.Config[string]{Policy: limit.Policy[string]{Permits: 1 << 40}}, "Permits must be at most"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := limit.New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "limit: ") {
				t.Fatalf("New() error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestPermitsPerKey(t *testing.T) {
	l := newLimiter(t, limit.Config[string]{Policy: limit.Policy[string]{Permits: 3}})
	var held []limit.Permit[string]
	for i := range 3 {
		p, err := l.TryAcquire("a")
		if err != nil {
			t.Fatalf("acquire %d: %v", i, err)
		}
		held = append(held, p)
	}
	if _, err := l.TryAcquire("a"); !errors.Is(err, limit.ErrLimited) {
		t.Fatalf("4th acquire: err = %v, want ErrLimited", err)
	}
	b, err := l.TryAcquire("b")
	if err != nil {
		t.Fatalf("other key refused: %v", err)
	}
	if got := l.InUse("a"); got != 3 {
		t.Fatalf("InUse(a) = %d, want 3", got)
	}
	snap := l.Snapshot(1)
	if len(snap.Keys) != 1 || snap.Keys[0].Key != "a" || snap.Keys[0].InUse != 3 || snap.Keys[0].Refused != 1 {
		t.Fatalf("Snapshot(1).Keys = %+v, want [a in use 3 refused 1]", snap.Keys)
	}
	if snap.Totals.Granted != 4 || snap.Totals.Refused != 1 || snap.Totals.Keys != 2 || snap.Totals.InUse != 4 {
		t.Fatalf("Totals = %+v", snap.Totals)
	}
	for _, p := range held {
		p.Release()
	}
	b.Release()
	assertIdle(t, l)
}

func TestDefaultPermitsIs64(t *testing.T) {
	l := newLimiter(t, limit.Config[int]{})
	var held []limit.Permit[int]
	for {
		p, err := l.TryAcquire(7)
		if err != nil {
			break
		}
		held = append(held, p)
		if len(held) > 1000 {
			t.Fatal("no limit reached")
		}
	}
	if len(held) != limit.DefaultPermits {
		t.Fatalf("default permits = %d, want %d", len(held), limit.DefaultPermits)
	}
	for _, p := range held {
		p.Release()
	}
	assertIdle(t, l)
}

func TestReleaseCountsOnce(t *testing.T) {
	l := newLimiter(t, limit.Config[string]{Policy: limit.Policy[string]{Permits: 2}})
	p1, _ := l.TryAcquire("k")
	p2, _ := l.TryAcquire("k")
	copyOfP1 := p1
	p1.Release()
	p1.Release()
	copyOfP1.Release()
	if got := l.InUse("k"); got != 1 {
		t.Fatalf("after releasing p1 thrice, InUse = %d, want 1 (p2 still held)", got)
	}
	// The recycled permit record must not let the stale handle release p3.
	p3, err := l.TryAcquire("k")
	if err != nil {
		t.Fatal(err)
	}
	p1.Release()
	if got := l.InUse("k"); got != 2 {
		t.Fatalf("stale handle released a live permit: InUse = %d, want 2", got)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(p2.Release)
		wg.Go(p3.Release)
	}
	wg.Wait()
	assertIdle(t, l)
	var zero limit.Permit[string]
	zero.Release()
	zero.Exempt()
	if zero.Valid() {
		t.Fatal("zero Permit is valid")
	}
}

func TestOverrides(t *testing.T) {
	l := newLimiter(t, limit.Config[string]{
		Policy: limit.Policy[string]{
			Permits: 2,
			PermitsFor: func(k string) int {
				switch k {
				case "batch":
					return 32
				case "health":
					return -1
				}
				return 0
			},
		},
	})
	cases := []struct {
		key  string
		want int
	}{{"user", 2}, {"batch", 32}, {"health", 5000}}
	for _, tc := range cases {
		t.Run(tc.key, func(t *testing.T) {
			var held []limit.Permit[string]
			for len(held) < 5000 {
				p, err := l.TryAcquire(tc.key)
				if err != nil {
					break
				}
				held = append(held, p)
			}
			if len(held) != tc.want {
				t.Fatalf("%s got %d permits, want %d", tc.key, len(held), tc.want)
			}
			for _, p := range held {
				p.Release()
			}
			assertIdle(t, l)
		})
	}
}

func TestUnlimited(t *testing.T) {
	l := newLimiter(t, limit.Config[string]{Policy: limit.Policy[string]{Permits: -1}})
	var held []limit.Permit[string]
	for range 10000 {
		p, err := l.TryAcquire("k")
		if err != nil {
			t.Fatalf("unlimited refused: %v", err)
		}
		held = append(held, p)
	}
	for _, p := range held {
		p.Release()
	}
	assertIdle(t, l)
}

func TestGlobalCap(t *testing.T) {
	l := newLimiter(t, limit.Config[int]{Policy: limit.Policy[int]{Permits: 2, QueueSize: 4}, GlobalPermits: 5})
	var held []limit.Permit[int]
	for k := range 3 {
		for range 2 {
			p, err := l.TryAcquire(k)
			if k == 2 && len(held) == 5 {
				if !errors.Is(err, limit.ErrLimited) || !errors.Is(err, limit.ErrGlobalLimited) {
					t.Fatalf("6th permit over global cap: err = %v", err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("key %d: %v", k, err)
			}
			held = append(held, p)
		}
	}
	// The global cap refuses at once even with a queue.
	if _, err := l.Acquire(context.Background(), 9); !errors.Is(err, limit.ErrGlobalLimited) {
		t.Fatalf("Acquire over global cap: err = %v, want ErrGlobalLimited", err)
	}
	held[0].Release()
	p, err := l.TryAcquire(9)
	if err != nil {
		t.Fatalf("after a release the global cap should admit: %v", err)
	}
	p.Release()
	for _, p := range held[1:] {
		p.Release()
	}
	assertIdle(t, l)
}

func TestQueueFIFO(t *testing.T) {
	l := newLimiter(t, limit.Config[string]{Policy: limit.Policy[string]{Permits: 1, QueueSize: 5}})
	first, _ := l.TryAcquire("k")
	order := make(chan int, 5)
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Go(func() {
			p, err := l.Acquire(context.Background(), "k")
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			order <- i
			p.Release()
		})
		// Let waiter i enqueue before waiter i+1 starts.
		waitFor(t, "waiter to queue", func() bool { return l.Totals().Waiting == i+1 })
	}
	first.Release()
	wg.Wait()
	close(order)
	want := 0
	for got := range order {
		if got != want {
			t.Fatalf("waiter %d admitted in place %d", got, want)
		}
		want++
	}
	assertIdle(t, l)
}

func TestQueueFull(t *testing.T) {
	l := newLimiter(t, limit.Config[string]{Policy: limit.Policy[string]{Permits: 1, QueueSize: 1}})
	held, _ := l.TryAcquire("k")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := l.Acquire(ctx, "k")
		done <- err
	}()
	waitFor(t, "waiter", func() bool { return l.Totals().Waiting == 1 })
	if _, err := l.Acquire(context.Background(), "k"); !errors.Is(err, limit.ErrQueueFull) {
		t.Fatalf("second waiter: err = %v, want ErrQueueFull", err)
	}
	if _, err := l.TryAcquire("k"); !errors.Is(err, limit.ErrLimited) {
		t.Fatalf("TryAcquire with a queue: err = %v, want ErrLimited", err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: err = %v", err)
	}
	held.Release()
	tot := l.Totals()
	if tot.QueueFull != 1 || tot.Abandoned != 1 || tot.Refused != 1 {
		t.Fatalf("Totals = %+v, want 1 queue full, 1 abandoned, 1 refused", tot)
	}
	assertIdle(t, l)
}

func TestQueueTimeoutWithFakeClock(t *testing.T) {
	// In a bubble, synctest.Wait tells when the waiter has done all it
	// will do before the next Advance, where a real-time pause could only
	// guess it.
	synctest.Test(t, func(t *testing.T) {
		clock := limittest.NewClock()
		var events []limit.Event[string]
		var mu sync.Mutex
		l := newLimiter(t, limit.Config[string]{
			Policy: limit.Policy[string]{Permits: 1, QueueSize: 2, QueueTimeout: 2 * time.Second, ReclaimAfter: -1},
			Clock:  clock,
			Observer: limit.ObserverFunc[string](func(e limit.Event[string]) {
				mu.Lock()
				events = append(events, e)
				mu.Unlock()
			}),
		})
		held, _ := l.TryAcquire("k")
		done := make(chan error, 1)
		go func() {
			_, err := l.Acquire(context.Background(), "k")
			done <- err
		}()
		synctest.Wait() // the waiter is queued, its timer armed
		if n := clock.Timers(); n != 1 {
			t.Fatalf("%d timers armed, want the queue's one", n)
		}
		clock.Advance(1999 * time.Millisecond)
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("waiter gave up before its wait limit: %v", err)
		default:
		}
		clock.Advance(time.Millisecond)
		if err := <-done; !errors.Is(err, limit.ErrQueueTimeout) {
			t.Fatalf("err = %v, want ErrQueueTimeout", err)
		}
		held.Release()
		assertIdle(t, l)
		if l.Totals().QueueTimeouts != 1 {
			t.Fatalf("QueueTimeouts = %d, want 1", l.Totals().QueueTimeouts)
		}
		mu.Lock()
		defer mu.Unlock()
		last := events[len(events)-1]
		if last.Kind != limit.QueueTimeout || last.Wait != 2*time.Second || last.Key != "k" {
			t.Fatalf("last event = %+v, want a 2s queue timeout of k", last)
		}
	})
}

func TestWaiterGetsPermitAfterWaiting(t *testing.T) {
	clock := limittest.NewClock()
	var waited time.Duration
	l := newLimiter(t, limit.Config[string]{
		Policy: limit.Policy[string]{
			Permits:      1,
			QueueSize:    1,
			ReclaimAfter: -1,
		}, Clock: clock,
		Observer: limit.ObserverFunc[string](func(e limit.Event[string]) {
			if e.Kind == limit.Granted && e.Wait > 0 {
				waited = e.Wait
			}
		}),
	})
	held, _ := l.TryAcquire("k")
	if held.Waited() != 0 {
		t.Fatalf("a permit granted at once: Waited %v, want 0", held.Waited())
	}
	got := make(chan limit.Permit[string], 1)
	go func() {
		p, err := l.Acquire(context.Background(), "k")
		if err != nil {
			t.Error(err)
		}
		got <- p
	}()
	waitFor(t, "waiter", func() bool { return l.Totals().Waiting == 1 })
	clock.Advance(300 * time.Millisecond)
	held.Release()
	p := <-got
	if l.InUse("k") != 1 || !p.Valid() {
		t.Fatalf("handoff failed: in use %d", l.InUse("k"))
	}
	if p.Waited() != 300*time.Millisecond {
		t.Fatalf("the waiter's permit: Waited %v, want 300ms", p.Waited())
	}
	p.Release()
	assertIdle(t, l)
	if waited != 300*time.Millisecond {
		t.Fatalf("observed wait %v, want 300ms", waited)
	}
}

func TestShadowMode(t *testing.T) {
	l := newLimiter(t, limit.Config[string]{Policy: limit.Policy[string]{Permits: 2, Shadow: true, QueueSize: 3}})
	var held []limit.Permit[string]
	for i := range 5 {
		p, err := l.Acquire(context.Background(), "k")
		if err != nil {
			t.Fatalf("shadow mode refused request %d: %v", i, err)
		}
		if want := i >= 2; p.Shadowed() != want {
			t.Fatalf("request %d: Shadowed = %v, want %v", i, p.Shadowed(), want)
		}
		held = append(held, p)
	}
	tot := l.Totals()
	if tot.ShadowRefused != 3 || tot.Refused != 0 || tot.Granted != 5 || tot.InUse != 5 {
		t.Fatalf("Totals = %+v, want 3 shadow-refused of 5 granted", tot)
	}
	for _, p := range held {
		p.Release()
	}
	assertIdle(t, l)
}

func TestReclaim(t *testing.T) {
	clock := limittest.NewClock()
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))
	l := newLimiter(t, limit.Config[string]{
		Policy: limit.Policy[string]{
			Permits:   2,
			QueueSize: 1,
		}, Clock: clock, Logger: logger, Name: "test",
	})
	stuck, _ := l.TryAcquire("k")
	tunnel, _ := l.TryAcquire("k")
	tunnel.Exempt()
	waiter := make(chan limit.Permit[string], 1)
	go func() {
		p, err := l.Acquire(context.Background(), "k")
		if err != nil {
			t.Error(err)
		}
		waiter <- p
	}()
	waitFor(t, "waiter", func() bool { return l.Totals().Waiting == 1 })

	clock.Advance(limit.DefaultReclaimAfter - time.Second)
	if n := l.Reclaim(); n != 0 {
		t.Fatalf("reclaimed %d permits before ReclaimAfter", n)
	}
	clock.Advance(time.Second)
	if n := l.Reclaim(); n != 1 {
		t.Fatalf("Reclaim() = %d, want 1 (the exempt tunnel stays)", n)
	}
	p := <-waiter // the reclaimed permit went to the waiter
	stuck.Release()
	if got := l.InUse("k"); got != 2 {
		t.Fatalf("the reclaimed holder's Release counted: InUse = %d, want 2", got)
	}
	p.Release()
	tunnel.Release()
	assertIdle(t, l)
	if got := l.Totals().Reclaimed; got != 1 {
		t.Fatalf("Reclaimed = %d, want 1", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "key=k") ||
		!strings.Contains(logs.String(), "limiter=test") {
		t.Fatalf("reclaim log = %q, want a WARN naming key k", logs.String())
	}
}

func TestReclaimRunsByItself(t *testing.T) {
	l := newLimiter(t, limit.Config[string]{Policy: limit.Policy[string]{
		Permits:      1,
		ReclaimAfter: 20 * time.Millisecond,
	},
		Logger: slog.New(slog.DiscardHandler)})
	p, _ := l.TryAcquire("k")
	waitFor(t, "reclaim", func() bool { return l.Totals().Reclaimed == 1 })
	p.Release()
	assertIdle(t, l)
}

func TestCloseFailsWaiters(t *testing.T) {
	l, err := limit.New(limit.Config[string]{Policy: limit.Policy[string]{Permits: 1, QueueSize: 1}})
	if err != nil {
		t.Fatal(err)
	}
	held, _ := l.TryAcquire("k")
	done := make(chan error, 1)
	go func() {
		_, err := l.Acquire(context.Background(), "k")
		done <- err
	}()
	waitFor(t, "waiter", func() bool { return l.Totals().Waiting == 1 })
	l.Close()
	if err := <-done; !errors.Is(err, limit.ErrClosed) {
		t.Fatalf("waiter err = %v, want ErrClosed", err)
	}
	if _, err := l.TryAcquire("x"); !errors.Is(err, limit.ErrClosed) {
		t.Fatalf("acquire after Close: %v", err)
	}
	held.Release()
	assertIdle(t, l)
	l.Close()
}

func TestSteadyStateAllocatesNothing(t *testing.T) {
	l := newLimiter(t, limit.Config[string]{Policy: limit.Policy[string]{Permits: 4}})
	allocs := testing.AllocsPerRun(1000, func() {
		p, err := l.TryAcquire("client")
		if err != nil {
			t.Fatal(err)
		}
		p.Release()
	})
	if allocs != 0 {
		t.Fatalf("TryAcquire+Release allocates %.1f times, want 0", allocs)
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(b)
}

// TestOnReclaim checks that a reclaimed permit's hook runs once, after the
// permit was taken back, and that released and exempt permits never call
// theirs, even from a recycled record.
func TestOnReclaim(t *testing.T) {
	clock := limittest.NewClock()
	l := newLimiter(t, limit.Config[string]{Policy: limit.Policy[string]{Permits: 3}, Clock: clock, Logger: slog.New(slog.DiscardHandler)})
	var stuckCalls, releasedCalls, exemptCalls atomic.Int32
	stuck, _ := l.TryAcquire("k")
	stuck.OnReclaim(func() {
		stuckCalls.Add(1)
		if got := l.InUse("k"); got != 1 { // the exempt permit alone
			t.Errorf("hook ran while the permit was still counted: InUse = %d, want 1", got)
		}
	})
	released, _ := l.TryAcquire("k")
	released.OnReclaim(func() { releasedCalls.Add(1) })
	released.Release()
	released.OnReclaim(func() { releasedCalls.Add(1) }) // after Release: no effect
	exempt, _ := l.TryAcquire("k")
	exempt.Exempt()
	exempt.OnReclaim(func() { exemptCalls.Add(1) })

	// Advancing the fake clock also wakes the limiter's own reclaim loop:
	// whichever runs first takes the permit back.
	clock.Advance(limit.DefaultReclaimAfter)
	l.Reclaim()
	waitFor(t, "the first reclaim", func() bool { return l.Totals().Reclaimed == 1 })
	// A new permit may reuse the released record; its hook must be unset.
	fresh, _ := l.TryAcquire("k")
	clock.Advance(limit.DefaultReclaimAfter)
	l.Reclaim()
	waitFor(t, "the second reclaim", func() bool { return l.Totals().Reclaimed == 2 })
	if s, r, e := stuckCalls.Load(), releasedCalls.Load(), exemptCalls.Load(); s != 1 || r != 0 || e != 0 {
		t.Errorf("hook calls: stuck %d, released %d, exempt %d; want 1, 0, 0", s, r, e)
	}
	fresh.Release()
	stuck.Release()
	exempt.Release()
	assertIdle(t, l)
}

// TestIdle checks that Idle's channel closes when the last permit returns
// and the last waiter leaves, and not before.
func TestIdle(t *testing.T) {
	l := newLimiter(t, limit.Config[string]{Policy: limit.Policy[string]{Permits: 1, QueueSize: 1}})
	select {
	case <-l.Idle():
	case <-time.After(10 * time.Second):
		t.Fatal("an unused limiter is not idle")
	}
	l2 := newLimiter(t, limit.Config[string]{Policy: limit.Policy[string]{Permits: 1, QueueSize: 1}})
	a, _ := l2.TryAcquire("a")
	b, _ := l2.TryAcquire("b")
	got := make(chan limit.Permit[string], 1)
	go func() {
		p, err := l2.Acquire(context.Background(), "a")
		if err != nil {
			t.Error(err)
		}
		got <- p
	}()
	waitFor(t, "the waiter", func() bool { return l2.Totals().Waiting == 1 })
	idle := l2.Idle()
	steps := []func(){a.Release, b.Release, func() { (<-got).Release() }}
	for i, step := range steps {
		select {
		case <-idle:
			t.Fatalf("idle before step %d", i)
		default:
		}
		step()
	}
	select {
	case <-idle:
	case <-time.After(10 * time.Second):
		t.Fatal("not idle after the last release")
	}
	assertIdle(t, l2)
}

// TestAcquireOver checks that AcquireOver grants over the limit and the
// global cap, that the key then refuses until it is back under its limit,
// and that the Store never hears of it.
func TestAcquireOver(t *testing.T) {
	store := newClusterStore()
	l := newLimiter(t, limit.Config[string]{Policy: limit.Policy[string]{Permits: 1}, GlobalPermits: 1, Store: store})
	first, err := l.TryAcquire("k")
	if err != nil {
		t.Fatal(err)
	}
	over := l.AcquireOver("k")
	if !over.Valid() || over.Shadowed() || l.InUse("k") != 2 {
		t.Fatalf("AcquireOver: valid %v, shadowed %v, InUse %d; want a plain permit and 2 in use", over.Valid(), over.Shadowed(), l.InUse("k"))
	}
	if _, err := l.TryAcquire("other"); !errors.Is(err, limit.ErrGlobalLimited) {
		t.Errorf("another key over a full global cap: %v, want ErrGlobalLimited", err)
	}
	first.Release()
	if _, err := l.TryAcquire("k"); !errors.Is(err, limit.ErrLimited) {
		t.Errorf("key still at its limit: %v, want ErrLimited", err)
	}
	over.Release()
	assertIdle(t, l)
	store.mu.Lock()
	defer store.mu.Unlock()
	if store.tryCalls != 1 || len(store.held) != 0 {
		t.Errorf("the Store saw %d acquires and holds %v, want 1 and nothing (never the adopted permit)", store.tryCalls, store.held)
	}
}

// RefusalKind names each refusal as the limiter counts it.
func TestRefusalKind(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want limit.EventKind
	}{
		{limit.ErrLimited, limit.Refused},
		{limit.ErrGlobalLimited, limit.Refused},
		{fmt.Errorf("acquiring: %w", limit.ErrQueueFull), limit.QueueFull},
		{limit.ErrQueueTimeout, limit.QueueTimeout},
		{fmt.Errorf("%w: %w", limit.ErrStore, context.DeadlineExceeded), limit.StoreFailed},
		{limit.ErrClosed, 0},
		{context.Canceled, limit.Abandoned},
	} {
		if got := limit.RefusalKind(tc.err); got != tc.want {
			t.Errorf("RefusalKind(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
