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
