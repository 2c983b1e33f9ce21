package redisstore

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-a07d1050/portcullis/limit"
)

// Defaults used where a [Config] field is left zero.
const (
	DefaultPrefix           = "portcullis:limit:"
	DefaultLease            = 15 * time.Second
	DefaultTimeout          = 50 * time.Millisecond
	DefaultBreakerThreshold = 5
	DefaultBreakerBackoff   = time.Second
)

// A Policy says what a [Store] does when Redis cannot answer in time: it
// is down, slow, unreachable, or the circuit breaker is open.
type Policy int

const (
	// Open admits on the node-local cap: a node holds at most
	// ceil(limit × Config.NodeShare) permits of a key while Redis is away.
	// It is the default.
	Open Policy = iota
	// Closed refuses: Acquire and TryAcquire return an error wrapping
	// [ErrUnavailable], which the limiter turns into limit.ErrStore.
	Closed
)

// String returns "open" or "closed" (or "Policy(n)" for an invalid value).
func (p Policy) String() string {
	switch p {
	case Open:
		return "open"
	case Closed:
		return "closed"
	}
	return fmt.Sprintf("Policy(%d)", int(p))
}

// ParsePolicy parses "open" or "closed" (the daemon's on_error values). The
// empty string means Open.
func ParsePolicy(s string) (Policy, error) {
	switch s {
	case "", "open":
		return Open, nil
	case "closed":
		return Closed, nil
	}
	return 0, fmt.Errorf("redisstore: on_error must be open or closed (got %q)", s)
}

// Config configures a [Store]. Only Client is required; every other zero
// field takes the default it documents. New copies the Config; changing it
// afterwards has no effect.
type Config struct {
	// Client talks to Redis: a single server, Sentinel or Redis Cluster.
	// Build it with [NewClient], which sets MaxRetries to -1 (go-redis
	// would otherwise retry a script that may already have run) and
	// ContextTimeoutEnabled (otherwise go-redis ignores the per-call
	// deadline). Required: nil is an error. The Store does not close it.
	Client redis.UniversalClient

	// Prefix starts the name of every Redis key and of the pub/sub channel
	// the Store uses. The Stores of one limiter on every node must use the
	// same Prefix, and different limiters different ones: two limiters on
	// one Prefix count the same key together (a connection cap and a route
	// limit both keyed by client address would add up). Empty means
	// "portcullis:limit:".
	Prefix string

	// Lease is how long Redis keeps counting a node's permits after the
	// node last wrote them. A node renews its leases every Lease/3, so a
	// node that dies or is cut off from Redis gives its permits back at
	// most one Lease later. Zero means 15 s. It must be at least 100 ms,
	// at least 3 × Timeout, and at most 24 h.
	Lease time.Duration

	// Timeout bounds every Redis call, including on the request path: an
	// Acquire never waits for Redis longer than this (or its context).
	// Zero means 50 ms. It must not be negative.
	Timeout time.Duration

	// OnError is the policy when Redis cannot answer. Zero means [Open].
	OnError Policy

	// NodeShare is the part of a key's limit one node may hold on its own
	// when it cannot ask Redis: under the Open policy while Redis is away,
	// and in TryAcquire for a key the node has no fresh cluster count for.
	// The node cap is ceil(limit × NodeShare). Zero means 1.0: each node
	// may hold the whole limit alone, so a cluster of N nodes may hold up
	// to N × limit while Redis is away. Set 1/N for a strict cap in N
	// nodes. It must be in [0, 1].
	NodeShare float64

	// NodeID names this node's fields in Redis. Every node sharing the
	// limits needs its own; two processes with the same NodeID count as
	// one and overwrite each other's counts. Empty means 16 random hex
	// digits, new for each Store. At most 128 bytes, no spaces.
	NodeID string

	// BreakerThreshold is how many Redis calls in a row must fail before
	// the circuit breaker opens and the Store stops asking Redis on the
	// request path. Zero means 5. It must not be negative.
	BreakerThreshold int

	// BreakerBackoff is how long the breaker stays open before one request
	// (or the heartbeat) probes Redis again. Zero means 1 s. It must not be
	// negative.
	BreakerBackoff time.Duration

	// Logger receives breaker changes (one WARN when it opens, one INFO
	// when Redis is back) and New's warning about client options; failed
	// calls are counted in Stats, not logged one by one. Nil means
	// slog.Default().
	Logger *slog.Logger

	// Name identifies the Store in its log lines (the "store" attribute),
	// such as the limiter it counts for. Empty means Prefix.
	Name string

	// Outages, when set, logs this Store's breaker changes together with
	// those of the other Stores sharing it, so that one Redis outage is
	// logged once (see [OutageLog]); give the same one to every Store of
	// one Client. Nil means the Store logs its own breaker changes to
	// Logger.
	Outages *OutageLog

	// ReleaseHold is how long a node keeps a permit it released counted
	// in Redis before sending the release, so that its own next Acquire
	// of the same key takes it back without a round trip (exactly: Redis
	// still counts it for this node). A steady client of a busy key then
	// costs no round trip per request. Meanwhile other nodes see the
	// permit as held (they refuse, never admit, more) and their waiters
	// are woken up to ReleaseHold later. Zero means 2 ms (the batching
	// delay every release has anyway). It must not be negative nor
	// longer than Lease/3.
	ReleaseHold time.Duration

	// SpareShare is the part of a key's limit a node keeps counted in
	// Redis beyond the permits it holds while the key is busy on it
	// (acquired within the last ReleaseHold): when the batch would send
	// the key's releases, up to floor(limit × SpareShare) of them stay
	// unsent, so that the node's next Acquires take them back without a
	// round trip for as long as the key stays busy; once it is quiet for
	// ReleaseHold they are sent. Exact, as ReleaseHold: Redis counts the
	// spares for this node, so other nodes may be refused earlier by
	// them, never admit more, and a node that dies loses them with its
	// lease. The heartbeat's absolute write drops them (the next Acquires
	// ask Redis again). Zero means none. It must be in [0, 1].
	SpareShare float64

	// Prefetch, when set, is asked for the prefetches to send with each
	// acquire script of this Store, in the same pipeline: key is the
	// acquired key's string form (as keyString gave it). It is for an
	// acquire whose holder will soon acquire other Stores' keys, such as a
	// new connection's cap, acquired at accept, and the client limit of
	// its first request: each [Prefetch] ([Store.Spare]) asks for a spare
	// permit that the other Store's next Acquire of its key takes without
	// a round trip. It is called on the acquiring goroutine, only when the
	// acquire's script is about to be sent (never for an acquire decided
	// without Redis), and must be fast: no blocking, no Redis call. The
	// acquire's answer never depends on the prefetches'; prefetches of
	// Stores on another Client are not sent. Nil means none.
	Prefetch func(key string) []Prefetch

	// Clock tells the time for the breaker, the heartbeat and the age of
	// cached counts. Lease expiry is always Redis's own TIME. Nil means the
	// real clock.
	Clock limit.Clock
}

// settings is a Config with defaults applied and checked.
type settings struct {
	Config
	channel string
}

func (c Config) settings() (settings, error) {
	s := settings{Config: c}
	if err := c.validate(); err != nil {
		return s, err
	}
	if s.Prefix == "" {
		s.Prefix = DefaultPrefix
	}
	if s.Name == "" {
		s.Name = s.Prefix
	}
	if s.Lease == 0 {
		s.Lease = DefaultLease
	}
	if s.Timeout == 0 {
		s.Timeout = DefaultTimeout
	}
	if s.Lease < 100*time.Millisecond {
		return s, fmt.Errorf("redisstore: Lease must be at least 100ms (got %v)", s.Lease)
	}
	if s.ReleaseHold < 0 || s.ReleaseHold > s.Lease/3 {
		return s, fmt.Errorf("redisstore: ReleaseHold must be from 0 to Lease/3 (%v) (got %v)", s.Lease/3, s.ReleaseHold)
	}
	if s.ReleaseHold == 0 {
		s.ReleaseHold = flushLinger
	}
	if s.Lease < 3*s.Timeout {
		return s, fmt.Errorf("redisstore: Lease (%v) must be at least 3 × Timeout (%v)", s.Lease, s.Timeout)
	}
	if s.NodeShare == 0 {
		s.NodeShare = 1
	}
	if s.NodeID == "" {
		s.NodeID = randomID()
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
	s.channel = s.Prefix + "released"
	return s, nil
}

func (c Config) validate() error {
	switch {
	case c.Client == nil:
		return fmt.Errorf("redisstore: Client is required")
	case c.Lease < 0 || c.Lease > 24*time.Hour:
		return fmt.Errorf("redisstore: Lease must be between 0 and 24h (got %v)", c.Lease)
	case c.Timeout < 0:
		return fmt.Errorf("redisstore: Timeout must not be negative (got %v)", c.Timeout)
	case c.OnError != Open && c.OnError != Closed:
		return fmt.Errorf("redisstore: OnError must be Open or Closed (got %v)", c.OnError)
	case math.IsNaN(c.SpareShare) || c.SpareShare < 0 || c.SpareShare > 1:
		return fmt.Errorf("redisstore: SpareShare must be in [0, 1] (got %v)", c.SpareShare)
	case math.IsNaN(c.NodeShare) || c.NodeShare < 0 || c.NodeShare > 1:
		return fmt.Errorf("redisstore: NodeShare must be in [0, 1] (got %v)", c.NodeShare)
	case len(c.NodeID) > 128 || strings.ContainsAny(c.NodeID, " \t\r\n"):
		return fmt.Errorf("redisstore: NodeID must be at most 128 bytes without spaces (got %q)", c.NodeID)
	case c.BreakerThreshold < 0:
		return fmt.Errorf("redisstore: BreakerThreshold must not be negative (got %d)", c.BreakerThreshold)
	case c.BreakerBackoff < 0:
		return fmt.Errorf("redisstore: BreakerBackoff must not be negative (got %v)", c.BreakerBackoff)
	}
	return nil
}

func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// nodeCap is how many permits of a key with the given limit this node may
// hold without asking Redis.
func (s *settings) nodeCap(limit int) int {
	return int(math.Ceil(float64(limit) * s.NodeShare))
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) limit.Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time { return t.t.C }
func (t realTimer) Stop() bool          { return t.t.Stop() }
