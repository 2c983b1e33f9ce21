package limit

import "time"

// An EventKind says what happened to a request for a permit.
type EventKind uint8

// The events a limiter reports to its [Observer].
const (
	// Granted: a permit was handed out (possibly after waiting; see Event.Wait).
	Granted EventKind = iota + 1
	// Refused: the key or the global cap was at its limit and the request
	// could not wait.
	Refused
	// ShadowRefused: in shadow mode, a permit was handed out that the limit
	// would have refused.
	ShadowRefused
	// QueueFull: the key's wait queue was full.
	QueueFull
	// QueueTimeout: a waiter waited Config.QueueTimeout without a permit.
	QueueTimeout
	// Abandoned: a waiter's context ended before it got a permit.
	Abandoned
	// Reclaimed: a permit held longer than Config.ReclaimAfter was taken back.
	Reclaimed
	// StoreFailed: the shared Store failed and the request was refused.
	StoreFailed
)

var eventNames = [...]string{
	Granted:       "granted",
	Refused:       "refused",
	ShadowRefused: "shadow_refused",
	QueueFull:     "queue_full",
	QueueTimeout:  "queue_timeout",
	Abandoned:     "abandoned",
	Reclaimed:     "reclaimed",
	StoreFailed:   "store_failed",
}

// String returns the event's name in snake case, as used in metric labels.
func (k EventKind) String() string {
	if int(k) < len(eventNames) && eventNames[k] != "" {
		return eventNames[k]
	}
	return "unknown"
}

// An Event is one decision of a limiter.
type Event[K comparable] struct {
	Kind EventKind
	Key  K
	// Wait is how long the request waited in the queue; zero when it did
	// not wait. For Reclaimed it is how long the permit was held.
	Wait time.Duration
}

// An Observer is told of every decision a limiter makes, to feed metrics or
// logs without the limit package importing them. Observe is called
// synchronously on the goroutine that asked for the permit (or the reclaim
// goroutine), never with a lock of the limiter held; it must be fast and
// must not block. Releases are not reported: [Limiter.Snapshot] has the
// counts in use.
type Observer[K comparable] interface {
	Observe(Event[K])
}

// ObserverFunc adapts a function to an [Observer].
type ObserverFunc[K comparable] func(Event[K])

// Observe calls f(e).
func (f ObserverFunc[K]) Observe(e Event[K]) { f(e) }
