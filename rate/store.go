package rate

import (
	"context"
	"time"
)

// A Store holds the rate state a [Limiter] shares with other processes, so
// that a key's rate holds across a cluster (redisstore.RateStore is one).
// The limiter applies the key's limit locally first and refuses without
// asking the Store when this process alone is over it; it asks the Store
// only about requests the local state admits, and gives the local count
// back when the Store refuses.
//
// A Store keeps one theoretical arrival time per key with the same
// arithmetic as the limiter (see package doc); ahead is that time minus
// now, after the decision (unchanged on refusal), from which the limiter
// derives the delay, the remaining count and the retry time.
type Store[K comparable] interface {
	// Reserve counts one request of key under lim cluster-wide if it
	// conforms, and reports whether it did. It may block until ctx ends. A
	// non-nil error means the Store could not decide and refuses; a Store
	// whose failure policy is to admit returns true and no error.
	Reserve(ctx context.Context, key K, lim Limit) (ok bool, ahead time.Duration, err error)

	// TryReserve is Reserve without blocking: it answers from what the
	// Store already knows. It is called from hooks that must not block
	// (accept, a QUIC packet handler).
	TryReserve(key K, lim Limit) (ok bool, ahead time.Duration, err error)

	// Cancel gives back one request of key that Reserve or TryReserve
	// admitted and that did not proceed. It must not block.
	Cancel(key K, lim Limit)
}
