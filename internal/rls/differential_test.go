package rls

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// fixedWindow is envoyproxy/ratelimit's counting, reimplemented small: one
// counter per key and window of the unit, windows aligned on multiples of
// the unit; a hit adds to the counter whatever the answer, and is over the
// limit when the counter then exceeds requests_per_unit.
type fixedWindow struct {
	limit  int
	unit   time.Duration
	phase  time.Duration // where the test's time 0 falls in a window
	counts map[int64]int
}

func (f *fixedWindow) hit(at time.Duration, hits int) bool {
	w := int64((at + f.phase) / f.unit)
	f.counts[w] += hits
	return f.counts[w] <= f.limit
}

func ruleFile(t testing.TB, n int, unit string) *Config {
	t.Helper()
	cfg, err := Parse(map[string][]byte{"r.yaml": fmt.Appendf(nil,
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: %s, requests_per_unit: %d}\n", unit, n)})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Where docs/envoy.md says the two agree: a key whose requests come in
// bursts (all at one instant) at least one unit apart gets the same
// answers from both, each burst's first requests_per_unit OK and the rest
// OVER_LIMIT, wherever the bursts fall in the reference's windows.
func TestFixedWindowAgreement(t *testing.T) {
	for _, tc := range []struct {
		n    int
		unit string
		per  time.Duration
	}{{5, "second", time.Second}, {3, "minute", time.Minute}, {20, "hour", time.Hour}} {
		t.Run(fmt.Sprint(tc.n, "/", tc.unit), func(t *testing.T) {
			h := start(t, ruleFile(t, tc.n, tc.unit), nil, ServerOptions{})
			rng := rand.New(rand.NewPCG(uint64(tc.n), 41))
			ref := &fixedWindow{limit: tc.n, unit: tc.per, phase: time.Duration(rng.Int64N(int64(tc.per))), counts: map[int64]int{}}
			var now time.Duration
			for burst := range 30 {
				k := 1 + rng.IntN(2*tc.n)
				for i := range k {
					want := ref.hit(now, 1)
					r := h.ask(t, "d", 0, desc("k", "v"))
					if got := r.OverallCode == ok; got != want {
						t.Fatalf("burst %d (%d requests at %v), request %d: ours OK=%v, the reference's %v", burst, k, now, i, got, want)
					}
				}
				gap := tc.per + time.Duration(rng.Int64N(int64(2*tc.per)))
				h.clock.Advance(gap)
				now += gap
			}
		})
	}
}

// The window edge: the reference lets a client send requests_per_unit
// just before a window ends and as many again just after, twice its limit
// within a few milliseconds. Portcullis admits the limit once; the second
// lot only as the rate refills it.
func TestWindowEdgeBurst(t *testing.T) {
	const n = 10
	h := start(t, ruleFile(t, n, "second"), nil, ServerOptions{})
	// Time 0 is 2 ms before the reference's window boundary.
	ref := &fixedWindow{limit: n, unit: time.Second, phase: time.Second - 2*time.Millisecond, counts: map[int64]int{}}
	refOK, ourOK := 0, 0
	for _, at := range []time.Duration{0, 4 * time.Millisecond} {
		if at > 0 {
			h.clock.Advance(at)
		}
		for range n {
			if ref.hit(at, 1) {
				refOK++
			}
			if h.ask(t, "d", 0, desc("k", "v")).OverallCode == ok {
				ourOK++
			}
		}
	}
	if refOK != 2*n {
		t.Errorf("the fixed window admitted %d in 4 ms, want %d (twice its limit)", refOK, 2*n)
	}
	if ourOK != n {
		t.Errorf("Portcullis admitted %d in 4 ms, want %d (its limit, nothing refilled yet)", ourOK, n)
	}
	// Over the next second, as the rate refills: one per 100 ms.
	got := 0
	for range 10 {
		h.clock.Advance(100 * time.Millisecond)
		for range 3 {
			if h.ask(t, "d", 0, desc("k", "v")).OverallCode == ok {
				got++
			}
		}
	}
	if got != n {
		t.Errorf("refilled over one second: %d admitted, want %d", got, n)
	}
}
