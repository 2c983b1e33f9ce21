package limit

import "context"

// A Store holds the counts a [Limiter] shares with other processes, so that a
// limit holds across a cluster (package limit/redisstore is one). The
// limiter keeps its own count of what this process holds, checks that first
// and refuses locally when this process alone is at the limit; it asks the
// Store only for permits the local count allows, and never for a key
// without a limit.
type Store[K comparable] interface {
	// Acquire reports whether one more permit of key may be held
	// cluster-wide, where limit permits are allowed in all and local are
	// held by this process now, not counting the one asked for. It may block
	// until ctx ends. A non-nil error means the Store could not decide and
	// refuses; a Store whose failure policy is to admit returns true and no
	// error. A true answer must later be matched by one Release.
	Acquire(ctx context.Context, key K, limit, local int) (bool, error)

	// TryAcquire is Acquire without blocking: it answers from what the
	// Store already knows (a cached or node-local view). It is called from
	// hooks that must not block, such as a QUIC packet handler.
	TryAcquire(key K, limit, local int) (bool, error)

	// Release gives back one permit taken through Acquire or TryAcquire. It
	// must not block; a Store that talks to a server batches releases off
	// the caller's path.
	Release(key K)
}

// A ReleaseNotifier is a [Store] that can tell when a permit of a key was
// released elsewhere in the cluster. The limiter registers one function at
// construction; the Store calls it (from any goroutine, without blocking
// for long) with the key, and the limiter wakes that key's waiters to try
// again. Without it, waiters retry every [StorePollInterval].
type ReleaseNotifier[K comparable] interface {
	NotifyRelease(func(key K))
}

// A HeldStore is a [Store] that can sometimes grant a permit exactly
// without blocking, from permits the cluster already counts for this
// process (limit/redisstore's do: its released permits it has not sent
// yet, and its spares). A quiet acquire ([AcquireOptions.Quiet]) of a
// limiter whose Store is one asks AcquireHeld, and is refused with
// [ErrQuietStore] when it answers false.
type HeldStore[K comparable] interface {
	Store[K]
	// AcquireHeld is Acquire answered only from such permits: it never
	// blocks and never asks another process. False says only that none is
	// at hand now. A true answer must later be matched by one Release.
	AcquireHeld(key K, limit int) bool
}
