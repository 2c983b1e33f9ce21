package limit_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/limit"
)

// eventLog is an Observer that keeps every event's kind.
type eventLog struct {
	mu    sync.Mutex
	kinds []limit.EventKind
}

func (o *eventLog) Observe(e limit.Event[string]) {
	o.mu.Lock()
	o.kinds = append(o.kinds, e.Kind)
	o.mu.Unlock()
}

func (o *eventLog) take() []limit.EventKind {
	o.mu.Lock()
	defer o.mu.Unlock()
	k := o.kinds
	o.kinds = nil
	return k
}

// TestQuietRefusalLeavesNoTrace checks that a quiet request refused for
// each reason a limiter has (the key at its limit, others queued for it,
// the global cap, a shadow limit, a Store, the limiter closed) returns its
// error, and changes neither the totals, nor the keys tracked, nor what
// the observer saw; and that the same request not quiet is counted.
func TestQuietRefusalLeavesNoTrace(t *testing.T) {
	quiet := limit.AcquireOptions{Quiet: true}
	cases := []struct {
		name string
		cfg  limit.Config[string]
		// fill brings "k" to the state in which a request is refused.
		fill func(t *testing.T, l *limit.Limiter[string])
		want error
	}{
		{"key at its limit", limit.Config[string]{Policy: limit.Policy[string]{Permits: 1}}, takeOne, limit.ErrLimited},
		{"shadow limit at its limit", limit.Config[string]{Policy: limit.Policy[string]{Permits: 1, Shadow: true}}, takeOne, limit.ErrLimited},
		{"others queued", limit.Config[string]{Policy: limit.Policy[string]{Permits: 1, QueueSize: 4, QueueTimeout: time.Minute}}, func(t *testing.T, l *limit.Limiter[string]) {
			takeOne(t, l)
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			go func() { _, _ = l.Acquire(ctx, "k") }()
			waitFor(t, "the waiter", func() bool { return l.Totals().Waiting == 1 })
		}, limit.ErrLimited},
		{"global cap", limit.Config[string]{Policy: limit.Policy[string]{Permits: 5}, GlobalPermits: 1}, func(t *testing.T, l *limit.Limiter[string]) {
			if _, err := l.TryAcquire("other"); err != nil {
				t.Fatal(err)
			}
		}, limit.ErrGlobalLimited},
		{"store", limit.Config[string]{Policy: limit.Policy[string]{Permits: 5}, Store: newClusterStore()}, func(*testing.T, *limit.Limiter[string]) {}, limit.ErrQuietStore},
		{"closed", limit.Config[string]{Policy: limit.Policy[string]{Permits: 5}}, func(_ *testing.T, l *limit.Limiter[string]) { _ = l.Close() }, limit.ErrClosed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obs := &eventLog{}
			tc.cfg.Observer = obs
			l := newLimiter(t, tc.cfg)
			tc.fill(t, l)
			obs.take()
			before := l.Snapshot(0)

			p, err := l.AcquireWith(context.Background(), "k", quiet)
			if !errors.Is(err, tc.want) || p.Valid() {
				t.Fatalf("quiet request: permit valid %v, error %v; want %v", p.Valid(), err, tc.want)
			}
			if tc.want == limit.ErrGlobalLimited && err != limit.ErrGlobalLimited {
				t.Fatalf("quiet request: error %v, want the global limit's", err)
			}
			if got := obs.take(); len(got) != 0 {
				t.Errorf("observer saw %v for a quiet refusal", got)
			}
			if after := l.Snapshot(0); after.Totals != before.Totals || len(after.Keys) != len(before.Keys) {
				t.Errorf("a quiet refusal changed the limiter: before %+v (%d keys), after %+v (%d keys)",
					before.Totals, len(before.Keys), after.Totals, len(after.Keys))
			}
			if limit.RefusalKind(err) != 0 && tc.want != limit.ErrLimited && tc.want != limit.ErrGlobalLimited {
				t.Errorf("RefusalKind(%v) = %v, want none", err, limit.RefusalKind(err))
			}

			// The same request, not quiet, is counted: the check above can fail.
			if tc.want == limit.ErrLimited || tc.want == limit.ErrGlobalLimited {
				if p, err := l.AcquireWith(context.Background(), "k", limit.AcquireOptions{NoWait: true}); err == nil {
					p.Release()
				}
				if after := l.Snapshot(0); after.Totals == before.Totals {
					t.Errorf("a request that was not quiet left the totals as they were: %+v", after.Totals)
				}
			}
		})
	}
}

// TestQuietGrant checks that a quiet request within the limit gets a
// plain permit, counted and observed as any grant, that sets its reclaim
// hook and gives the permit back on release.
func TestQuietGrant(t *testing.T) {
	obs := &eventLog{}
	l := newLimiter(t, limit.Config[string]{Policy: limit.Policy[string]{Permits: 2, Shadow: true}, Observer: obs})
	p, err := l.AcquireWith(context.Background(), "k", limit.AcquireOptions{Quiet: true, OnReclaim: func() {}})
	if err != nil || !p.Valid() || p.Shadowed() || p.Waited() != 0 {
		t.Fatalf("quiet grant: valid %v, shadowed %v, waited %v, error %v", p.Valid(), p.Shadowed(), p.Waited(), err)
	}
	if got := obs.take(); len(got) != 1 || got[0] != limit.Granted {
		t.Errorf("observer saw %v, want one grant", got)
	}
	if tot := l.Totals(); tot.Granted != 1 || tot.InUse != 1 || l.InUse("k") != 1 {
		t.Errorf("after the grant: %+v, in use for k %d", tot, l.InUse("k"))
	}
	p.Release()
	if tot := l.Totals(); tot.InUse != 0 || tot.Keys != 0 {
		t.Errorf("after the release: %+v", tot)
	}
}

func takeOne(t *testing.T, l *limit.Limiter[string]) {
	t.Helper()
	if _, err := l.TryAcquire("k"); err != nil {
		t.Fatal(err)
	}
}

// heldStore is a clusterStore that also holds, per key, permits the
// cluster counts for this process already, which AcquireHeld grants.
type heldStore struct {
	*clusterStore
	spare map[string]int
}

func (s *heldStore) AcquireHeld(key string, limit int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.spare[key] == 0 || s.held[key] >= limit {
		return false
	}
	s.spare[key]--
	s.held[key]++
	return true
}

// TestQuietGrantFromHeldStore checks that a quiet request of a limiter
// whose Store is a limit.HeldStore gets a permit from what the Store holds
// without asking it otherwise, that the permit goes back to the Store on
// release, and that with nothing held the refusal is ErrQuietStore, leaves
// no trace and gives back the global cap's unit it took.
func TestQuietGrantFromHeldStore(t *testing.T) {
	st := &heldStore{clusterStore: newClusterStore(), spare: map[string]int{"k": 1}}
	obs := &eventLog{}
	l := newLimiter(t, limit.Config[string]{Policy: limit.Policy[string]{Permits: 5}, GlobalPermits: 1, Store: st, Observer: obs})
	quiet := limit.AcquireOptions{Quiet: true}

	p, err := l.AcquireWith(context.Background(), "k", quiet)
	if err != nil || !p.Valid() {
		t.Fatalf("quiet request with a permit held: valid %v, error %v", p.Valid(), err)
	}
	if st.calls != 0 || st.tryCalls != 0 || st.total() != 1 {
		t.Errorf("the Store was asked %d+%d times and counts %d; want 0, 0 and 1", st.calls, st.tryCalls, st.total())
	}
	if got := obs.take(); len(got) != 1 || got[0] != limit.Granted {
		t.Errorf("observer saw %v, want one grant", got)
	}
	p.Release()
	if st.total() != 0 || l.Totals().InUse != 0 {
		t.Fatalf("after the release the Store counts %d and the limiter %d", st.total(), l.Totals().InUse)
	}

	before := l.Snapshot(0)
	p, err = l.AcquireWith(context.Background(), "k", quiet)
	if !errors.Is(err, limit.ErrQuietStore) || p.Valid() {
		t.Fatalf("quiet request with nothing held: valid %v, error %v; want ErrQuietStore", p.Valid(), err)
	}
	if after := l.Snapshot(0); after.Totals != before.Totals || len(after.Keys) != len(before.Keys) || len(obs.take()) != 0 {
		t.Errorf("the refusal left a trace: before %+v, after %+v", before.Totals, after.Totals)
	}
	// The global cap's one unit came back: a request that may ask the
	// Store gets it.
	p, err = l.AcquireWith(context.Background(), "other", limit.AcquireOptions{NoWait: true})
	if err != nil {
		t.Fatalf("after a quiet refusal by the Store, the global cap refused: %v", err)
	}
	p.Release()
}
