package redisstore_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-a07d1050/portcullis/internal/redistest"
	"github.com/seed-a07d1050/portcullis/limit"
	"github.com/seed-a07d1050/portcullis/limit/redisstore"
	"github.com/seed-a07d1050/portcullis/rate"
)

// roundTrips counts the round trips a go-redis client makes: each command
// and each pipeline is one.
type roundTrips struct{ n atomic.Int64 }

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// BenchmarkAcquireRelease measures Limiter.Acquire + Permit.Release with
// the Redis Store against a local redis-server, beside the in-memory
// limiter (no Store) in the same run. Metrics: ops/s, and rtt/op, the
// Redis round trips per acquire+release (the acquire is one script call;
// releases are batched, so under parallel load they cost less than one).
func BenchmarkAcquireRelease(b *testing.B) {
	srv := redistest.Start(b)
	run := func(b *testing.B, parallel bool, withRedis bool) {
		var hook roundTrips
		var st *redisstore.Store[string]
		lc := limit.Config[string]{Policy: limit.Policy[string]{Permits: 1 << 20}}
		if withRedis {
			client := newClient(b, srv.Addr())
			client.AddHook(&hook)
			// A generous timeout so that the benchmark measures Redis, not
			// the node-local fallback of a call slowed past 50 ms.
			var err error
			st, err = redisstore.New[string](redisstore.Config{Client: client, Prefix: "bench:", Logger: quiet, Timeout: time.Second}, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { st.Close() })
			lc.Store = st
		}
		l, err := limit.New(lc)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { l.Close() })
		ctx := context.Background()
		var keys atomic.Int64
		start := time.Now()
		before := hook.n.Load()
		b.ReportAllocs()
		if parallel {
			b.SetParallelism(8) // 8 × GOMAXPROCS goroutines, as a server has
			b.RunParallel(func(pb *testing.PB) {
				key := "client-" + strconv.FormatInt(keys.Add(1)%8, 10)
				for pb.Next() {
					acquireRelease(b, l, ctx, key)
				}
			})
		} else {
			for b.Loop() {
				acquireRelease(b, l, ctx, "client")
			}
		}
		elapsed := time.Since(start)
		b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
		if withRedis {
			b.ReportMetric(float64(hook.n.Load()-before)/float64(b.N), "rtt/op")
			if n := st.Stats().Fallbacks; n != 0 {
				b.Fatalf("%d grants fell back to the node cap: not a measure of Redis", n)
			}
		}
	}
	b.Run("store=redis", func(b *testing.B) { run(b, false, true) })
	b.Run("store=memory", func(b *testing.B) { run(b, false, false) })
	b.Run("store=redis/parallel", func(b *testing.B) { run(b, true, true) })
	b.Run("store=memory/parallel", func(b *testing.B) { run(b, true, false) })
}

func acquireRelease(b *testing.B, l *limit.Limiter[string], ctx context.Context, key string) {
	p, err := l.Acquire(ctx, key)
	if err != nil {
		b.Fatal(err)
	}
	p.Release()
}

// BenchmarkTryAcquireCached measures the non-blocking path once the key's
// cluster count is known: no Redis call on the request path.
func BenchmarkTryAcquireCached(b *testing.B) {
	srv := redistest.Start(b)
	var hook roundTrips
	client := newClient(b, srv.Addr())
	client.AddHook(&hook)
	st, err := redisstore.New[string](redisstore.Config{Client: client, Prefix: "bench:", Logger: quiet}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	l, err := limit.New(limit.Config[string]{Policy: limit.Policy[string]{Permits: 1 << 20}, Store: st})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	acquireRelease(b, l, context.Background(), "client") // learn the count
	before := hook.n.Load()
	b.ReportAllocs()
	for b.Loop() {
		p, err := l.TryAcquire("client")
		if err != nil {
			b.Fatal(err)
		}
		p.Release()
	}
	b.ReportMetric(float64(hook.n.Load()-before)/float64(b.N), "rtt/op")
}

// BenchmarkRateReserve measures rate.Limiter.Reserve with a RateStore
// against a local redis-server, beside the in-memory limiter. Metrics:
// ns/op and rtt/op, the Redis round trips per decision (hooked on the
// client, flushes included), for a key under its rate (every decision
// admitted: one script each when exact, fewer with the fast path) and a
// key over it (refused from the known TAT: none).
func BenchmarkRateReserve(b *testing.B) {
	srv := redistest.Start(b)
	for _, tc := range []struct {
		name       string
		redis      bool
		localShare float64
		lim        rate.Limit
	}{
		{"store=none/key=under", false, 0, rate.Limit{Rate: rate.PerSecond(1e9), Burst: 1 << 20, Delay: rate.NoDelay}},
		{"store=redis/local=0/key=under", true, 0, rate.Limit{Rate: rate.PerSecond(1e6), Burst: 1 << 20, Delay: rate.NoDelay}},
		{"store=redis/local=0.1/key=under", true, 0.1, rate.Limit{Rate: rate.PerSecond(1e6), Burst: 99, Delay: rate.NoDelay}},
		{"store=redis/local=0/key=over", true, 0, rate.Limit{Rate: rate.PerMinute(1), Delay: rate.NoDelay}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var hook roundTrips
			cfg := rate.Config[string]{Rate: tc.lim.Rate, Burst: tc.lim.Burst, Delay: tc.lim.Delay}
			if tc.redis {
				client := newClient(b, srv.Addr())
				client.AddHook(&hook)
				st, err := redisstore.NewRate[string](redisstore.RateConfig{Client: client, Prefix: "bench:" + tc.name + ":",
					Logger: quiet, Timeout: time.Second, LocalShare: tc.localShare}, nil)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { st.Close() })
				cfg.Store = st
			}
			l, err := rate.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { l.Close() })
			ctx := context.Background()
			for b.Loop() {
				_, _ = l.Reserve(ctx, "203.0.113.7")
			}
			b.ReportMetric(float64(hook.n.Load())/float64(b.N), "rtt/op")
		})
	}
}
