package rate_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/limit/limittest"
	"github.com/seed-a07d1050/portcullis/rate"
)

// fakeStore answers every request as told, and records what it was asked.
type fakeStore struct {
	mu        sync.Mutex
	ok        bool
	ahead     time.Duration
	err       error
	reserves  int
	tries     int
	cancelled int
}

func (s *fakeStore) Reserve(context.Context, string, rate.Limit) (bool, time.Duration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reserves++
	return s.ok, s.ahead, s.err
}

func (s *fakeStore) TryReserve(string, rate.Limit) (bool, time.Duration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tries++
	return s.ok, s.ahead, s.err
}

func (s *fakeStore) Cancel(string, rate.Limit) {
	s.mu.Lock()
	s.cancelled++
	s.mu.Unlock()
}

func newStoreLimiter(t *testing.T, st rate.Store[string], lim rate.Limit) (*rate.Limiter[string], *limittest.Clock) {
	t.Helper()
	clock := limittest.NewClock()
	l, err := rate.New(rate.Config[string]{Rate: lim.Rate, Burst: lim.Burst, Delay: lim.Delay, Clock: clock, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, clock
}

// The cluster's answer decides: its state sets the delay and the retry
// time; a refusal or a failure gives the local count back.
func TestStoreDecides(t *testing.T) {
	lim := rate.Limit{Rate: rate.PerSecond(10), Burst: 5}
	st := &fakeStore{ok: true, ahead: 400 * time.Millisecond}
	l, _ := newStoreLimiter(t, st, lim)

	r, err := l.Reserve(context.Background(), "k")
	if err != nil || r.Verdict != rate.Delayed || r.Delay != 300*time.Millisecond || r.Remaining() != 2 {
		t.Fatalf("admitted by a busy cluster: %+v, %v", r.Decision, err)
	}
	if d := l.Allow("k"); st.tries != 1 || d.Delay != 300*time.Millisecond {
		t.Fatalf("Allow: %+v after %d TryReserve calls", d, st.tries)
	}

	st.ok, st.ahead = false, 560*time.Millisecond
	r, err = l.Reserve(context.Background(), "k")
	if !errors.Is(err, rate.ErrLimited) || r.Verdict != rate.Refused || r.RetryAfter != 60*time.Millisecond {
		t.Fatalf("refused by the cluster: %+v, %v", r.Decision, err)
	}
	st.err = errors.New("redis down")
	if _, err := l.Reserve(context.Background(), "k"); !errors.Is(err, rate.ErrStore) || !errors.Is(err, st.err) {
		t.Fatalf("store failure: %v", err)
	}
	// Locally only the two admitted requests count: the refused and failed
	// ones were given back, so the key's own state is 200 ms ahead.
	st.err, st.ok, st.ahead = nil, true, 0
	if d := l.Allow("k"); d.Delay != 200*time.Millisecond {
		t.Fatalf("local state after refusals: %+v, want the local delay of a third request, 200ms", d)
	}
	tot := l.Totals()
	if tot.Refused != 1 || tot.StoreFailed != 1 || tot.Delayed != 3 {
		t.Fatalf("totals %+v", tot)
	}
}

// A request this process alone is over never reaches the Store; a
// cancelled one is given back to it.
func TestStoreAskedOnlyWhenLocallyAdmitted(t *testing.T) {
	st := &fakeStore{ok: true, ahead: 200 * time.Millisecond}
	l, _ := newStoreLimiter(t, st, rate.Limit{Rate: rate.PerSecond(10), Burst: 1})
	for range 5 {
		_, _ = l.Reserve(context.Background(), "k")
	}
	if st.reserves != 2 {
		t.Fatalf("the Store was asked %d times for 2 locally admitted requests", st.reserves)
	}
	r, err := l.Reserve(context.Background(), "other")
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict != rate.Delayed || !r.Cancel() || st.cancelled != 1 {
		t.Fatalf("cancel of a stored request: %v, store saw %d cancels", r.Verdict, st.cancelled)
	}
}

// With a Store, each decision is counted and reported once, with the
// Store's verdict.
func TestStoreDecisionReportedOnce(t *testing.T) {
	var mu sync.Mutex
	var seen []rate.Verdict
	st := &fakeStore{ok: false, ahead: time.Second}
	l, err := rate.New(rate.Config[string]{Rate: rate.PerSecond(10), Burst: 5, Clock: limittest.NewClock(), Store: st,
		Observer: rate.ObserverFunc[string](func(e rate.Event[string]) {
			mu.Lock()
			seen = append(seen, e.Kind)
			mu.Unlock()
		})})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Allow("k")
	st.ok, st.ahead = true, 0
	l.Allow("k")
	if len(seen) != 2 || seen[0] != rate.Refused || seen[1] != rate.Admitted {
		t.Fatalf("events %v, want [refused admitted]", seen)
	}
	if tot := l.Totals(); tot.Refused != 1 || tot.Admitted != 1 {
		t.Fatalf("totals %+v", tot)
	}
}
