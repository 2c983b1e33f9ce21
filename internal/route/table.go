package route

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"sync/atomic"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/accesslog"
	"github.com/seed-a07d1050/portcullis/internal/bytepath"
	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/exchange"
	"github.com/seed-a07d1050/portcullis/internal/relay"
	uptransport "github.com/seed-a07d1050/portcullis/internal/upstream"
)

// Table is everything an HTTP listener needs to serve one request under
// one configuration: its handler chain, its limiters and rates, its
// authentication and, for a forward listener, its proxy. A listener holds
// its table in an atomic.Pointer: a reload builds a new table beside the
// old one ([Build] with Config.Old), stores it, and retires the old one
// ([Table.Retire]); a request that already loaded the old table finishes
// on it, with its limiters and upstreams. A nil *Table has no parts: its
// methods that only read return nothing.
type Table struct {
	name    string       // the listener's
	handler http.Handler // authentication, the listener's rate, then the router or the forward proxy
	series  []string     // the route labels of its request metrics ("": no route)
	client  *limiter     // nil without a client limit
	rate    *rateLimiter // the listener's rate; nil without
	routes  []*routeState
	auth    *authState    // nil without authentication
	forward *forwardState // nil for a reverse listener

	// lean is the byte path's part of the table (internal/bytepath): nil
	// unless http1_server is eventloop (or lean) and the chain is only
	// routes.
	lean *bytepath.Table
}

// routeState is a route's limiters, kept for snapshots, metrics and reuse.
type routeState struct {
	name   string
	rate   *rateLimiter // nil: no rate
	limit  *limiter     // nil: no limit
	shadow *limiter     // nil: no shadow limit

	lean *bytepath.Route // nil: the byte path declines the route's requests
}

// Handler returns the handler that serves a request on t: every
// exchange of the listener goes through it, from authentication to the
// relay.
func (t *Table) Handler() http.Handler { return t.handler }

// Byte returns the byte path's part of t, nil when the byte path serves
// none of t's requests (internal/bytepath reads it for each request).
func (t *Table) Byte() *bytepath.Table { return t.lean }

// Series returns the route labels of t's request metrics ("" for the
// listener's requests no route took), for pruning the series no table
// serves any more.
func (t *Table) Series() []string {
	if t == nil {
		return nil
	}
	return t.series
}

// limiters returns every limiter of t.
func (t *Table) limiters() []*limiter {
	var out []*limiter
	if t == nil {
		return nil
	}
	if t.client != nil {
		out = append(out, t.client)
	}
	for _, r := range t.routes {
		for _, l := range []*limiter{r.limit, r.shadow} {
			if l != nil {
				out = append(out, l)
			}
		}
	}
	if t.forward != nil {
		out = append(out, t.forward.limits...)
	}
	return out
}

// Config is what [Build] builds a listener's table from. Listener is
// required; every other zero value is usable and says what it means.
type Config struct {
	// Listener is the listener's effective configuration: an HTTP
	// listener with routes of its own, or a forward listener.
	Listener *config.Listener

	// Old is the table the new one replaces, whose parts built from the
	// same settings it keeps (limiters with their counts and waiters,
	// rates with their keys' state, the authenticator, the forward proxy,
	// the interception). Nil at start.
	Old *Table

	// Log receives the lines of the table's limiters, rates, relays and
	// proxies. Nil means slog.Default().
	Log *slog.Logger

	// Stores, when set, makes the Stores through which the table's
	// limits and rates count with the other nodes of a cluster. Nil: every
	// count stays in this process.
	Stores Stores

	// Transport carries the relays' exchanges with the upstreams. Nil
	// means a new one (relay.NewTransport) for this table alone.
	Transport *uptransport.Transport

	// Buffers lends the relays their copy buffers. Nil means a pool of
	// this table's own (relay.NewBufferPool).
	Buffers httputil.BufferPool

	// Access is where access lines go. Nil: the table logs none.
	Access *accesslog.Logger

	// Metrics holds the request metrics (portcullis_http_*). Nil: the
	// table counts none.
	Metrics *exchange.Metrics

	// Drain is how long a replaced interceptor's sessions may run on (the
	// configuration's shutdown_timeout). Zero: they are cut at once.
	Drain time.Duration

	// Wait bounds how long a stopping interceptor waits, once it has cut
	// its sessions, for the requests inside them to return. Zero: it does
	// not wait.
	Wait time.Duration

	// Stopping, when set, tells the exchanges that the server is draining
	// (they close their connections). Nil: never.
	Stopping *atomic.Bool

	// ReverseProxy sends the routes' requests through
	// httputil.ReverseProxy instead of the relay (and none on the byte
	// path), for the benchmarks and differential tests that compare the
	// two. False in production.
	ReverseProxy bool
}

// tableBuilder builds the table of one listener.
type tableBuilder struct {
	Config
	lc     *config.Listener // Config.Listener
	id     Identity
	old    *Table
	log    *slog.Logger
	series []string             // the route labels routeMetrics handed out
	ids    *exchange.RequestIDs // the listener's request ids; nil: none (set by build)
}

// Build builds the table of cfg.Listener, keeping the parts of cfg.Old
// built from the same settings. On error nothing it built is left open,
// cfg.Old is unchanged, and the error says which listener and part
// failed.
func Build(cfg Config) (*Table, error) {
	if cfg.Listener == nil {
		return nil, fmt.Errorf("route: build a table: no listener")
	}
	id, err := NewIdentity(cfg.Listener)
	if err != nil {
		return nil, err
	}
	b := &tableBuilder{Config: cfg, lc: cfg.Listener, id: id, old: cfg.Old, log: cfg.Log}
	if b.log == nil {
		b.log = slog.Default()
	}
	if b.Transport == nil {
		b.Transport = relay.NewTransport()
	}
	if b.Buffers == nil {
		b.Buffers = relay.NewBufferPool()
	}
	t, err := b.build()
	if err != nil {
		return nil, err
	}
	t.name, t.series = b.lc.Name, b.series
	return t, nil
}

// build builds the table. A request passes, in order: authentication, the
// listener's rate, the router, the route's rate, the listener's client
// limit, the route's shadow limit and limit, the proxy: every rate before
// every concurrency limit, so that a request a rate delays holds no permit
// while it waits.
func (b *tableBuilder) build() (*Table, error) {
	if b.lc.IsForward() {
		return b.buildForward()
	}
	t := &Table{}
	b.ids = exchange.NewRequestIDs(b.lc.RequestID, b.id.Resolver)
	var err error
	if cl := b.lc.ClientLimit; cl != nil {
		if t.client, err = b.limiter(cl, "", kindClient); err != nil {
			return nil, err
		}
	}
	if b.lc.Rate != nil {
		if t.rate, err = b.rateLimiter(b.lc.Rate, ""); err != nil {
			t.Discard(b.old)
			return nil, err
		}
	}
	var routes []*route
	for i := range b.lc.Routes {
		rc := &b.lc.Routes[i]
		rs, h, err := b.route(rc, t.client)
		if err != nil {
			t.Discard(b.old)
			return nil, err
		}
		t.routes = append(t.routes, rs)
		r := &route{name: rc.Name, prefix: rc.PathPrefix, handler: h, metrics: b.routeMetrics(rc.Name), lean: rs.lean}
		if r.prefix == "" {
			r.prefix = "/"
		}
		for _, h := range rc.Host {
			r.hosts = append(r.hosts, parseHostPattern(h))
		}
		routes = append(routes, r)
	}
	var h http.Handler = &router{routes: routes}
	if t.rate != nil {
		h = t.rate.wrap(h)
	}
	if err := b.authenticate(t, &h); err != nil {
		t.Discard(b.old)
		return nil, err
	}
	pp := pathPolicyOf(b.lc.EscapedSlashes)
	h = reverseRequests(h, pp)
	opts := b.exchangeOpts()
	t.handler = exchange.Handler(h, opts)
	if b.lc.HTTP1Server.Lean() && t.rate == nil && b.lc.Auth == nil {
		var counts *exchange.LeanCounts
		if b.Metrics != nil {
			counts = b.Metrics.LeanCounts(b.lc.Name)
		}
		t.lean = byteTableOf(routes, opts, pp, counts)
	}
	return t, nil
}

func (b *tableBuilder) exchangeOpts() exchange.Opts {
	o := exchange.Opts{
		Listener: b.lc.Name, Send: b.lc.SendTimeout, Whole: b.lc.WriteTimeout,
		Metrics: b.routeMetrics(""), Stopping: b.Stopping,
	}
	if b.Access != nil {
		o.Log = b.Access
		o.Clients = accesslog.NewClients(b.id.Resolver)
		o.Extra = accesslog.ExtraOf(b.lc.AccessLog)
	}
	o.IDs = b.ids
	return o
}

// routeMetrics returns the series of route ("": the listener's requests
// no route took), or nil without metrics.
func (b *tableBuilder) routeMetrics(route string) *exchange.RouteMetrics {
	if b.Metrics == nil {
		return nil
	}
	b.series = append(b.series, route)
	return b.Metrics.Route(b.lc.Name, route)
}

// route builds the chain of one route, client being the listener's client
// limit (nil: none). On error nothing it built is left open.
func (b *tableBuilder) route(rc *config.Route, client *limiter) (*routeState, http.Handler, error) {
	p, err := relay.NewPool(rc.Upstreams)
	if err != nil {
		return nil, nil, fmt.Errorf("route: listener %s route %s: upstreams: %w", b.lc.Name, rc.Name, err)
	}
	rs := &routeState{name: rc.Name}
	fw := relay.NewForwarding(b.id.Resolver)
	metrics := b.routeMetrics(rc.Name)
	rl := relay.New(p, fw, b.Transport, rc.UpstreamTimeout, b.Buffers, b.log, metrics, b.ids)
	var h http.Handler = rl
	if b.ReverseProxy {
		h = relay.NewReverseProxy(p, fw, b.Transport, rc.UpstreamTimeout, b.Buffers, b.log)
	}
	if rc.Limit != nil {
		if rs.limit, err = b.limiter(rc.Limit, rc.Name, kindRoute); err != nil {
			return nil, nil, err
		}
		h = rs.limit.lim.Wrap(h)
	}
	if rc.ShadowLimit != nil {
		// Outside the enforcing limit, so it sees every request of the
		// route, including those the enforcing limit refuses or queues.
		if rs.shadow, err = b.limiter(rc.ShadowLimit, rc.Name, kindShadow); err != nil {
			(&Table{routes: []*routeState{rs}}).Discard(b.old)
			return nil, nil, err
		}
		h = rs.shadow.lim.Wrap(h)
	}
	if client != nil {
		h = client.lim.Wrap(h)
	}
	if rc.Rate != nil {
		if rs.rate, err = b.rateLimiter(rc.Rate, rc.Name); err != nil {
			(&Table{routes: []*routeState{rs}}).Discard(b.old)
			return nil, nil, err
		}
		h = rs.rate.wrap(h)
	}
	if rs.lean, err = b.byteRouteOf(rc.Name, metrics, rl, rs.rate, client, rs.shadow, rs.limit); err != nil {
		(&Table{routes: []*routeState{rs}}).Discard(b.old)
		return nil, nil, fmt.Errorf("route: listener %s route %s: byte path: %w", b.lc.Name, rc.Name, err)
	}
	return rs, h, nil
}

// limiter returns the old table's limiter in the same slot when it was
// built from the same settings, so its counts and waiters carry over a
// reload; otherwise a new one.
func (b *tableBuilder) limiter(cfg *config.Limit, route string, kind limitKind) (*limiter, error) {
	if old := b.old.find(route, kind); old != nil && old.sameAs(cfg, b.id) {
		return old, nil
	}
	return newLimiter(cfg, b.id, b.lc.Name, route, kind, b.log, b.Stores)
}

// find returns t's limiter for route in slot kind, or nil.
func (t *Table) find(route string, kind limitKind) *limiter {
	if t == nil {
		return nil
	}
	if kind == kindClient {
		return t.client
	}
	if t.forward != nil {
		for _, l := range t.forward.limits {
			if l.kind == kind {
				return l
			}
		}
		return nil
	}
	for _, r := range t.routes {
		if r.name != route {
			continue
		}
		if kind == kindRoute {
			return r.limit
		}
		return r.shadow
	}
	return nil
}

// owns reports whether l is one of t's limiters.
func (t *Table) owns(l *limiter) bool {
	for _, x := range t.limiters() {
		if x == l {
			return true
		}
	}
	return false
}

// Discard closes the limiters, rates, authenticator, forward proxy and
// interception of t, a table that failed to build or that will not
// serve, that t does not share with old (the table serving now; nil:
// none). Old is left as it was.
func (t *Table) Discard(old *Table) {
	for _, l := range t.limiters() {
		if !old.owns(l) {
			l.close()
		}
	}
	t.closeNewRates(old)
	if a := t.authenticator(); a != nil && a != old.authenticator() {
		_ = a.Close()
	}
	if p := t.forwardProxy(); p != nil && p != old.forwardProxy() {
		_ = p.Close()
	}
	t.closeNewIntercept(old)
}

// retiredLimiters returns the limiters of old that t no longer uses.
func (t *Table) retiredLimiters(old *Table) []*limiter {
	var out []*limiter
	for _, l := range old.limiters() {
		if !t.owns(l) {
			out = append(out, l)
		}
	}
	return out
}

// Commit puts in effect what Build prepared for the parts t keeps from
// the table it replaces (the htpasswd file read again, the
// interceptor's chain of limits). Call it once, when t is installed: it
// cannot fail.
func (t *Table) Commit() {
	t.commitAuth()
	t.commitIntercept()
}

// Close stops every part of t at once, for a server that stops: the
// limiters and rates (permits held stay valid), the authenticator, the
// forward proxy with its tunnels, the interception with its sessions.
func (t *Table) Close() {
	for _, l := range t.limiters() {
		l.close()
	}
	for _, r := range t.rates() {
		r.close()
	}
	t.closeExtras()
}
