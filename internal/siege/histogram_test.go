package siege

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestBucketBounds(t *testing.T) {
	check := func(us uint64) {
		i := bucketOf(us)
		if i < 0 || i >= histBuckets {
			t.Fatalf("bucketOf(%d) = %d, outside [0, %d)", us, i, histBuckets)
		}
		if i == histBuckets-1 {
			return // the overflow bucket holds everything above its range
		}
		if up := bucketUpper(i); up < us {
			t.Fatalf("bucketUpper(bucketOf(%d)) = %d < value", us, up)
		}
		if i > 0 && bucketUpper(i-1) >= us {
			t.Fatalf("bucketUpper(%d) = %d ≥ %d, which went to the next bucket", i-1, bucketUpper(i-1), us)
		}
		if width := bucketUpper(i) - lowerOf(i); float64(width) > float64(us)/subBuckets {
			t.Fatalf("bucket %d for %d µs is %d wide, over 1/%d of the value", i, us, width, subBuckets)
		}
	}
	for us := range uint64(100_000) {
		check(us)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100_000 {
		check(rng.Uint64N(1 << 40))
	}
	if i := bucketOf(math.MaxUint64); i != histBuckets-1 {
		t.Errorf("bucketOf(max) = %d, want the last bucket", i)
	}
}

func lowerOf(i int) uint64 {
	if i == 0 {
		return 0
	}
	return bucketUpper(i-1) + 1
}

// TestQuantileAgainstSort holds the histogram to the exact nearest-rank
// quantile of the sorted samples.
func TestQuantileAgainstSort(t *testing.T) {
	tests := []struct {
		name string
		n    int
		gen  func(*rand.Rand) time.Duration
	}{
		{name: "one sample", n: 1, gen: func(*rand.Rand) time.Duration { return 1500 * time.Microsecond }},
		{name: "constant", n: 1000, gen: func(*rand.Rand) time.Duration { return 3 * time.Millisecond }},
		{name: "uniform ms", n: 5000, gen: func(r *rand.Rand) time.Duration { return time.Duration(r.Int64N(int64(10 * time.Millisecond))) }},
		{name: "log-uniform µs to s", n: 20000, gen: func(r *rand.Rand) time.Duration {
			return time.Duration(math.Pow(10, 3+r.Float64()*6))
		}},
		{name: "bimodal with a tail", n: 10000, gen: func(r *rand.Rand) time.Duration {
			if r.IntN(100) == 0 {
				return 2*time.Second + time.Duration(r.Int64N(int64(time.Second)))
			}
			return time.Millisecond + time.Duration(r.Int64N(int64(time.Millisecond)))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, 4))
			var h histogram
			samples := make([]time.Duration, tc.n)
			for i := range samples {
				samples[i] = tc.gen(rng)
				h.record(samples[i])
			}
			slices.Sort(samples)
			for _, q := range []float64{0.5, 0.9, 0.99, 0.999, 1} {
				want := samples[int(math.Ceil(q*float64(tc.n)-1e-9))-1].Truncate(time.Microsecond)
				got := h.quantile(q)
				if got < want || float64(got) > float64(want)*(1+1.0/subBuckets)+float64(time.Microsecond) {
					t.Errorf("q%v = %v, want %v within 1/%d", q, got, want, subBuckets)
				}
			}
			if h.max != samples[tc.n-1] {
				t.Errorf("max = %v, want %v", h.max, samples[tc.n-1])
			}
		})
	}
}

func TestHistogramMergeAndEmpty(t *testing.T) {
	var empty histogram
	if got := empty.quantile(0.99); got != 0 {
		t.Errorf("empty quantile = %v, want 0", got)
	}
	var a, b, all histogram
	for i := range 1000 {
		d := time.Duration(i) * 37 * time.Microsecond
		all.record(d)
		if i%3 == 0 {
			a.record(d)
		} else {
			b.record(d)
		}
	}
	a.merge(&b)
	if a != all {
		t.Error("merging two halves differs from recording all in one")
	}
	var neg histogram
	neg.record(-time.Second)
	if neg.total != 1 || neg.quantile(0.5) != 0 {
		t.Errorf("a negative duration should count as 0, got total %d q50 %v", neg.total, neg.quantile(0.5))
	}
}
