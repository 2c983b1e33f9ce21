package limit_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/limit"
)

// TestStress has many goroutines acquire, release, cancel and time out at
// random on few and on many keys, checking after every grant that no key
// holds more than its permits, and at the end that everything is back to
// zero.
func TestStress(t *testing.T) {
	for _, keys := range []int{3, 500} {
		t.Run(fmt.Sprintf("keys=%d", keys), func(t *testing.T) { stress(t, keys) })
	}
}

func stress(t *testing.T, nkeys int) {
	permitsOf := func(k int) int { return k%4 + 1 } // 1..4 permits per key
	l := newLimiter(t, limit.Config[int]{
		Policy: limit.Policy[int]{
			PermitsFor:   permitsOf,
			QueueSize:    3,
			QueueTimeout: 2 * time.Millisecond,
			ReclaimAfter: -1,
		},
	})
	holders := make([]atomic.Int32, nkeys)
	var granted, failed atomic.Int64
	const workers, ops = 32, 400
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for range ops {
				key := rng.IntN(nkeys)
				var p limit.Permit[int]
				var err error
				switch rng.IntN(3) {
				case 0:
					p, err = l.TryAcquire(key)
				case 1:
					p, err = l.Acquire(context.Background(), key)
				case 2:
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(500))*time.Microsecond)
					p, err = l.Acquire(ctx, key)
					cancel()
				}
				if err != nil {
					if !isExpected(err) {
						t.Errorf("unexpected error: %v", err)
					}
					failed.Add(1)
					continue
				}
				granted.Add(1)
				if n := holders[key].Add(1); int(n) > permitsOf(key) {
					t.Errorf("key %d held by %d, limit %d", key, n, permitsOf(key))
				}
				if rng.IntN(4) == 0 {
					time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
				}
				holders[key].Add(-1)
				p.Release()
				if rng.IntN(8) == 0 {
					p.Release() // a second release must not count
				}
			}
		})
	}
	wg.Wait()
	assertIdle(t, l)
	tot := l.Totals()
	if int64(tot.Granted) != granted.Load() {
		t.Fatalf("Granted = %d, callers saw %d", tot.Granted, granted.Load())
	}
	if refusals := int64(tot.Refused + tot.QueueFull + tot.QueueTimeouts + tot.Abandoned); refusals < failed.Load() {
		t.Fatalf("refusals counted %d < failures seen %d", refusals, failed.Load())
	}
	t.Logf("granted %d, failed %d, totals %+v", granted.Load(), failed.Load(), tot)
}

func isExpected(err error) bool {
	return errors.Is(err, limit.ErrLimited) || errors.Is(err, limit.ErrQueueFull) ||
		errors.Is(err, limit.ErrQueueTimeout) || errors.Is(err, context.DeadlineExceeded)
}
