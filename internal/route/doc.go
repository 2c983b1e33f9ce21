// Package route is a listener's route table and what it admits with: the
// handler chain an HTTP listener serves each request through, built from
// the listener's configuration by [Build].
//
// A reverse listener's chain is, in order: the path's shape and CONNECT
// refused (shape.go), authentication (forward.go's authenticate, with
// proxyauth), the listener's rate (rates.go), the router that picks a
// request's route by host and longest path prefix (routes.go), the
// route's rate, the listener's client limit, the route's shadow limit and
// limit (limits.go, httplimit), and the route's relay (internal/relay).
// Every rate comes before every concurrency limit, so that a request a
// rate delays holds no permit while it waits. A refusal answers with the
// limit's status, Retry-After and response block (refusal.go). A forward
// listener's chain is its authentication, rate, client limit and forward
// limits around a forward.Proxy, with the TLS interception of
// intercept.Assembly when it has one (forward.go, intercept.go).
//
// With a cluster, the limits and rates count through the Stores the daemon
// gives in [Config].Stores ([Stores]); the package knows nothing of Redis.
// The byte path (internal/bytepath) reads a table through the views
// bytepath.go fills in ([Table.Byte]); a route it cannot serve (a rate, a
// cluster Store that cannot grant from the permits it holds, an https
// upstream, listener authentication) is left to the full chain.
//
// A table is built beside the one it replaces ([Config].Old) and keeps the
// parts built from the same settings: a limiter keeps its counts and
// waiters, a rate its keys' state, an authenticator its cache, a forward
// proxy its tunnels, an interception its leaves and sessions. The daemon
// installs the new table ([Table.Commit]), retires the old one
// ([Table.Retire]: each part it alone held closes once what uses it has
// ended), throws away one that will not serve ([Table.Discard]), and
// stops them all when it stops ([Table.Close], [Table.Stoppers]). The
// admin listener reads a table through [Table.Admin] and [Table.Collect].
//
// The package imports neither internal/daemon nor internal/listen: a
// listener serves a table through its [Table.Handler] and [Table.Byte],
// which the daemon hands it.
package route
