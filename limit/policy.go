package limit

import (
	"fmt"
	"math"
	"time"
)

// Unlimited is the number of permits that means no limit: a key with it is
// never refused, never waits and is never asked of a Store, but its permits
// are still counted (Snapshot, InUse).
const Unlimited = -1

// MaxPermits is the largest finite number of permits a key may have.
const MaxPermits = math.MaxInt32 - 1

// A Policy is what a limit allows each key: how many permits it may hold
// at once, which keys get their own number, whether and how long a request
// over the limit waits, whether the limit is enforced or only measured,
// and how long a permit may be held. It is the one shape of a limit in
// every layer: [Config] embeds it, and so do httplimit.Config,
// grpclimit.Config and connlimit.Config (each names it Policy), so a field
// means the same wherever it is set.
//
// Every number of permits (Permits, an Overrides value, a PermitsFor
// answer) reads the same way: zero means the default, [Unlimited] (-1)
// means no limit, other negative values are invalid, and at most
// [MaxPermits]. The zero Policy is valid: 64 permits per key, no override,
// no queue, enforced, permits reclaimed after 10 minutes. The layer that
// takes a Policy copies it, its map included; changing it afterwards has
// no effect.
type Policy[K comparable] struct {
	// Permits is how many permits one key may hold at once: requests,
	// calls or connections, as the layer counts them. Zero means 64
	// ([DefaultPermits]); Unlimited means no limit (still counted); other
	// negative values are invalid. At most MaxPermits.
	Permits int

	// Overrides gives keys their own number of permits, for example
	// {"batch": 32}: a value means what Permits means, zero being Permits
	// itself. Keys are written as the layer's key function produces them.
	// Nil or empty means none.
	Overrides map[K]int

	// PermitsFor computes the permits of a key not in Overrides (Overrides
	// wins for the keys it lists). Its answer means what an Overrides value
	// means; since it cannot fail, an answer below Unlimited is clamped to
	// Unlimited and one above MaxPermits to unlimited. It is called when a
	// key becomes busy, with no lock held, and its answer holds while the
	// key stays busy; it must be fast and must not block. Nil means Permits
	// for every key not in Overrides.
	PermitsFor func(key K) int

	// QueueSize is how many requests of one key may wait for a permit, in
	// FIFO order. Zero means none: a request over the limit is refused at
	// once. It must not be negative.
	QueueSize int

	// QueueTimeout is the longest a request waits in the queue before it
	// is refused with [ErrQueueTimeout]. Zero means it waits until a permit
	// comes or its context ends. It must not be negative.
	QueueTimeout time.Duration

	// Shadow grants every request, even over the limit, and counts (and
	// reports) those the limit would have refused as shadow-refused. Use
	// it to try a limit before enforcing it. Requests never wait in shadow
	// mode. False, the zero value, enforces the limit.
	Shadow bool

	// ReclaimAfter is how long a permit may be held before the limiter
	// takes it back, counts it, and logs its key at WARN; the holder's
	// later Release then does nothing. Permits marked with [Permit.Exempt]
	// are never reclaimed. Zero means 10 minutes ([DefaultReclaimAfter]);
	// negative means never. Reclaim runs every ReclaimAfter/16 (between
	// 10 ms and 10 s), so a permit is taken back between ReclaimAfter and
	// ReclaimAfter plus one period after it was granted.
	ReclaimAfter time.Duration
}

// Validate reports the first invalid field of p, named as in the Policy,
// or nil. [New] calls it; a layer that embeds a Policy calls it to fail
// early, with its own prefix wrapped around the error.
func (p Policy[K]) Validate() error {
	switch {
	case p.Permits < Unlimited:
		return fmt.Errorf("limit: Permits must be ≥ -1 (Unlimited) (got %d)", p.Permits)
	case p.Permits > MaxPermits:
		return fmt.Errorf("limit: Permits must be at most %d (got %d)", MaxPermits, p.Permits)
	case p.QueueSize < 0:
		return fmt.Errorf("limit: QueueSize must not be negative (got %d)", p.QueueSize)
	case p.QueueTimeout < 0:
		return fmt.Errorf("limit: QueueTimeout must not be negative (got %v)", p.QueueTimeout)
	}
	for key, n := range p.Overrides {
		if n < Unlimited || n > MaxPermits {
			return fmt.Errorf("limit: Overrides[%v] must be in -1..%d (got %d)", quoted(key), MaxPermits, n)
		}
	}
	return nil
}

// quoted writes a string key as Go would quote it, so that an empty or
// odd key is visible in an error; other keys print as themselves.
func quoted(key any) string {
	if s, ok := key.(string); ok {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprint(key)
}

// permitsFunc returns the per-key permits function of p: Overrides first,
// then PermitsFor; nil when neither is set, so that the common case costs
// no call.
func (p Policy[K]) permitsFunc() func(K) int {
	overrides, permitsFor := p.Overrides, p.PermitsFor
	switch {
	case len(overrides) == 0:
		return permitsFor
	case permitsFor == nil:
		return func(key K) int { return overrides[key] }
	}
	return func(key K) int {
		if n, ok := overrides[key]; ok {
			return n
		}
		return permitsFor(key)
	}
}

// PermitsOf returns the permits of key under p, as a [Limiter] built from
// p counts them and asks its Store with: Overrides first, then
// PermitsFor, then Permits, zero meaning the default ([DefaultPermits]);
// [Unlimited] when key has no limit. It calls PermitsFor as the Limiter
// does, and allocates nothing of its own.
func (p Policy[K]) PermitsOf(key K) int {
	def := permitsOf(p.Permits, DefaultPermits)
	n := def
	if o, ok := p.Overrides[key]; ok {
		n = permitsOf(o, def)
	} else if p.PermitsFor != nil {
		n = permitsOf(p.PermitsFor(key), def)
	}
	if n == unlimited {
		return Unlimited
	}
	return int(n)
}
