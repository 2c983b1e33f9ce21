package limit

import "errors"

// Sentinel errors returned by [Limiter.Acquire] and [Limiter.TryAcquire].
// Compare with [errors.Is]: the errors returned may wrap them.
var (
	// ErrLimited means the key, or the limiter as a whole, holds all the
	// permits it may hold and the request could not wait for one.
	ErrLimited = errors.New("limit: over the limit")

	// ErrQueueFull means the key is at its limit and its wait queue already
	// holds Config.QueueSize waiters.
	ErrQueueFull = errors.New("limit: wait queue full")

	// ErrQueueTimeout means the request waited Config.QueueTimeout in the
	// key's queue without getting a permit.
	ErrQueueTimeout = errors.New("limit: wait limit reached")

	// ErrClosed means the limiter was closed.
	ErrClosed = errors.New("limit: limiter closed")

	// ErrStore means the shared Store could not decide and its failure
	// policy refuses. The returned error also wraps the Store's error.
	ErrStore = errors.New("limit: shared store failed")

	// ErrQuietStore means a quiet request (AcquireOptions.Quiet) was made
	// of a limiter with a Store, which cannot answer without asking it.
	ErrQuietStore = errors.New("limit: a limiter with a store cannot grant quietly")
)

// ErrGlobalLimited is returned when Config.GlobalPermits permits are held
// over all keys together. It matches [ErrLimited] under [errors.Is].
var ErrGlobalLimited error = globalLimited{}

type globalLimited struct{}

func (globalLimited) Error() string        { return "limit: over the global limit" }
func (globalLimited) Is(target error) bool { return target == ErrLimited }

// RefusalKind returns the event a refusal by [Limiter.Acquire] or
// [Limiter.TryAcquire] stands for, as the limiter counts it: [Refused],
// [QueueFull], [QueueTimeout] or [StoreFailed]; [Abandoned] for any other
// error (the request's context ended while it waited). It returns 0 for
// [ErrClosed] and [ErrQuietStore], which no event counts. Middleware names its refusals with
// it, so that logs and metrics agree.
func RefusalKind(err error) EventKind {
	switch {
	case errors.Is(err, ErrLimited):
		return Refused
	case errors.Is(err, ErrQueueFull):
		return QueueFull
	case errors.Is(err, ErrQueueTimeout):
		return QueueTimeout
	case errors.Is(err, ErrStore):
		return StoreFailed
	case errors.Is(err, ErrClosed), errors.Is(err, ErrQuietStore):
		return 0
	}
	return Abandoned
}
