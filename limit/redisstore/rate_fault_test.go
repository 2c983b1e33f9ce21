package redisstore_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/redistest"
	"github.com/seed-a07d1050/portcullis/limit/redisstore"
	"github.com/seed-a07d1050/portcullis/rate"
)

// The local fast path holds its stated bound while the round trip is slow:
// three nodes with local_share 0.5 over a burst of 10 (L = 5 each), Redis
// behind a proxy adding 20 ms each way, admit at most (Burst+1) + N·L = 25
// of a burst sent by 8 goroutines per node, however many arrive while a
// call is in flight. (Before the fix, a node forgot what it had sent while
// the call was in flight and admitted L more locally on every round trip:
// 125 of the 240 offered here in one run.) The rate is 1 a minute, so nothing
// refills during the test.
func TestRateLocalShareBoundUnderSlowRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	px := redistest.NewProxy(t, srv.Addr())
	px.SetDelay(20 * time.Millisecond)
	lim := rate.Limit{Rate: rate.PerMinute(1), Burst: 9, Delay: rate.NoDelay}
	const nodes, share, perNode, workers = 3, 0.5, 80, 8
	var stores []*redisstore.RateStore[string]
	for range nodes {
		st, err := redisstore.NewRate[string](redisstore.RateConfig{
			Client: newClient(t, px.Addr()), Prefix: "slowrt:", LocalShare: share,
			Timeout: 2 * time.Second, Logger: quiet,
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		stores = append(stores, st)
	}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for _, st := range stores {
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range perNode / workers {
					ok, _, err := st.Reserve(context.Background(), "k", lim)
					if err != nil {
						t.Errorf("Reserve: %v", err)
						return
					}
					if ok {
						admitted.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	local := int(float64(lim.Burst+1) * share)
	bound := int64(lim.Burst + 1 + nodes*local)
	t.Logf("admitted %d of %d offered; bound (Burst+1) + N·L = %d", admitted.Load(), nodes*perNode, bound)
	if admitted.Load() > bound {
		t.Fatalf("%d nodes admitted %d of one burst; the local_share bound is %d", nodes, admitted.Load(), bound)
	}
	if admitted.Load() < int64(lim.Burst+1) {
		t.Fatalf("admitted %d, fewer than the burst of %d", admitted.Load(), lim.Burst+1)
	}
}
