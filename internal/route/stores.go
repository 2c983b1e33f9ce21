package route

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/internal/config"
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

// A ClientLimit is a concurrency limit of a table that counts in a
// cluster Store and is keyed by the client's address: the Store, and the
// permits of a key as the limit asks the Store for them.
type ClientLimit struct {
	Store LimitStore
	// Permits returns the permits of the client key named key (as
	// clientkey.Key.String writes it), Unlimited (-1) for none.
	Permits func(key string) int
}

// FirstRequestLimits returns the limits of t that a connection's first
// request will take with its client's own key, keyer's key of the peer
// address, cluster-wide: the listener's client limit, and, when t has
// exactly one route, that route's limit and shadow limit; each keyed by
// client_ip and counted in a Store, in the order a request meets them.
// With several routes a request's route is not known before it is read,
// so none is returned. Nil for a forward listener's table, for a table
// whose listener keys clients otherwise than keyer, or without a cluster.
// The daemon asks for them when a new connection's cap asks Redis, to
// prefetch their permits in the same round trip.
func (t *Table) FirstRequestLimits(keyer clientkey.Keyer) []ClientLimit {
	if t == nil || t.forward != nil {
		return nil
	}
	ls := []*limiter{t.client}
	if len(t.routes) == 1 {
		ls = append(ls, t.routes[0].shadow, t.routes[0].limit)
	}
	var out []ClientLimit
	for _, l := range ls {
		if l == nil || l.id.Keyer != keyer || (l.cfg.Key != config.KeyClientIP && l.cfg.Key != "") {
			continue
		}
		st, ok := l.store.(LimitStore)
		if !ok {
			continue
		}
		out = append(out, ClientLimit{Store: st, Permits: l.policy.PermitsOf})
	}
	return out
}
