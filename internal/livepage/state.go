// Package livepage is the admin listener's live page: a server-rendered
// HTML page of the daemon's listeners, routes, busiest keys, QUIC admission
// and Redis health, with a chart of the refusals per second over the last
// 15 minutes, kept up to date by a server-sent event stream.
//
// A [Sampler] asks a [Source] (the daemon) for its [State] once a second,
// turns the refusal counters into rates and keeps the last 900 seconds of
// them; [Handler] serves the page, the event stream and the embedded
// assets from it. The package knows nothing of the daemon: it imports no
// package of Portcullis.
package livepage

import "time"

// State is what the page shows at one moment. A [Source] fills every field
// but the rates (RefusedPerSec, PerSec), which the [Sampler] computes from
// the counters of two successive States.
type State struct {
	Time      time.Time  `json:"time"`
	Listeners []Listener `json:"listeners"`
	// Keys are the busiest client keys of every listener and limit,
	// busiest first: by permits or connections in use, then waiting, then
	// refusals.
	Keys []Key `json:"keys"`
	// QUIC is the handshake admission of every http3 listener.
	QUIC []QUIC `json:"quic"`
	// Redis is the cluster's Redis; nil without a cluster section.
	Redis *Redis `json:"redis"`
	// Upstream is the requests that got no response from their upstream,
	// by listener, route and kind, for each of them that has counted one.
	Upstream []UpstreamErrors `json:"upstream"`
	// Shadow is every limit and rate that only counts (shadow, shadow_limit,
	// dry_run), with what it would have refused.
	Shadow []Shadow `json:"shadow"`
}

// Requests is the HTTP exchanges a listener ended, in all and by status
// class, from the counter /metrics exposes as
// portcullis_http_requests_total (summed over the listener's routes).
type Requests struct {
	Total  uint64  `json:"total"`
	PerSec float64 `json:"per_sec"`
	// Classes are 1xx to 5xx and 499 (the client left while its request
	// waited, apart from 4xx), always all six, in the order of
	// [StatusClasses].
	Classes []Count `json:"classes"`
}

// StatusClasses are the code labels of portcullis_http_requests_total, in
// the order the page shows them.
var StatusClasses = []string{"1xx", "2xx", "3xx", "4xx", "499", "5xx"}

// Count is a counter and its rate over the last sample, which the
// [Sampler] fills.
type Count struct {
	// Name says what is counted: a status class ("2xx", "499").
	Name   string  `json:"name"`
	Count  uint64  `json:"count"`
	PerSec float64 `json:"per_sec"`
}

// UpstreamErrors is the requests of one route (or of a listener's forward
// proxy) that got no response from their upstream, of one kind, from
// portcullis_upstream_errors_total.
type UpstreamErrors struct {
	// ID names the line across States ("web/down/refused").
	ID       string `json:"id"`
	Listener string `json:"listener"`
	// Route is empty for the listener's own (a forward proxy's targets).
	Route string `json:"route"`
	// Kind is the kind label: refused, connect, timeout, reset,
	// bad_response, other.
	Kind   string  `json:"kind"`
	Count  uint64  `json:"count"`
	PerSec float64 `json:"per_sec"`
}

// Shadow is one limit or rate in shadow mode (a limit's shadow: true, a
// route's shadow_limit, a rate's dry_run): it lets every request through
// and counts those it would have refused.
type Shadow struct {
	// ID names the line across States; it is the ID of the limit's Row.
	ID   string `json:"id"`
	Name string `json:"name"`
	// Limit says what the limit allows, as the Row's Limit.
	Limit string `json:"limit"`
	// WouldRefuse counts the requests it let through that it would have
	// refused (the shadow_refused_total of its limit or rate).
	WouldRefuse uint64  `json:"would_refuse"`
	PerSec      float64 `json:"per_sec"`
}

// Row is one line of the listeners table: a listener's connections (its
// refusals happen at accept) or one of its limits (refusals of requests).
type Row struct {
	// ID names the row across States ("web", "web/route/slow"); the rate
	// of a row is computed from the Refused of the same ID a second ago.
	ID   string `json:"id"`
	Name string `json:"name"`
	// Limit says what bounds the row, as the configuration says it
	// ("16 connections per client", "4 per client_ip, queue 4").
	Limit string `json:"limit"`
	InUse int    `json:"in_use"`
	// Waiting is the requests waiting now: in a limit's queue, or being
	// delayed by a rate (portcullis_rate_delaying).
	Waiting int `json:"waiting"`
	// Refused counts refusals since the row's limiter was built (a reload
	// that replaces it starts again from zero).
	Refused uint64 `json:"refused"`
	// RefusedPerSec is the rate of Refused over the last sample; the
	// Sampler fills it.
	RefusedPerSec float64 `json:"refused_per_sec"`
}

// Listener is one listener with its connections and its limits.
type Listener struct {
	// Row is the listener's connections: open, being admitted, refused at
	// accept.
	Row
	Protocol string `json:"protocol"`
	Addr     string `json:"addr"`
	// Limits are the listener's request limits: its per-client limit, its
	// routes' limits and rates, its forward limits.
	Limits []Row `json:"limits"`
	// Requests is the exchanges the listener ended; nil for a listener
	// that counts none (tcp).
	Requests *Requests `json:"requests,omitempty"`
	// Warnings are the unsafe settings of the listener, each naming the
	// setting ("forward.allow_public_clients: ..."). Nil means none.
	Warnings []string `json:"warnings,omitempty"`
	// Paths say how each route's HTTP/1.1 requests are served ("route
	// api: event_loops", "route site: full_server (an https upstream,
	// https://10.0.0.1)"; config.RoutePaths). Nil for listeners without
	// routes.
	Paths []string `json:"paths,omitempty"`
}

// Key is one busy client key.
type Key struct {
	// Where names the listener and limit that counts the key
	// ("web connections", "web/slow").
	Where   string `json:"where"`
	Key     string `json:"key"`
	InUse   int    `json:"in_use"`
	Waiting int    `json:"waiting"`
	Refused uint64 `json:"refused"`
}

// QUIC is the handshake admission of one http3 listener.
type QUIC struct {
	Listener string `json:"listener"`
	// InProgress is the handshakes in progress now; above Threshold,
	// clients without an address token are sent a Retry (RetryOn).
	InProgress    int64 `json:"in_progress"`
	Threshold     int64 `json:"threshold"`
	MaxInProgress int64 `json:"max_in_progress"`
	RetryOn       bool  `json:"retry_on"`
	// CompletionRate is the smoothed handshakes completed per second.
	CompletionRate int64 `json:"completion_rate"`
}

// Redis is the health of the cluster's Redis as the daemon sees it.
type Redis struct {
	Addrs   []string `json:"addrs"`
	OnError string   `json:"on_error"`
	// Reachable reports whether a PING was answered within the timeout;
	// PingMillis is how long it took, Error why it failed.
	Reachable  bool    `json:"reachable"`
	PingMillis float64 `json:"ping_ms"`
	Error      string  `json:"error,omitempty"`
	// OpenBreakers is how many of the daemon's Redis stores have their
	// circuit breaker open, since OutageSince (zero when none).
	OpenBreakers int       `json:"open_breakers"`
	OutageSince  time.Time `json:"outage_since"`
	// Degraded lists why some cluster limit decides without Redis now
	// (timeout, auth, refused, error), as portcullis_cluster_degraded
	// does; empty when every limit asks Redis.
	Degraded []string `json:"degraded,omitempty"`
}
