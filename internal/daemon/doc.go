// Package daemon is the portcullis daemon: a reverse proxy (and, on its
// own listeners, a forward proxy) that applies every Portcullis limit,
// built from a [config.Config]. It assembles the packages named for what
// they hold: internal/listen (the listeners and their admission at
// accept), internal/route (a listener's route table, limits, rates and
// refusals), internal/exchange (one exchange's record and metrics),
// internal/accesslog (its line), internal/relay (the upstream exchange),
// internal/bytepath (the byte path of the event-loop server),
// internal/admin (the admin listener and live page), and the libraries
// (connlimit, httplimit, rate, quicadmit, forward, intercept).
// internal/README.md in the repository draws the map.
//
// A [Server] runs the listeners of a configuration, each of them a
// listen.Front wrapped in its admission layer (internal/listen's front.go,
// front_h3.go and tcp.go; the daemon gives it the lists of lists.go and the
// cluster Stores and rates at accept in listeners.go):
//
//   - http and https: a TCP socket wrapped in a connlimit.Listener (the
//     deny and allow lists, then the per-client cap, at accept, before a
//     byte is read or a TLS handshake runs), served by the event-loop
//     server or net/http (internal/listen's httpserve.go); https
//     negotiates HTTP/2 by ALPN.
//   - tcp: the same socket and cap, each admitted connection copied to the
//     listener's upstream.
//   - http3: a UDP socket with QUIC handshake admission (the deny and
//     allow lists, then quicadmit) and a per-client cap on proven clients,
//     served by an http3.Server.
//
// Every HTTP listener serves its requests through a route table
// (internal/route): routes picked by host and longest path prefix, each
// with its relay (internal/relay), optional concurrency, shadow and rate
// limits, behind an optional listener-wide client limit, rate and
// authentication, or, on a forward listener, the forward proxy and its
// limits. The daemon builds a listener's table with route.Build in
// buildTables (server.go), giving it the cluster's Stores
// (rates_cluster.go: with a cluster section, the route and client limits
// and the rates count in Redis, limit/redisstore). The route table of a
// listener sits behind an atomic pointer: a reload builds the new tables
// beside the running ones, swaps them in (installTables) and retires the
// old ones, and an exchange in progress finishes on the table it started
// with. A plain GET or HEAD to a route the byte path can serve is answered
// by internal/bytepath without an http.Request's full machinery, through
// the table's views (route.Table.Byte); anything else is handed to the
// full server.
//
// Every HTTP exchange is counted in its route's request metrics and, unless
// log.access_log is false, logged when it ends with what the route and the
// limits decided (internal/exchange, internal/accesslog).
//
// The admin listener is internal/admin: /metrics, /debug/limits (see
// [Server.Snapshot]), /healthz, /readyz and the live page. The daemon
// starts it and implements its Source (admin.go): the listeners, route
// tables (route.Table.Admin and Collect) and limiters running now, the
// metrics collectors, readiness, and the cluster's Redis health.
//
// Lifecycle: [Start] binds everything and serves; [Server.Reload] applies a
// new configuration (reload.go); [Server.Shutdown] drains and
// [Server.Close] stops at once. The operator's view is docs/daemon.md in
// the repository.
package daemon
