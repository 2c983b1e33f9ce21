package proxyauth

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/limit"
)

// A FailureLimiter counts the failed authentication attempts of each client
// and says when a client has used up its budget. It is the narrow interface
// the [Authenticator] needs, so that a keyed rate limiter (GCRA per key) can
// later stand in for the built-in [NewFailureLimiter]. Implementations must
// be safe for concurrent use, must not block, and must bound their memory.
type FailureLimiter interface {
	// Allow reports whether key may present credentials now. When it may
	// not, wait is how long until it may again (at least 1ns).
	Allow(key clientkey.Key) (ok bool, wait time.Duration)

	// Fail records one failed attempt by key.
	Fail(key clientkey.Key)
}

// Defaults of [FailureConfig].
const (
	DefaultFailureBurst    = 10
	DefaultFailureInterval = 6 * time.Second // 10 a minute once the burst is spent
	DefaultFailureKeys     = 65536
)

// FailureConfig configures the built-in [FailureLimiter]. The zero value is
// valid: 10 failures in a row, then one more every 6 s, for at most 65536
// clients remembered at once.
type FailureConfig struct {
	// Burst is how many failed attempts a client may make in a row before
	// it is refused. Zero means 10. It must not be negative.
	Burst int

	// Interval is how often a refused client earns one more attempt; a
	// client that stops failing gets its whole Burst back after Burst ×
	// Interval. Zero means 6 s. It must not be negative.
	Interval time.Duration

	// MaxKeys bounds how many clients are remembered at once. A client is
	// forgotten once its budget is whole again; when MaxKeys clients with
	// recent failures are remembered, recording a new one forgets an
	// arbitrary other (so an attacker spreading failures over more than
	// MaxKeys addresses can win back budget; the bound on concurrent bcrypt
	// checks still caps the CPU it can burn). Zero means 65536. It must not
	// be negative.
	MaxKeys int

	// Clock tells the time. Nil means the real clock.
	Clock limit.Clock
}

// failureShards spreads the clients over locks. A power of two.
const failureShards = 32

// failureTable is the built-in FailureLimiter: per client, the theoretical
// arrival time of GCRA (the instant its budget would be whole again, plus
// one interval per failure not yet earned back).
type failureTable struct {
	burst    int64 // nanoseconds of budget: Burst × Interval
	interval int64
	perShard int
	now      func() time.Time
	shards   [failureShards]failureShard
}

type failureShard struct {
	mu  sync.Mutex
	tat map[clientkey.Key]int64 // Unix nanoseconds
}

// NewFailureLimiter returns the built-in [FailureLimiter] configured by
// cfg, or an error naming the first invalid field.
func NewFailureLimiter(cfg FailureConfig) (FailureLimiter, error) {
	switch {
	case cfg.Burst < 0:
		return nil, fmt.Errorf("proxyauth: FailureConfig.Burst must not be negative (got %d)", cfg.Burst)
	case cfg.Interval < 0:
		return nil, fmt.Errorf("proxyauth: FailureConfig.Interval must not be negative (got %v)", cfg.Interval)
	case cfg.MaxKeys < 0:
		return nil, fmt.Errorf("proxyauth: FailureConfig.MaxKeys must not be negative (got %d)", cfg.MaxKeys)
	}
	burst, interval, maxKeys := cfg.Burst, cfg.Interval, cfg.MaxKeys
	if burst == 0 {
		burst = DefaultFailureBurst
	}
	if interval == 0 {
		interval = DefaultFailureInterval
	}
	if int64(burst) > math.MaxInt64/2/int64(interval) {
		return nil, fmt.Errorf("proxyauth: FailureConfig.Burst × Interval is too long (%d × %v)", burst, interval)
	}
	if maxKeys == 0 {
		maxKeys = DefaultFailureKeys
	}
	t := &failureTable{
		burst:    int64(burst) * int64(interval),
		interval: int64(interval),
		perShard: max(1, maxKeys/failureShards),
		now:      time.Now,
	}
	if cfg.Clock != nil {
		t.now = cfg.Clock.Now
	}
	for i := range t.shards {
		t.shards[i].tat = make(map[clientkey.Key]int64)
	}
	return t, nil
}

func (t *failureTable) shard(key clientkey.Key) *failureShard {
	return &t.shards[key.Hash()&(failureShards-1)]
}

// Allow admits key while one more failure would still fit in its budget.
func (t *failureTable) Allow(key clientkey.Key) (bool, time.Duration) {
	sh := t.shard(key)
	sh.mu.Lock()
	tat, ok := sh.tat[key]
	sh.mu.Unlock()
	if !ok {
		return true, 0
	}
	now := t.now().UnixNano()
	// One more failure would move tat one interval on; it fits while the
	// result stays within the burst.
	over := tat + t.interval - now - t.burst
	if over <= 0 {
		return true, 0
	}
	return false, time.Duration(over)
}

// Fail spends one interval of key's budget.
func (t *failureTable) Fail(key clientkey.Key) {
	now := t.now().UnixNano()
	sh := t.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	tat, ok := sh.tat[key]
	if !ok && len(sh.tat) >= t.perShard {
		sh.evict(now, t.perShard)
	}
	sh.tat[key] = max(tat, now) + t.interval
}

// evict forgets the clients whose budget is whole again and, if the shard
// is still full, one arbitrary client (Go's map iteration order is random).
func (sh *failureShard) evict(now int64, capacity int) {
	for k, tat := range sh.tat {
		if tat <= now {
			delete(sh.tat, k)
		}
	}
	if len(sh.tat) < capacity {
		return
	}
	for k := range sh.tat {
		delete(sh.tat, k)
		return
	}
}

// keys returns how many clients are remembered, for tests.
func (t *failureTable) keys() int {
	n := 0
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		n += len(sh.tat)
		sh.mu.Unlock()
	}
	return n
}
