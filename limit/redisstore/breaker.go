package redisstore

import (
	"sync"
	"sync/atomic"
	"time"
)

// BreakerState is the state of a Store's circuit breaker.
type BreakerState int32

const (
	// BreakerClosed: Redis answers; every request asks it.
	BreakerClosed BreakerState = iota
	// BreakerHalfOpen: one probe is asking Redis whether it is back; the
	// other requests act as if it were open.
	BreakerHalfOpen
	// BreakerOpen: Redis failed Config.BreakerThreshold times in a row;
	// requests follow Config.OnError without asking it until the backoff
	// has passed.
	BreakerOpen
)

// String returns "closed", "half-open" or "open".
func (b BreakerState) String() string {
	switch b {
	case BreakerClosed:
		return "closed"
	case BreakerHalfOpen:
		return "half-open"
	case BreakerOpen:
		return "open"
	}
	return "unknown"
}

// breaker is a consecutive-failure circuit breaker. Its closed, healthy
// path is two atomic loads; transitions take the mutex.
type breaker struct {
	threshold int64
	backoff   time.Duration
	onChange  func(from, to BreakerState, err error)

	state atomic.Int32
	fails atomic.Int64
	opens atomic.Uint64

	mu      sync.Mutex
	retryAt time.Time
}

// allow reports whether a call may go to Redis now. After the backoff it
// lets exactly one caller through as the half-open probe; that caller must
// report success or failure.
func (b *breaker) allow(now time.Time) bool {
	if BreakerState(b.state.Load()) == BreakerClosed {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if BreakerState(b.state.Load()) != BreakerOpen || now.Before(b.retryAt) {
		return false
	}
	b.state.Store(int32(BreakerHalfOpen))
	return true
}

// current returns the breaker's state.
func (b *breaker) current() BreakerState { return BreakerState(b.state.Load()) }

// success records a call Redis answered. It reports whether the breaker
// closed because of it.
func (b *breaker) success() bool {
	if BreakerState(b.state.Load()) == BreakerClosed {
		if b.fails.Load() != 0 {
			b.fails.Store(0)
		}
		return false
	}
	b.mu.Lock()
	from := BreakerState(b.state.Load())
	b.fails.Store(0)
	b.state.Store(int32(BreakerClosed))
	b.mu.Unlock()
	if from != BreakerClosed && b.onChange != nil {
		b.onChange(from, BreakerClosed, nil)
	}
	return from != BreakerClosed
}

// failure records a call Redis did not answer. A failed probe, or the
// threshold-th failure in a row, opens the breaker for the backoff.
func (b *breaker) failure(now time.Time, err error) {
	n := b.fails.Add(1)
	from := BreakerState(b.state.Load())
	if from == BreakerClosed && n < b.threshold {
		return
	}
	b.mu.Lock()
	from = BreakerState(b.state.Load())
	b.retryAt = now.Add(b.backoff)
	b.state.Store(int32(BreakerOpen))
	b.mu.Unlock()
	if from == BreakerClosed {
		b.opens.Add(1)
	}
	if from != BreakerOpen {
		if b.onChange != nil {
			b.onChange(from, BreakerOpen, err)
		}
	}
}

// abandon records that a call ended for the caller's own reasons (its
// context), which says nothing about Redis. A half-open probe ending so
// leaves the breaker open with its backoff passed, so that the next call
// probes.
func (b *breaker) abandon() {
	if BreakerState(b.state.Load()) != BreakerHalfOpen {
		return
	}
	b.mu.Lock()
	if BreakerState(b.state.Load()) == BreakerHalfOpen {
		b.state.Store(int32(BreakerOpen))
	}
	b.mu.Unlock()
}
