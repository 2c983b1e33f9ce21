package limit_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/limit"
)

// clusterStore is a fake Store shared by several limiters, standing for a
// cluster: it counts permits per key over all of them.
type clusterStore struct {
	mu       sync.Mutex
	held     map[string]int
	fail     error
	calls    int
	tryCalls int
	notify   []func(string)
}

func newClusterStore() *clusterStore { return &clusterStore{held: map[string]int{}} }

func (s *clusterStore) Acquire(ctx context.Context, key string, limit, local int) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	return s.take(key, limit)
}

func (s *clusterStore) TryAcquire(key string, limit, local int) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tryCalls++
	return s.take(key, limit)
}

func (s *clusterStore) take(key string, limit int) (bool, error) {
	if s.fail != nil {
		return false, s.fail
	}
	if s.held[key] >= limit {
		return false, nil
	}
	s.held[key]++
	return true, nil
}

func (s *clusterStore) Release(key string) {
	s.mu.Lock()
	s.held[key]--
	if s.held[key] == 0 {
		delete(s.held, key)
	}
	fns := s.notify
	s.mu.Unlock()
	for _, f := range fns {
		f(key)
	}
}

func (s *clusterStore) NotifyRelease(f func(string)) {
	s.mu.Lock()
	s.notify = append(s.notify, f)
	s.mu.Unlock()
}

func (s *clusterStore) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, v := range s.held {
		n += v
	}
	return n
}

func TestStoreHoldsClusterLimit(t *testing.T) {
	store := newClusterStore()
	a := newLimiter(t, limit.Config[string]{Policy: limit.Policy[string]{Permits: 2, QueueSize: 1}, Store: store})
	b := newLimiter(t, limit.Config[string]{Policy: limit.Policy[string]{Permits: 2, QueueSize: 1}, Store: store})
	pa, err := a.Acquire(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	pb, err := b.TryAcquire("k")
	if err != nil {
		t.Fatal(err)
	}
	// Each node holds one, the cluster holds two: both nodes refuse now.
	if _, err := a.TryAcquire("k"); !errors.Is(err, limit.ErrLimited) {
		t.Fatalf("node a over the cluster limit: err = %v", err)
	}
	if a.InUse("k") != 1 {
		t.Fatalf("a refused permit still counted locally: %d", a.InUse("k"))
	}
	// A waiter on a is woken when b releases.
	got := make(chan error, 1)
	go func() {
		p, err := a.Acquire(context.Background(), "k")
		if err == nil {
			p.Release()
		}
		got <- err
	}()
	waitFor(t, "store waiter", func() bool { return a.Totals().Waiting == 1 })
	pb.Release()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
	case <-time.After(time.Second): // far below the 1s poll of a notifying store
		t.Fatal("waiter not woken by the remote release")
	}
	pa.Release()
	assertIdle(t, a)
	assertIdle(t, b)
	if store.total() != 0 {
		t.Fatalf("store still counts %d permits", store.total())
	}
	if store.calls == 0 || store.tryCalls == 0 {
		t.Fatalf("Acquire should use Store.Acquire and TryAcquire Store.TryAcquire (calls %d, try %d)", store.calls, store.tryCalls)
	}
}

func TestStoreLocalLimitFirst(t *testing.T) {
	store := newClusterStore()
	l := newLimiter(t, limit.Config[string]{Policy: limit.Policy[string]{Permits: 1}, Store: store})
	p, _ := l.TryAcquire("k")
	before := store.tryCalls
	if _, err := l.TryAcquire("k"); !errors.Is(err, limit.ErrLimited) {
		t.Fatalf("err = %v", err)
	}
	if store.tryCalls != before {
		t.Fatal("the store was asked although this node alone is at the limit")
	}
	p.Release()
	assertIdle(t, l)
}

func TestStoreFailure(t *testing.T) {
	store := newClusterStore()
	l := newLimiter(t, limit.Config[string]{Policy: limit.Policy[string]{Permits: 4}, Store: store})
	boom := errors.New("redis away")
	store.fail = boom
	_, err := l.Acquire(context.Background(), "k")
	if !errors.Is(err, limit.ErrStore) || !errors.Is(err, boom) {
		t.Fatalf("err = %v, want ErrStore wrapping the cause", err)
	}
	assertIdle(t, l)
	if l.Totals().StoreFailed != 1 {
		t.Fatalf("StoreFailed = %d", l.Totals().StoreFailed)
	}
	store.fail = nil
	p, err := l.Acquire(context.Background(), "k")
	if err != nil {
		t.Fatalf("after recovery: %v", err)
	}
	p.Release()
	if store.total() != 0 {
		t.Fatal("store count not returned")
	}
}

// A key without a limit never reaches the Store: not when its permits are
// taken or given back, and not while the Store fails. Keys with a limit
// still do.
func TestStoreNotAskedForUnlimitedKeys(t *testing.T) {
	st := newClusterStore()
	st.fail = errors.New("redis down")
	l, err := limit.New(limit.Config[string]{
		Policy: limit.Policy[string]{
			Permits: -1,
			PermitsFor: func(key string) int {
				if key == "capped" {
					return 1
				}
				return 0 // Permits: unlimited
			},
		},
		Store: st,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var held []limit.Permit[string]
	for range 3 {
		p, err := l.Acquire(context.Background(), "free")
		if err != nil {
			t.Fatalf("Acquire of an unlimited key while the Store fails: %v", err)
		}
		held = append(held, p)
		if p, err = l.TryAcquire("free"); err != nil {
			t.Fatalf("TryAcquire of an unlimited key while the Store fails: %v", err)
		}
		held = append(held, p)
	}
	for _, p := range held {
		p.Release()
	}
	st.mu.Lock()
	calls, tries := st.calls, st.tryCalls
	_, released := st.held["free"] // a Release would have driven it negative
	st.mu.Unlock()
	if calls != 0 || tries != 0 || released {
		t.Fatalf("unlimited key: %d Acquire, %d TryAcquire calls and a Release on the Store (%v), want none", calls, tries, released)
	}
	if _, err := l.Acquire(context.Background(), "capped"); !errors.Is(err, limit.ErrStore) {
		t.Fatalf("capped key while the Store fails: %v, want ErrStore", err)
	}
	st.mu.Lock()
	calls = st.calls
	st.mu.Unlock()
	if calls != 1 {
		t.Fatalf("capped key: %d Store calls, want 1", calls)
	}
	if tot := l.Totals(); tot.InUse != 0 {
		t.Fatalf("%d permits left in use", tot.InUse)
	}
}
