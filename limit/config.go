package limit

import (
	"fmt"
	"log/slog"
	"math"
	"time"
)

// Defaults used where a [Config] field is left zero.
const (
	DefaultPermits      = 64
	DefaultReclaimAfter = 10 * time.Minute
	// StorePollInterval is how often a waiter asks the Store again when the
	// Store cannot tell it of releases elsewhere (see [ReleaseNotifier]).
	StorePollInterval = 50 * time.Millisecond
)

// unlimited is the internal form of "no limit" for a key.
const unlimited = math.MaxInt32

// Config configures a [Limiter]. The zero Config is valid: 64 permits per
// key, no global cap, no queue, reclaim after 10 minutes, counts in this
// process only. New copies the Config; changing it afterwards has no effect.
type Config[K comparable] struct {
	// Permits is how many permits one key may hold at once.
	// Zero means 64. Negative means unlimited. At most 2^31-2.
	Permits int

	// PermitsFor, if set, gives a key its own number of permits (for
	// example a batch user gets 32). It is called when a key becomes busy,
	// with no lock held, and its answer holds while the key stays busy.
	// Zero means Permits; negative means unlimited. Nil means every key
	// gets Permits.
	PermitsFor func(key K) int

	// GlobalPermits caps the permits held over all keys together. Zero
	// means no global cap; it must not be negative. A request refused by the
	// global cap does not wait: it fails at once with [ErrGlobalLimited].
	// Waiters in a key's queue are handed permits that key releases; while
	// the global cap is reached they wait for one of their own key's
	// permits, not for another key's.
	GlobalPermits int

	// QueueSize is how many requests may wait for a permit of one key, in
	// FIFO order. Zero means none: a request over the limit is refused at
	// once. It must not be negative.
	QueueSize int

	// QueueTimeout is the longest a request waits in the queue before
	// failing with [ErrQueueTimeout]. Zero means it waits until its context
	// ends. It must not be negative.
	QueueTimeout time.Duration

	// Shadow grants every request, even over the limit, and counts those
	// the limit would have refused as shadow-refused. Use it to try a limit
	// before enforcing it. Requests never wait in shadow mode. False, the
	// zero value, enforces the limit.
	Shadow bool

	// ReclaimAfter is how long a permit may be held before the limiter
	// takes it back, counts it, and logs its key at WARN; the holder's later
	// Release then does nothing. Permits marked with [Permit.Exempt] are
	// never reclaimed. Zero means 10 minutes; negative means never. Reclaim
	// runs every ReclaimAfter/16 (between 10 ms and 10 s), so a permit is
	// taken back between ReclaimAfter and ReclaimAfter plus one period
	// after it was granted.
	ReclaimAfter time.Duration

	// Hash maps a key to a number used to spread keys over the limiter's
	// internal shards. Nil means [hash/maphash.Comparable], which is fast
	// for strings but allocates for keys that hold pointers (netip.Addr
	// does); such key types should provide their own (clientkey.Key.Hash).
	// Equal keys must hash equally.
	Hash func(key K) uint64

	// Store shares the counts with other processes (limit/redisstore).
	// Only keys with a limit are asked: a key whose permits are unlimited
	// (negative Permits, or PermitsFor) is counted in this process alone
	// and never costs a Store call, whatever the Store's state. Nil means
	// the counts are this process's only.
	Store Store[K]

	// Clock tells the time. Nil means the real clock.
	Clock Clock

	// Observer is told of every decision. Nil means none.
	Observer Observer[K]

	// Logger receives the WARN of a reclaimed permit. Nil means no logs: a
	// library logs only where it is told to.
	Logger *slog.Logger

	// Name identifies the limiter in logs. Empty means "limit".
	Name string
}

// settings is a Config with its defaults applied and checked.
type settings[K comparable] struct {
	Config[K]
	permits       int32 // default per key; unlimited for none
	reclaimEvery  time.Duration
	reclaimNanos  int64 // 0: never
	globalPermits int64 // 0: none
}

func (c Config[K]) settings() (settings[K], error) {
	s := settings[K]{Config: c}
	switch {
	case c.Permits > math.MaxInt32-1:
		return s, fmt.Errorf("limit: Permits must be at most %d (got %d)", math.MaxInt32-1, c.Permits)
	case c.GlobalPermits < 0:
		return s, fmt.Errorf("limit: GlobalPermits must not be negative (got %d)", c.GlobalPermits)
	case c.QueueSize < 0:
		return s, fmt.Errorf("limit: QueueSize must not be negative (got %d)", c.QueueSize)
	case c.QueueTimeout < 0:
		return s, fmt.Errorf("limit: QueueTimeout must not be negative (got %v)", c.QueueTimeout)
	}
	s.permits = permitsOf(c.Permits, DefaultPermits)
	s.globalPermits = int64(c.GlobalPermits)
	switch {
	case c.ReclaimAfter == 0:
		s.reclaimNanos = int64(DefaultReclaimAfter)
	case c.ReclaimAfter > 0:
		s.reclaimNanos = int64(c.ReclaimAfter)
	}
	if s.reclaimNanos > 0 {
		s.reclaimEvery = min(max(time.Duration(s.reclaimNanos)/16, 10*time.Millisecond), 10*time.Second)
	}
	if s.Clock == nil {
		s.Clock = realClock{}
	}
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
	if s.Name == "" {
		s.Name = "limit"
	}
	return s, nil
}

// permitsOf turns a configured number of permits into the internal form:
// zero means def, negative (or too large) means unlimited.
func permitsOf(n int, def int32) int32 {
	switch {
	case n == 0:
		return def
	case n < 0 || n >= unlimited:
		return unlimited
	default:
		return int32(n)
	}
}

// limitFor returns the permits of key.
func (s *settings[K]) limitFor(key K) int32 {
	if s.PermitsFor == nil {
		return s.permits
	}
	return permitsOf(s.PermitsFor(key), s.permits)
}
