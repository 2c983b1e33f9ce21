package daemon

import (
	"fmt"
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

// routeTable is everything an HTTP listener needs to serve one request under
// one configuration. A listener holds its table in an atomic.Pointer: a
// reload stores a new table, and a request that already loaded the old one
// finishes on it, with its limiters and upstreams.
type routeTable struct {
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

// limiters returns every limiter of t.
func (t *routeTable) limiters() []*limiter {
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

// testHookReverseProxy, when set by a benchmark, makes routes send their
// requests through httputil.ReverseProxy, as the daemon did before relay,
// so that the two can be compared in one run.
var testHookReverseProxy bool

// testHookNoRequestMetrics, when set by a benchmark, builds route tables
// without request metrics, to measure what they cost.
var testHookNoRequestMetrics bool

// tableBuilder builds the route table of one listener.
type tableBuilder struct {
	lc        *config.Listener // effective
	id        identity
	old       *routeTable // the table it replaces, whose equal limiters it keeps; nil at start
	deps      limiterDeps
	transport *uptransport.Transport
	bufs      httputil.BufferPool
	accessLog bool
	access    *accesslog.Logger    // where access lines go
	metrics   *exchange.Metrics    // nil: no request metrics (tests)
	drain     time.Duration        // the configuration's shutdown_timeout
	stopping  *atomic.Bool         // the Server's draining flag; nil: none (tests)
	series    []string             // the route labels routeMetrics handed out
	ids       *exchange.RequestIDs // the listener's request ids; nil: none (set by build)
}

// build builds the table. A request passes, in order: authentication, the
// listener's rate, the router, the route's rate, the listener's client
// limit, the route's shadow limit and limit, the proxy: every rate before
// every concurrency limit, so that a request a rate delays holds no permit
// while it waits.
func (b *tableBuilder) build() (*routeTable, error) {
	if b.lc.IsForward() {
		return b.buildForward()
	}
	t := &routeTable{}
	b.ids = exchange.NewRequestIDs(b.lc.RequestID, b.id.resolver)
	var err error
	if cl := b.lc.ClientLimit; cl != nil {
		if t.client, err = b.limiter(cl, "", kindClient); err != nil {
			return nil, err
		}
	}
	if b.lc.Rate != nil {
		if t.rate, err = b.rateLimiter(b.lc.Rate, ""); err != nil {
			t.closeNew(b.old)
			return nil, err
		}
	}
	var routes []*route
	for i := range b.lc.Routes {
		rc := &b.lc.Routes[i]
		rs, h, err := b.route(rc, t.client)
		if err != nil {
			t.closeNew(b.old)
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
		t.closeNew(b.old)
		return nil, err
	}
	pp := pathPolicyOf(b.lc.EscapedSlashes)
	h = reverseRequests(h, pp)
	opts := b.exchangeOpts()
	t.handler = exchange.Handler(h, opts)
	if b.lc.HTTP1Server.Lean() && t.rate == nil && b.lc.Auth == nil {
		var counts *exchange.LeanCounts
		if b.metrics != nil && !testHookNoRequestMetrics {
			counts = b.metrics.LeanCounts(b.lc.Name)
		}
		t.lean = byteTableOf(routes, opts, pp, counts)
	}
	return t, nil
}

func (b *tableBuilder) exchangeOpts() exchange.Opts {
	o := exchange.Opts{
		Listener: b.lc.Name, Send: b.lc.SendTimeout, Whole: b.lc.WriteTimeout,
		Metrics: b.routeMetrics(""), Stopping: b.stopping,
	}
	if b.accessLog {
		o.Log = b.access
		o.Clients = accesslog.NewClients(b.id.resolver)
		o.Extra = accesslog.ExtraOf(b.lc.AccessLog)
	}
	o.IDs = b.ids
	return o
}

// routeMetrics returns the series of route ("": the listener's requests
// no route took), or nil without metrics.
func (b *tableBuilder) routeMetrics(route string) *exchange.RouteMetrics {
	if b.metrics == nil || testHookNoRequestMetrics {
		return nil
	}
	b.series = append(b.series, route)
	return b.metrics.Route(b.lc.Name, route)
}

// route builds the chain of one route, client being the listener's client
// limit (nil: none). On error nothing it built is left open.
func (b *tableBuilder) route(rc *config.Route, client *limiter) (*routeState, http.Handler, error) {
	p, err := relay.NewPool(rc.Upstreams)
	if err != nil {
		return nil, nil, fmt.Errorf("proxy: listener %s route %s: %w", b.lc.Name, rc.Name, err)
	}
	rs := &routeState{name: rc.Name}
	fw := relay.NewForwarding(b.id.resolver)
	metrics := b.routeMetrics(rc.Name)
	rl := relay.New(p, fw, b.transport, rc.UpstreamTimeout, b.bufs, b.deps.log, metrics, b.ids)
	var h http.Handler = rl
	if testHookReverseProxy {
		h = relay.NewReverseProxy(p, fw, b.transport, rc.UpstreamTimeout, b.bufs, b.deps.log)
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
			(&routeTable{routes: []*routeState{rs}}).closeNew(b.old)
			return nil, nil, err
		}
		h = rs.shadow.lim.Wrap(h)
	}
	if client != nil {
		h = client.lim.Wrap(h)
	}
	if rs.lean, err = byteRouteOf(rc.Name, metrics, rl, rc.Rate != nil, client, rs.shadow, rs.limit); err != nil {
		(&routeTable{routes: []*routeState{rs}}).closeNew(b.old)
		return nil, nil, err
	}
	if rc.Rate != nil {
		if rs.rate, err = b.rateLimiter(rc.Rate, rc.Name); err != nil {
			(&routeTable{routes: []*routeState{rs}}).closeNew(b.old)
			return nil, nil, err
		}
		h = rs.rate.wrap(h)
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
	return newLimiter(cfg, b.id, b.lc.Name, route, kind, b.deps)
}

// find returns t's limiter for route in slot kind, or nil.
func (t *routeTable) find(route string, kind limitKind) *limiter {
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
func (t *routeTable) owns(l *limiter) bool {
	for _, x := range t.limiters() {
		if x == l {
			return true
		}
	}
	return false
}

// closeNew closes the limiters, rates, authenticator and forward proxy of a
// table that failed to build or was discarded and are not borrowed from old.
func (t *routeTable) closeNew(old *routeTable) {
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

// retired returns the limiters of old that t no longer uses.
func (t *routeTable) retired(old *routeTable) []*limiter {
	var out []*limiter
	for _, l := range old.limiters() {
		if !t.owns(l) {
			out = append(out, l)
		}
	}
	return out
}
