package rate

import "github.com/seed-a07d1050/portcullis/limit"

// Config configures a [Limiter]. Rate is required: the zero Config is
// invalid. New copies the Config; changing it afterwards has no effect.
type Config[K comparable] struct {
	// Rate is the sustained rate of each key, such as PerSecond(10) or
	// ParseRate("600r/m"). The zero Rate is an error; [Unlimited] admits
	// everything (still counted).
	Rate Rate

	// Burst is how many requests of one key may arrive ahead of Rate, as
	// nginx's burst. Zero means none. It must be in 0..2^30.
	Burst int

	// Delay is how many of the Burst early requests are admitted at once;
	// the others are told to wait (Decision.Delay) so that they proceed
	// spaced out at Rate. Zero, as nginx's default, delays them all; N is
	// nginx's delay=N; [NoDelay] (-1) is nginx's nodelay. Other negative
	// values are invalid.
	Delay int

	// LimitFor, if set, gives a key its own limit (a batch user gets
	// 100r/s): when it returns true, the returned Limit applies to that
	// decision instead of Rate, Burst and Delay; an invalid Limit is
	// ignored and the Config's applies. It is called for every decision,
	// with no lock held; it must be fast and must not block. Nil means
	// every key gets the Config's limit.
	LimitFor func(key K) (Limit, bool)

	// Shadow admits every request at once, even over the limit, while
	// counting and reporting (ShadowRefused, ShadowDelayed) what enforcing
	// would have done. As with nginx's limit_req_dry_run the key's state
	// evolves exactly as when enforcing: a would-be refusal is not counted,
	// a would-be delay is. False, the zero value, enforces.
	Shadow bool

	// Hash maps a key to a number that spreads keys over shards and slots.
	// Nil means [hash/maphash.Comparable], fast for strings but allocating
	// for keys that hold pointers (netip.Addr does); such key types should
	// provide their own (clientkey.Key.Hash). Equal keys must hash equally.
	Hash func(key K) uint64

	// Store shares the rate state with other processes (redisstore's
	// RateStore). Nil means the state is this process's only.
	Store Store[K]

	// Clock tells the time. Nil means the real, monotonic clock; tests
	// inject limit/limittest.Clock.
	Clock limit.Clock

	// Observer is told of every decision and cancellation. Nil means none.
	Observer Observer[K]

	// Name identifies the limiter in errors and logs of the packages that
	// use it. Empty means "rate".
	Name string
}

// settings is a Config with its defaults applied and checked.
type settings[K comparable] struct {
	Config[K]
	limit  Limit
	policy policy
}

func (c Config[K]) settings() (settings[K], error) {
	s := settings[K]{Config: c, limit: Limit{Rate: c.Rate, Burst: c.Burst, Delay: c.Delay}}
	if err := s.limit.Validate(); err != nil {
		return s, err
	}
	s.policy = policyOf(s.limit)
	if s.Name == "" {
		s.Name = "rate"
	}
	return s, nil
}
