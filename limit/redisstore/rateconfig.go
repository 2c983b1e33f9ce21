package redisstore

import (
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-a07d1050/portcullis/limit"
)

// Defaults used where a [RateConfig] field is left zero.
const (
	DefaultRatePrefix    = "portcullis:rate:"
	DefaultFlushInterval = 10 * time.Millisecond
)

// RateConfig configures a [RateStore]. Only Client is required; every
// other zero field takes the default it documents. NewRate copies the
// RateConfig; changing it afterwards has no effect. Its fields mean what
// the same fields of [Config] mean for concurrency, so that the daemon's
// one `cluster:` block configures both; LocalShare is the rate's own.
type RateConfig struct {
	// Client talks to Redis, as Config.Client: build it with [NewClient].
	// Required: nil is an error. The RateStore does not close it.
	Client redis.UniversalClient

	// Prefix starts the name of every Redis key the RateStore uses. The
	// RateStores of one rate limiter on every node must use the same
	// Prefix, and different limiters different ones. Empty means
	// "portcullis:rate:".
	Prefix string

	// Timeout bounds every Redis call, on the request path and off it.
	// Zero means 50 ms. It must not be negative.
	Timeout time.Duration

	// OnError is the policy when Redis cannot answer. Zero means [Open]:
	// the node decides alone, at NodeShare of the key's rate and burst.
	// [Closed] refuses with [ErrUnavailable].
	OnError Policy

	// NodeShare is the part of a key's rate and burst one node admits on
	// its own while Redis cannot answer (under Open): a node-local limit
	// of rate × NodeShare with ceil((Burst+1) × NodeShare) requests at
	// once. Zero means 1.0: each node alone admits the whole rate, so N
	// nodes may admit N times the rate while Redis is away. Set 1/N for a
	// strict rate in N nodes. It must be in [0, 1].
	NodeShare float64

	// LocalShare is the part of a key's burst capacity (Burst+1) a node
	// may admit before asking Redis: the local fast path. A node admits
	// up to floor((Burst+1) × LocalShare) requests of a key without a
	// round trip, counts them, and sends them to Redis in the next flush
	// or with the key's next call, which then counts them first. N nodes
	// may so admit up to N × that many requests beyond the exact rate
	// (docs/ratelimit.md works the bound out). Zero means none: every
	// request that the last known state does not already refuse asks
	// Redis, and the cluster rate is exact. It must be in [0, 1].
	LocalShare float64

	// LeaseTokens is how many tokens of a busy key a node takes from Redis
	// in one call: the request's own and up to LeaseTokens-1 more, as many
	// as the key's state in Redis admits at once (never more than its
	// burst allows), which the node then admits locally without a round
	// trip. A key is busy on a node when its previous request there came
	// within LeaseTokens intervals of the key's rate. The tokens are
	// counted in Redis when taken, and each expires when Redis's own
	// schedule reaches the slot it occupies, so the cluster rate stays
	// exact: no overshoot, only other nodes refused earlier by up to the
	// tokens a node holds (docs/cluster.md works this out). A batch is at
	// most half the key's burst capacity ((Burst+1)/2); below 2 there is
	// no lease. Zero means none (every request asks, as without it). It
	// must not be negative.
	LeaseTokens int

	// FlushInterval is how often requests admitted without asking Redis
	// (the fast path, TryReserve, the Open fallback) and cancellations are
	// sent to Redis, in one pipeline. Zero means 10 ms. It must not be
	// negative.
	FlushInterval time.Duration

	// BreakerThreshold is how many Redis calls in a row must fail before
	// the circuit breaker opens. Zero means 5. It must not be negative.
	BreakerThreshold int

	// BreakerBackoff is how long the breaker stays open before one request
	// probes Redis again. Zero means 1 s. It must not be negative.
	BreakerBackoff time.Duration

	// Logger receives breaker changes. Nil means slog.Default().
	Logger *slog.Logger

	// Name identifies the RateStore in its log lines (the "store"
	// attribute), as Config.Name. Empty means Prefix.
	Name string

	// Outages, when set, logs this RateStore's breaker changes together
	// with those of the other Stores and RateStores of the same Redis, as
	// Config.Outages. Nil means the RateStore logs its own to Logger.
	Outages *OutageLog

	// Clock tells the time for the breaker and the node's view of each
	// key. The rate state in Redis always uses Redis's own TIME. Nil
	// means the real clock.
	Clock limit.Clock
}

type rateSettings struct {
	RateConfig
}

func (c RateConfig) settings() (rateSettings, error) {
	s := rateSettings{RateConfig: c}
	switch {
	case c.Client == nil:
		return s, fmt.Errorf("redisstore: Client is required")
	case c.Timeout < 0:
		return s, fmt.Errorf("redisstore: Timeout must not be negative (got %v)", c.Timeout)
	case c.OnError != Open && c.OnError != Closed:
		return s, fmt.Errorf("redisstore: OnError must be Open or Closed (got %v)", c.OnError)
	case math.IsNaN(c.NodeShare) || c.NodeShare < 0 || c.NodeShare > 1:
		return s, fmt.Errorf("redisstore: NodeShare must be in [0, 1] (got %v)", c.NodeShare)
	case math.IsNaN(c.LocalShare) || c.LocalShare < 0 || c.LocalShare > 1:
		return s, fmt.Errorf("redisstore: LocalShare must be in [0, 1] (got %v)", c.LocalShare)
	case c.LeaseTokens < 0:
		return s, fmt.Errorf("redisstore: LeaseTokens must not be negative (got %d)", c.LeaseTokens)
	case c.FlushInterval < 0:
		return s, fmt.Errorf("redisstore: FlushInterval must not be negative (got %v)", c.FlushInterval)
	case c.BreakerThreshold < 0:
		return s, fmt.Errorf("redisstore: BreakerThreshold must not be negative (got %d)", c.BreakerThreshold)
	case c.BreakerBackoff < 0:
		return s, fmt.Errorf("redisstore: BreakerBackoff must not be negative (got %v)", c.BreakerBackoff)
	}
	if s.Prefix == "" {
		s.Prefix = DefaultRatePrefix
	}
	if s.Name == "" {
		s.Name = s.Prefix
	}
	if s.Timeout == 0 {
		s.Timeout = DefaultTimeout
	}
	if s.NodeShare == 0 {
		s.NodeShare = 1
	}
	if s.FlushInterval == 0 {
		s.FlushInterval = DefaultFlushInterval
	}
	if s.BreakerThreshold == 0 {
		s.BreakerThreshold = DefaultBreakerThreshold
	}
	if s.BreakerBackoff == 0 {
		s.BreakerBackoff = DefaultBreakerBackoff
	}
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	if s.Clock == nil {
		s.Clock = realClock{}
	}
	return s, nil
}
