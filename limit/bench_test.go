package limit_test

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sync/semaphore"

	"github.com/seed-a07d1050/portcullis/limit"
)

// The baselines run in the same benchmark as the limiter, so that their
// ratio can be read from one run on a noisy machine:
//   - semaphore: golang.org/x/sync/semaphore, one weighted semaphore (it
//     has no keys, so it is the floor for a counting semaphore);
//   - mutexmap: the obvious keyed counter, one mutex over a map.

type mutexMap struct {
	mu    sync.Mutex
	limit int
	m     map[string]int
}

func (m *mutexMap) tryAcquire(k string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m[k] >= m.limit {
		return false
	}
	m.m[k]++
	return true
}

func (m *mutexMap) release(k string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m[k]--; m.m[k] == 0 {
		delete(m.m, k)
	}
}

func newBenchLimiter(b *testing.B) *limit.Limiter[string] {
	l, err := limit.New(limit.Config[string]{Policy: limit.Policy[string]{Permits: 1 << 20}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l
}

func BenchmarkOneKey(b *testing.B) {
	b.Run("impl=limit", func(b *testing.B) {
		l := newBenchLimiter(b)
		b.ReportAllocs()
		for b.Loop() {
			p, err := l.TryAcquire("203.0.113.7")
			if err != nil {
				b.Fatal(err)
			}
			p.Release()
		}
	})
	b.Run("impl=semaphore", func(b *testing.B) {
		s := semaphore.NewWeighted(1 << 20)
		b.ReportAllocs()
		for b.Loop() {
			if !s.TryAcquire(1) {
				b.Fatal("refused")
			}
			s.Release(1)
		}
	})
	b.Run("impl=mutexmap", func(b *testing.B) {
		m := &mutexMap{limit: 1 << 20, m: map[string]int{}}
		b.ReportAllocs()
		for b.Loop() {
			if !m.tryAcquire("203.0.113.7") {
				b.Fatal("refused")
			}
			m.release("203.0.113.7")
		}
	})
}

// BenchmarkDistinctKeysParallel has every goroutine work on its own key.
// The limiter should scale with GOMAXPROCS; the single-lock baselines
// cannot.
func BenchmarkDistinctKeysParallel(b *testing.B) {
	var next atomic.Int64
	key := func() string { return "client-" + strconv.FormatInt(next.Add(1), 10) }
	b.Run("impl=limit", func(b *testing.B) {
		l := newBenchLimiter(b)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			k := key()
			for pb.Next() {
				p, err := l.TryAcquire(k)
				if err != nil {
					b.Fatal(err)
				}
				p.Release()
			}
		})
	})
	b.Run("impl=semaphore", func(b *testing.B) {
		s := semaphore.NewWeighted(1 << 20)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if !s.TryAcquire(1) {
					b.Fatal("refused")
				}
				s.Release(1)
			}
		})
	})
	b.Run("impl=mutexmap", func(b *testing.B) {
		m := &mutexMap{limit: 1 << 20, m: map[string]int{}}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			k := key()
			for pb.Next() {
				if !m.tryAcquire(k) {
					b.Fatal("refused")
				}
				m.release(k)
			}
		})
	})
}

// BenchmarkHotKeyParallel has every goroutine work on the same key.
func BenchmarkHotKeyParallel(b *testing.B) {
	b.Run("impl=limit", func(b *testing.B) {
		l := newBenchLimiter(b)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				p, err := l.TryAcquire("hot")
				if err != nil {
					b.Fatal(err)
				}
				p.Release()
			}
		})
	})
	b.Run("impl=semaphore", func(b *testing.B) {
		s := semaphore.NewWeighted(1 << 20)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if !s.TryAcquire(1) {
					b.Fatal("refused")
				}
				s.Release(1)
			}
		})
	})
	b.Run("impl=mutexmap", func(b *testing.B) {
		m := &mutexMap{limit: 1 << 20, m: map[string]int{}}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if !m.tryAcquire("hot") {
					b.Fatal("refused")
				}
				m.release("hot")
			}
		})
	})
}

// BenchmarkAcquireWithContext measures the blocking entry point when it
// does not have to wait.
func BenchmarkAcquireWithContext(b *testing.B) {
	l := newBenchLimiter(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		p, err := l.Acquire(ctx, "k")
		if err != nil {
			b.Fatal(err)
		}
		p.Release()
	}
}

// BenchmarkMemoryPerBusyKey reports the heap a limiter uses for each key
// holding one permit (string keys of 12 bytes, whose own bytes are not
// counted), as B/key.
func BenchmarkMemoryPerBusyKey(b *testing.B) {
	const n = 100_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "198.51." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)
	}
	held := make([]limit.Permit[string], n)
	for b.Loop() {
		l := newBenchLimiter(b)
		before := heapInUse()
		for i, k := range keys {
			held[i], _ = l.TryAcquire(k)
		}
		after := heapInUse()
		b.ReportMetric(float64(after-before)/n, "B/key")
		for _, p := range held {
			p.Release()
		}
		l.Close()
	}
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
