package redisstore

import "errors"

// Sentinel errors returned by [Store] methods. Compare with [errors.Is]: the
// errors returned may wrap them and the Redis error that caused them.
var (
	// ErrUnavailable means Redis could not answer within Config.Timeout,
	// answered with an error, or the circuit breaker is open, and the
	// policy is [Closed]: the request is refused and nothing is held.
	ErrUnavailable = errors.New("redisstore: redis unavailable")

	// ErrClosed means the Store was closed.
	ErrClosed = errors.New("redisstore: store closed")
)

// errBreakerOpen is returned, without allocating, for every request refused
// while the breaker is open.
var errBreakerOpen = &wrapped{msg: "redisstore: circuit breaker open", err: ErrUnavailable}

type wrapped struct {
	msg string
	err error
}

func (w *wrapped) Error() string { return w.msg + ": " + w.err.Error() }
func (w *wrapped) Unwrap() error { return w.err }
