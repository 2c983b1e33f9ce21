package rate

import (
	"hash/maphash"
	"math/rand/v2"
	"strconv"
	"testing"
)

// The table against a map: random inserts, updates, expiries, sweeps and
// shrinks keep exactly the live keys findable.
func TestTableAgainstMap(t *testing.T) {
	seed := maphash.MakeSeed()
	rng := rand.New(rand.NewPCG(1, 2))
	var tb table[string]
	ref := map[string]int64{}
	now := int64(1000)
	// Few tag bits, so that long runs and wrap-around occur.
	hash := func(k string) uint64 { return maphash.String(seed, k) & 0x0000_00ff_0000_0000 }
	for step := range 200_000 {
		k := strconv.Itoa(rng.IntN(3000))
		tag := tagOf(hash(k))
		switch op := rng.IntN(100); {
		case op < 60:
			tat := now + int64(rng.IntN(500))
			if i := tb.find(tag, k); i >= 0 {
				tb.entries[i].tat = tat
			} else {
				tb.insert(tag, k, tat, now)
			}
			ref[k] = tat
		case op < 95:
			now += int64(rng.IntN(5))
		case op < 99:
			tb.sweep(now, rng.IntN(len(tb.tags)+1), rng.IntN(64))
		default:
			tb.sweep(now, 0, len(tb.tags))
			tb.shrinkIfSparse()
		}
		if step%1000 == 0 {
			for k, tat := range ref {
				i := tb.find(tagOf(hash(k)), k)
				switch {
				case tat > now && (i < 0 || tb.entries[i].tat != tat):
					t.Fatalf("step %d: live key %s lost (slot %d)", step, k, i)
				case i >= 0 && tb.entries[i].tat != tat:
					t.Fatalf("step %d: key %s has TAT %d, want %d", step, k, tb.entries[i].tat, tat)
				}
			}
			n := 0
			for _, tag := range tb.tags {
				if tag != 0 {
					n++
				}
			}
			if n != tb.n || 8*tb.n > 7*len(tb.tags) {
				t.Fatalf("step %d: n=%d counted %d of %d slots", step, tb.n, n, len(tb.tags))
			}
		}
	}
}
