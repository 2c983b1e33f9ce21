package redisstore

import (
	"sync/atomic"
	"time"
)

// latencyBounds are the upper bounds, in seconds, of the latency buckets.
var latencyBounds = [...]float64{0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25}

// LatencyBounds returns the upper bounds, in seconds, of the buckets of
// [Histogram] in a new slice: 0.25 ms to 250 ms; a last bucket (+Inf)
// follows them.
func LatencyBounds() []float64 { return append([]float64(nil), latencyBounds[:]...) }

// CallStats counts the Redis round trips of one kind.
type CallStats struct {
	Calls  uint64 // round trips started (a pipeline is one)
	Errors uint64 // of which failed: error reply, timeout, connection lost
}

// Histogram is a latency histogram with the buckets of [LatencyBounds].
type Histogram struct {
	// Counts[i] is how many calls took at most LatencyBounds()[i] seconds
	// and more than the bound before it; the last element counts the rest
	// (+Inf).
	Counts []uint64
	Count  uint64  // all calls
	Sum    float64 // their total duration, in seconds
}

// Stats is a snapshot of a Store's counters, for metrics. Counters only
// grow; Breaker, Keys and Held are current values.
type Stats struct {
	Acquire   CallStats // acquire scripts, on the request path
	Sync      CallStats // pipelines of batched releases and TryAcquire grants
	Heartbeat CallStats // heartbeat pipelines and breaker probes (PING)

	// Latency covers every round trip counted above.
	Latency Histogram

	// Fallbacks counts permits granted by the node-local cap, without an
	// answer from Redis, under the Open policy. FallbackRefusals counts
	// requests that cap refused.
	Fallbacks        uint64
	FallbackRefusals uint64

	// Unavailable counts requests refused with [ErrUnavailable] under the
	// Closed policy.
	Unavailable uint64

	// Cached counts TryAcquire decisions (grants and refusals) made from
	// the last cluster count Redis returned for the key.
	Cached uint64

	// Notifications counts release notifications from other nodes that
	// woke this node's waiters.
	Notifications uint64

	// Reused counts Acquires granted without a round trip by taking back
	// a permit this node had released and not yet sent (still counted
	// for it in Redis; see Config.ReleaseHold): exact, and free.
	Reused uint64

	// Prefetches counts this Store's acquire scripts sent as spares in
	// another Store's pipeline (see Config.Prefetch and [Store.Spare]);
	// they are not round trips of this Store. PrefetchGrants counts those
	// Redis granted; the next Acquire of the key takes such a spare back
	// (counted in Reused) or the release batch sends it.
	Prefetches     uint64
	PrefetchGrants uint64

	Breaker      BreakerState // now
	BreakerOpens uint64       // times the breaker opened

	Keys int // keys this node keeps state for (held, waited on, or to resync)
	Held int // permits this node holds through the Store
}

// op names the kind of a Redis round trip.
type op int

const (
	opAcquire op = iota
	opSync
	opHeartbeat
	numOps
)

// counters are the Store's live counters.
type counters struct {
	calls, errors    [numOps]atomic.Uint64
	buckets          [len(latencyBounds) + 1]atomic.Uint64
	latencyNanos     atomic.Int64
	fallbacks        atomic.Uint64
	fallbackRefusals atomic.Uint64
	unavailable      atomic.Uint64
	cached           atomic.Uint64
	notifications    atomic.Uint64
	reused           atomic.Uint64
	prefetches       atomic.Uint64
	prefetchGrants   atomic.Uint64
}

// call records one round trip of kind o that took d and ended with err.
func (c *counters) call(o op, d time.Duration, err error) {
	c.calls[o].Add(1)
	if err != nil {
		c.errors[o].Add(1)
	}
	sec := d.Seconds()
	i := 0
	for i < len(latencyBounds) && sec > latencyBounds[i] {
		i++
	}
	c.buckets[i].Add(1)
	c.latencyNanos.Add(int64(d))
}

func (c *counters) snapshot(st *Stats) {
	st.Acquire = CallStats{c.calls[opAcquire].Load(), c.errors[opAcquire].Load()}
	st.Sync = CallStats{c.calls[opSync].Load(), c.errors[opSync].Load()}
	st.Heartbeat = CallStats{c.calls[opHeartbeat].Load(), c.errors[opHeartbeat].Load()}
	st.Latency.Counts = make([]uint64, len(c.buckets))
	for i := range c.buckets {
		n := c.buckets[i].Load()
		st.Latency.Counts[i] = n
		st.Latency.Count += n
	}
	st.Latency.Sum = time.Duration(c.latencyNanos.Load()).Seconds()
	st.Fallbacks = c.fallbacks.Load()
	st.FallbackRefusals = c.fallbackRefusals.Load()
	st.Unavailable = c.unavailable.Load()
	st.Cached = c.cached.Load()
	st.Notifications = c.notifications.Load()
	st.Reused = c.reused.Load()
	// Grants first: a prefetch is counted before its grant, so the
	// snapshot never has more grants than prefetches.
	st.PrefetchGrants = c.prefetchGrants.Load()
	st.Prefetches = c.prefetches.Load()
}
