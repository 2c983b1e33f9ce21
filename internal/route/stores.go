package route

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a07d1050/portcullis/limit"
	"github.com/seed-a07d1050/portcullis/rate"
)

// Stores makes the Stores through which a table's limits and rates count
// with the other nodes of a cluster (the daemon's cluster section, on
// limit/redisstore). Its methods are called while a table is built, on
// the building goroutine, never on a request's path.
type Stores interface {
	// LimitStore returns the Store of the concurrency limit named name
	// (listener/route/kind, or listener/kind), its Redis metrics labelled
	// with labels. A nil Store and nil error: the limit counts in this
	// process only. An error fails the table's build; the error names the
	// Store.
	LimitStore(name string, labels prometheus.Labels) (LimitStore, error)

	// RateStore is LimitStore for the request rate named name
	// (listener/route/rate, or listener/rate).
	RateStore(name string, labels prometheus.Labels) (RateStore, error)
}

// A LimitStore is a concurrency limit's cluster Store. Close is called
// once, when the limit is closed; Collector is the Store's Redis metrics.
type LimitStore interface {
	limit.Store[string]
	Close() error
	Collector() prometheus.Collector
}

// A RateStore is a request rate's cluster Store. Close is called once,
// when the rate is closed, and flushes what the node has not told Redis
// yet; Collector is the Store's Redis metrics.
type RateStore interface {
	rate.Store[string]
	Close() error
	Collector() prometheus.Collector
}
