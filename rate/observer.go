package rate

import "time"

// An Event is one decision, or one cancellation, of a limiter.
type Event[K comparable] struct {
	Kind Verdict
	Key  K
	// Delay is the delay imposed on a Delayed request; zero otherwise.
	Delay time.Duration
}

// An Observer is told of every decision and cancellation, to feed metrics
// or logs without this package importing them. Observe is called
// synchronously on the caller's goroutine, never with a lock of the
// limiter held; it must be fast and must not block.
type Observer[K comparable] interface {
	Observe(Event[K])
}

// ObserverFunc adapts a function to an [Observer].
type ObserverFunc[K comparable] func(Event[K])

// Observe calls f(e).
func (f ObserverFunc[K]) Observe(e Event[K]) { f(e) }
