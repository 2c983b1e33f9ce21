package limit

import (
	"fmt"
	"log/slog"
	"maps"
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

// Config configures a [Limiter]: its [Policy] (permits per key, overrides,
// queue, shadow, reclaim), embedded, and what is the Limiter's own. The
// zero Config is valid: 64 permits per key, no global cap, no queue,
// reclaim after 10 minutes, counts in this process only. New copies the
// Config, its map included; changing it afterwards has no effect.
type Config[K comparable] struct {
	// Policy is what each key is allowed; see [Policy] for every field's
	// zero, negative and default values.
	Policy[K]

	// GlobalPermits caps the permits held over all keys together. Zero
	// means no global cap; it must not be negative. A request refused by the
	// global cap does not wait: it fails at once with [ErrGlobalLimited].
	// Waiters in a key's queue are handed permits that key releases; while
	// the global cap is reached they wait for one of their own key's
	// permits, not for another key's.
	GlobalPermits int

	// Hash maps a key to a number used to spread keys over the limiter's
	// internal shards. Nil means [hash/maphash.Comparable], which is fast
	// for strings but allocates for keys that hold pointers (netip.Addr
	// does); such key types should provide their own (clientkey.Key.Hash).
	// Equal keys must hash equally.
	Hash func(key K) uint64

	// Store shares the counts with other processes (limit/redisstore).
	// Only keys with a limit are asked: a key whose permits are Unlimited
	// (from Permits, Overrides or PermitsFor) is counted in this process
	// alone and never costs a Store call, whatever the Store's state. Nil
	// means the counts are this process's only.
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
	permits       int32       // default per key; unlimited for none
	permitsFor    func(K) int // Overrides, then PermitsFor; nil for neither
	reclaimEvery  time.Duration
	reclaimNanos  int64 // 0: never
	globalPermits int64 // 0: none
}

func (c Config[K]) settings() (settings[K], error) {
	s := settings[K]{Config: c}
	if err := c.Policy.Validate(); err != nil {
		return s, err
	}
	if c.GlobalPermits < 0 {
		return s, fmt.Errorf("limit: GlobalPermits must not be negative (got %d)", c.GlobalPermits)
	}
	s.Overrides = maps.Clone(c.Overrides)
	s.permitsFor = s.Policy.permitsFunc()
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
// zero means def; Unlimited, and (from a PermitsFor answer, which cannot
// fail) any other negative or too large number, means unlimited.
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
	if s.permitsFor == nil {
		return s.permits
	}
	return permitsOf(s.permitsFor(key), s.permits)
}
