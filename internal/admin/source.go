package admin

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/connlimit"
	"github.com/seed-a07d1050/portcullis/httplimit"
	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/forward"
	"github.com/seed-a07d1050/portcullis/internal/intercept"
	"github.com/seed-a07d1050/portcullis/internal/livepage"
	"github.com/seed-a07d1050/portcullis/internal/proxyauth"
	"github.com/seed-a07d1050/portcullis/limit"
	"github.com/seed-a07d1050/portcullis/quicadmit"
	"github.com/seed-a07d1050/portcullis/rate"
)

// Source is a running daemon as the admin listener reads it. Its methods
// are called on the admin listener's goroutines (one per request, and the
// live page's sampler once a second), concurrently with each other and
// with the daemon's reloads: each returns what is in force when it is
// called, and none may block except Redis, for at most its ctx.
type Source interface {
	// Listeners returns every listener now, in configuration order. The
	// values are read (counts, busy keys) when the admin package formats
	// them, just after.
	Listeners() []Listener
	// Collect sends the metrics of every listener, limiter and store
	// running now, as a prometheus.Collector does; /metrics calls it at
	// each scrape, so that its series follow reloads.
	Collect(ch chan<- prometheus.Metric)
	// Ready reports whether the daemon serves its whole configuration,
	// and when it does not, why, in a line (for /readyz).
	Ready() (ok bool, why string)
	// Degraded names the cluster stores that decide by on_error now
	// because Redis failed; empty without a cluster or when all is well.
	Degraded() []string
	// Redis returns the health of the cluster's Redis for the live page,
	// nil without a cluster. It may PING Redis, within ctx.
	Redis(ctx context.Context) *livepage.Redis
}

// A Listener is one listener of the daemon as the admin listener reads it:
// its settings and the objects its counts are read from. The daemon fills
// it; the admin package formats it for /debug/limits and the live page.
type Listener struct {
	// Config is the listener's effective configuration: its name,
	// protocol, caps, routes_from and warnings. Not modified.
	Config *config.Listener
	// Addr is the address the listener is bound to.
	Addr string
	// Conns are the listener's connection counts and the client keys
	// holding connections.
	Conns Conns
	// AcceptRate is the listener's conn_rate (or an http3 listener's
	// handshake_rate); nil without one.
	AcceptRate *AcceptRate
	// Table is the listener's route table; nil for a tcp listener and for
	// one that serves the routes of another (routes_from).
	Table *Table
	// QUIC is an http3 listener's handshake admission; nil for another.
	QUIC *quicadmit.Controller
}

// Conns are a listener's connection counts: a [connlimit.Listener], or
// what an http3 listener maps onto it.
type Conns interface {
	Stats() connlimit.Stats
	// Snapshot returns at most top client keys holding connections,
	// busiest first.
	Snapshot(top int) limit.Snapshot[clientkey.Key]
}

// AcceptRate is a rate the listener applies at accept, keyed by client.
type AcceptRate struct {
	Limit rate.Limit
	// Handshake is true for an http3 listener's handshake_rate, false for
	// a conn_rate.
	Handshake bool
	// Snapshot returns the rate's totals and at most top keys, the furthest
	// ahead first.
	Snapshot func(top int) rate.Snapshot[clientkey.Key]
}

// Table is a listener's route table as it serves now.
type Table struct {
	Client *Limit // the listener-wide per-client limit; nil without
	Rate   *Rate  // the listener's request rate; nil without
	Routes []Route
	// Auth is the listener's authentication; nil without an auth block.
	Auth *proxyauth.Authenticator
	// Forward is the proxy of a forward listener; nil for a reverse one.
	Forward *Forward
}

// Route is one route of a table.
type Route struct {
	Name string
	// Path is how the route's HTTP/1.1 requests are served now, as the
	// running tables decide it.
	Path config.DataPath
	// Planned is how the daemon said at start or at its last reload that
	// the route would be served, and why; nil when it said nothing.
	Planned *config.RoutePath
	Limit   *Limit // nil without a limit
	Shadow  *Limit // the route's shadow_limit; nil without
	Rate    *Rate  // nil without a rate
}

// Limit is a concurrency limit: its settings and its limiter.
type Limit struct {
	Config  config.Limit // effective
	Limiter *httplimit.Limiter
}

// Rate is a request rate: its settings and its limiter.
type Rate struct {
	Config  config.Rate // effective
	Limiter *httplimit.RateLimiter
}

// Forward is a forward listener's proxy and limits.
type Forward struct {
	Proxy  *forward.Proxy
	Limits []Limit // outermost first
	// Interceptor and Upstream are its TLS interception, and the
	// connections to the targets of intercepted sessions; nil without
	// interception.
	Interceptor *intercept.Interceptor
	Upstream    *intercept.Upstream
}
