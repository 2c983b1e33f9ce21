package rate_test

import (
	"net/netip"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	xrate "golang.org/x/time/rate"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/rate"
)

// The baselines run in the same benchmark as the limiter, so that their
// ratio can be read from one run on a noisy machine:
//   - xrate: golang.org/x/time/rate, one token bucket (no keys, so the
//     floor for a rate check with a real clock);
//   - mutexmap: the obvious keyed limiter, one mutex over a map of
//     x/time/rate limiters.

type mutexMap struct {
	mu sync.Mutex
	m  map[string]*xrate.Limiter
}

func (m *mutexMap) allow(k string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.m[k]
	if l == nil {
		l = xrate.NewLimiter(1e9, 1<<20)
		m.m[k] = l
	}
	return l.Allow()
}

func newBenchLimiter(b *testing.B) *rate.Limiter[string] {
	l, err := rate.New(rate.Config[string]{Rate: rate.PerSecond(1e9), Burst: 1 << 20, Delay: rate.NoDelay})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l
}

// BenchmarkAllowOneKey is the check on one key: the figure the ≤ 60 ns
// and 0 allocations target is about.
func BenchmarkAllowOneKey(b *testing.B) {
	b.Run("impl=rate", func(b *testing.B) {
		l := newBenchLimiter(b)
		b.ReportAllocs()
		for b.Loop() {
			if !l.Allow("203.0.113.7").Allowed() {
				b.Fatal("refused")
			}
		}
	})
	b.Run("impl=xrate", func(b *testing.B) {
		l := xrate.NewLimiter(1e9, 1<<20)
		b.ReportAllocs()
		for b.Loop() {
			if !l.Allow() {
				b.Fatal("refused")
			}
		}
	})
	b.Run("impl=mutexmap", func(b *testing.B) {
		m := &mutexMap{m: map[string]*xrate.Limiter{}}
		b.ReportAllocs()
		for b.Loop() {
			if !m.allow("203.0.113.7") {
				b.Fatal("refused")
			}
		}
	})
}

// BenchmarkAllowDistinctKeysParallel has every goroutine work on its own
// key: the limiter should scale with GOMAXPROCS (-cpu 1,2); the single-lock
// baseline cannot.
func BenchmarkAllowDistinctKeysParallel(b *testing.B) {
	var next atomic.Int64
	key := func() string { return "client-" + strconv.FormatInt(next.Add(1), 10) }
	b.Run("impl=rate", func(b *testing.B) {
		l := newBenchLimiter(b)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			k := key()
			for pb.Next() {
				if !l.Allow(k).Allowed() {
					b.Fatal("refused")
				}
			}
		})
	})
	b.Run("impl=mutexmap", func(b *testing.B) {
		m := &mutexMap{m: map[string]*xrate.Limiter{}}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			k := key()
			for pb.Next() {
				if !m.allow(k) {
					b.Fatal("refused")
				}
			}
		})
	})
}

// BenchmarkAllowManyKeys cycles over 100 000 busy keys, so that lookups miss
// the caches as they do under a spread-out flood.
func BenchmarkAllowManyKeys(b *testing.B) {
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = "198.51." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)
	}
	l := newBenchLimiter(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		l.Allow(keys[i])
		if i++; i == len(keys) {
			i = 0
		}
	}
}

// BenchmarkMemoryPerBusyKey reports the heap a limiter uses for each busy
// key (string keys of 12 bytes, whose own bytes are not counted), as
// B/key, for 100 000 keys and for 70 000 (a table size's other end).
func BenchmarkMemoryPerBusyKey(b *testing.B) {
	for _, n := range []int{100_000, 70_000} {
		b.Run("keys="+strconv.Itoa(n), func(b *testing.B) {
			keys := make([]string, n)
			for i := range keys {
				keys[i] = "198.51." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)
			}
			for b.Loop() {
				l, err := rate.New(rate.Config[string]{Rate: rate.PerSecond(1), Burst: 10})
				if err != nil {
					b.Fatal(err)
				}
				before := heapInUse()
				for _, k := range keys {
					l.Allow(k)
				}
				after := heapInUse()
				if busy := l.Totals().Keys; busy != n {
					b.Fatalf("%d busy keys, want %d", busy, n)
				}
				b.ReportMetric(float64(after-before)/float64(n), "B/key")
				l.Close()
			}
		})
	}
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkMemoryPerBusyClientKey is BenchmarkMemoryPerBusyKey with
// clientkey.Key, the key of the accept and QUIC layers (32 bytes).
func BenchmarkMemoryPerBusyClientKey(b *testing.B) {
	const n = 100_000
	keys := make([]clientkey.Key, n)
	for i := range keys {
		keys[i] = clientkey.FromAddr(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}))
	}
	for b.Loop() {
		l, err := rate.New(rate.Config[clientkey.Key]{Rate: rate.PerSecond(1), Burst: 10, Hash: clientkey.Key.Hash})
		if err != nil {
			b.Fatal(err)
		}
		before := heapInUse()
		for _, k := range keys {
			l.Allow(k)
		}
		after := heapInUse()
		if busy := l.Totals().Keys; busy != n {
			b.Fatalf("%d busy keys, want %d", busy, n)
		}
		b.ReportMetric(float64(after-before)/n, "B/key")
		l.Close()
	}
}
