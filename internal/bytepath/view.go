package bytepath

import (
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/httplimit"
	"github.com/seed-a07d1050/portcullis/internal/exchange"
	"github.com/seed-a07d1050/portcullis/internal/httppath"
	"github.com/seed-a07d1050/portcullis/internal/relay"
)

// This file is all the byte path knows of the daemon: a listener, its
// route table and its routes, as the daemon fills them in.

// Listener is what the byte path needs of the listener whose connections
// it serves. The zero Listener is usable: it has no table, and the byte
// path declines every request.
type Listener struct {
	// Table returns the table the listener serves requests by now, read
	// once for each request offered, on the goroutine or loop serving it;
	// it must not block. Nil, or a nil *Table returned: the byte path takes
	// none of the listener's requests (it authenticates, has a
	// listener-wide rate, or is a forward proxy).
	Table func() *Table
	// AltSvc, when it holds a value, is a field every answer of the
	// listener carries (an HTTP/3 listener shares its routes): the byte
	// path, which writes the upstream's fields and no others, declines
	// every request while it does. Nil: never.
	AltSvc *atomic.Pointer[string]
	// Active counts the listener's exchanges under way, for its drain: the
	// byte path adds one for each exchange it serves and takes it away
	// when the exchange ends. Nil: a count of the byte path's own, which
	// nobody reads.
	Active *atomic.Int64
	// Log receives what goes wrong with the event loops themselves. Nil:
	// slog.Default().
	Log *slog.Logger
}

// settled returns a copy of l with its nil fields filled as documented.
func (l Listener) settled() *Listener {
	if l.Table == nil {
		l.Table = func() *Table { return nil }
	}
	if l.AltSvc == nil {
		l.AltSvc = new(atomic.Pointer[string])
	}
	if l.Active == nil {
		l.Active = new(atomic.Int64)
	}
	if l.Log == nil {
		l.Log = slog.Default()
	}
	return &l
}

// Table is the byte path's view of one route table of a listener. The
// daemon builds it with the table and replaces it with the table on a
// reload; an exchange under way finishes with the table it began on. The
// zero Table has no routes: the byte path declines every request.
type Table struct {
	// Routes picks the route of each request the byte path would take.
	// Nil: none.
	Routes Router
	// Opts are the options of the listener's exchanges, as its handler
	// chain records them: the byte path records, counts and logs its own
	// with the same.
	Opts exchange.Opts
	// Counts counts what the byte path did with each request it was
	// offered (portcullis_http_lean_exchanges_total). Nil: not counted.
	Counts *exchange.LeanCounts
	// OnLoop reports whether the event loops may serve a request of some
	// route (Route.OnLoop): while it is false, the loops adopt no
	// connection of the listener, which its server keeps from the start.
	OnLoop bool
	// Slashes is the listener's escaped_slashes, as the chain cleans a
	// path with it: a path it would refuse, decode or redirect is
	// declined, and the chain answers it.
	Slashes httppath.Slashes
}

// A Router picks routes for the byte path.
type Router interface {
	// Route returns the byte path's view of the route that serves r, as
	// the listener's handler chain would pick it; nil when no route would,
	// or when the byte path takes none of that route's requests (NewRoute
	// gave no Route for it). It is called once for each request the byte
	// path would take, on the goroutine or event loop serving it: it must
	// not block, and must not keep r, whose parser may reuse it.
	Route(r *http.Request) *Route
}

// Route is a route the byte path may serve, built by [NewRoute].
type Route struct {
	name    string
	metrics *exchange.RouteMetrics // nil: the listener's (Table.Opts.Metrics)
	relay   *relay.Relay
	limits  []Limit
	// onLoop: the event loops may serve it too (see Loops): every
	// upstream is an IP address, to which a loop connects without asking
	// a resolver.
	onLoop bool
}

// Limit is one of a route's concurrency limits, as the byte path takes
// them: quietly, a permit granted at once or the request declined.
type Limit struct {
	// By names the limit in the access line ("client", "shadow",
	// "route_limit"), as the chain's limits record their admission.
	By string
	// Limiter is the limit. The byte path never waits for a round trip to
	// take a permit: a Limiter with a cluster Store grants it only from
	// permits the Store holds for this process already (limit.HeldStore),
	// and otherwise declines the request to the chain.
	Limiter *httplimit.Limiter
	// ByPeer says that Limiter keys requests by the client's address alone
	// (httplimit.ByClientIP with Resolver), so that the key a connection's
	// first request had is the key of all its requests, and is kept.
	ByPeer bool
	// Resolver is the resolver Limiter keys with, when ByPeer.
	Resolver *clientkey.Resolver
}

// NewRoute returns the byte path's view of the route named name, served by
// rl through limits, given in the order the chain takes them, with the
// request metrics in metrics (nil: the listener's). It returns nil and no
// error when rl cannot send heads as bytes (an https upstream, a system
// without the upstream transport's peek): the byte path then takes none
// of the route's requests, and the chain serves them. It returns an error
// when rl is nil, a limit has no Limiter, or the limits are more than an
// access line names (exchange.MaxKeys).
func NewRoute(name string, metrics *exchange.RouteMetrics, rl *relay.Relay, limits []Limit) (*Route, error) {
	if rl == nil {
		return nil, fmt.Errorf("bytepath: route %q: no relay", name)
	}
	if len(limits) > exchange.MaxKeys {
		return nil, fmt.Errorf("bytepath: route %q: %d limits, at most %d", name, len(limits), exchange.MaxKeys)
	}
	for i, l := range limits {
		if l.Limiter == nil {
			return nil, fmt.Errorf("bytepath: route %q: limit %d (%q) has no Limiter", name, i, l.By)
		}
	}
	ok, onLoop := rl.SendsHeads()
	if !ok {
		return nil, nil
	}
	return &Route{name: name, metrics: metrics, relay: rl, limits: limits, onLoop: onLoop}, nil
}

// OnLoop reports whether the event loops may serve the route's requests
// too: every upstream is an IP address, to which a loop connects without
// asking a resolver. A nil Route reports false.
func (rt *Route) OnLoop() bool { return rt != nil && rt.onLoop }
