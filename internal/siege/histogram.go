package siege

import (
	"math"
	"math/bits"
	"time"
)

// histogram is a fixed-size log-linear latency histogram: values are in
// microseconds; each power-of-two range is split into subBuckets equal
// buckets, so a quantile is off by at most 1/subBuckets of its value (1.6%)
// and memory stays constant however many requests a run makes.
type histogram struct {
	counts [histBuckets]uint64
	total  uint64
	max    time.Duration
}

const (
	subBucketBits = 6
	subBuckets    = 1 << subBucketBits
	// maxExponent covers 2^27 µs ≈ 134 s, above the longest request timeout.
	maxExponent = 27
	histBuckets = (maxExponent - subBucketBits + 2) * subBuckets
)

// bucketOf maps microseconds to a bucket index. Values below subBuckets are
// exact; larger ones keep their top subBucketBits+1 bits.
func bucketOf(us uint64) int {
	if us < subBuckets {
		return int(us)
	}
	exp := bits.Len64(us) - 1 - subBucketBits // ≥ 0
	if exp > maxExponent-subBucketBits {
		return histBuckets - 1
	}
	mantissa := us >> exp // in [subBuckets, 2*subBuckets)
	return (exp+1)*subBuckets + int(mantissa-subBuckets)
}

// bucketUpper is the largest value, in microseconds, that falls in bucket i.
func bucketUpper(i int) uint64 {
	if i < subBuckets {
		return uint64(i)
	}
	exp := i/subBuckets - 1
	mantissa := uint64(i%subBuckets + subBuckets)
	return (mantissa+1)<<exp - 1
}

func (h *histogram) record(d time.Duration) {
	us := max(d.Microseconds(), 0)
	h.counts[bucketOf(uint64(us))]++
	h.total++
	h.max = max(h.max, d)
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.total += o.total
	h.max = max(h.max, o.max)
}

// quantile returns the upper bound of the bucket holding the q-th value
// (0 < q ≤ 1), capped at the largest value recorded, or 0 when empty.
func (h *histogram) quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	// Nearest rank: the smallest value with at least q of all values at or
	// below it. The epsilon keeps 0.999*1000 from rounding up to 1000.
	rank := uint64(math.Ceil(q*float64(h.total) - 1e-9))
	rank = min(max(rank, 1), h.total)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(time.Duration(bucketUpper(i))*time.Microsecond, h.max)
		}
	}
	return h.max
}
