package limit_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/seed-a07d1050/portcullis/limit"
)

// busyLimiter returns a limiter holding n keys busy with random numbers of
// permits (1 to 8) and refusals, and the permits, to release.
func busyLimiter(tb testing.TB, n int, seed uint64) (*limit.Limiter[string], []limit.Permit[string]) {
	tb.Helper()
	l, err := limit.New(limit.Config[string]{Policy: limit.Policy[string]{Permits: 8}})
	if err != nil {
		tb.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	var held []limit.Permit[string]
	for i := range n {
		key := fmt.Sprintf("k%d", i)
		for range 1 + rng.IntN(8) {
			p, err := l.TryAcquire(key)
			if err != nil {
				tb.Fatal(err)
			}
			held = append(held, p)
		}
		if rng.IntN(4) == 0 {
			for range 8 {
				if p, err := l.TryAcquire(key); err == nil {
					held = append(held, p)
				}
			}
		}
	}
	return l, held
}

// Snapshot(top) lists the same busyness, busiest first, as the first top
// keys of the whole list: its heap keeps exactly the busiest.
func TestSnapshotTopIsTheBusiest(t *testing.T) {
	for _, tc := range []struct{ keys, top int }{{0, 3}, {1, 3}, {5, 5}, {50, 1}, {50, 7}, {300, 10}, {300, 299}, {300, 1000}} {
		t.Run(fmt.Sprintf("%d keys top %d", tc.keys, tc.top), func(t *testing.T) {
			l, held := busyLimiter(t, tc.keys, uint64(tc.keys*31+tc.top))
			defer func() {
				for _, p := range held {
					p.Release()
				}
			}()
			all := l.Snapshot(0)
			top := l.Snapshot(tc.top)
			if len(all.Keys) != tc.keys {
				t.Fatalf("Snapshot(0) lists %d keys, want %d", len(all.Keys), tc.keys)
			}
			if top.Totals != all.Totals {
				t.Fatalf("totals differ: %+v and %+v", top.Totals, all.Totals)
			}
			want := all.Keys[:min(tc.top, len(all.Keys))]
			busyness := func(ks []limit.KeyStats[string]) [][3]uint64 {
				var out [][3]uint64
				for _, k := range ks {
					out = append(out, [3]uint64{uint64(k.InUse), uint64(k.Waiting), k.Refused})
				}
				return out
			}
			if got, w := busyness(top.Keys), busyness(want); !slices.Equal(got, w) {
				t.Fatalf("Snapshot(%d) busyness %v, want %v", tc.top, got, w)
			}
			for i := 1; i < len(all.Keys); i++ {
				a, b := all.Keys[i-1], all.Keys[i]
				if a.InUse < b.InUse || a.InUse == b.InUse && (a.Waiting < b.Waiting || a.Waiting == b.Waiting && a.Refused < b.Refused) {
					t.Fatalf("Snapshot(0) not busiest first at %d: %+v before %+v", i, a, b)
				}
			}
		})
	}
}

// BenchmarkSnapshotTop10 is what the live page asks every second of a
// limiter with many busy keys.
func BenchmarkSnapshotTop10(b *testing.B) {
	for _, n := range []int{1000, 100000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			l, _ := busyLimiter(b, n, 1)
			b.ReportAllocs()
			for b.Loop() {
				if s := l.Snapshot(10); len(s.Keys) != 10 {
					b.Fatalf("%d keys", len(s.Keys))
				}
			}
		})
	}
}
