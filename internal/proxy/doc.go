// Package proxy is the portcullis daemon: a reverse proxy that applies every
// Portcullis limit, built from a [config.Config].
//
// A [Server] runs the listeners of a configuration, each of them wrapped in
// its admission layer:
//
//   - http and https: a TCP socket wrapped in a connlimit.Listener (the
//     deny and allow lists, then the per-client cap, at accept, before a
//     byte is read or a TLS handshake runs), served by an http.Server;
//     https negotiates HTTP/2 by ALPN.
//   - tcp: the same socket and cap, each admitted connection copied to the
//     listener's upstream.
//   - http3: a UDP socket with QUIC handshake admission (the deny and
//     allow lists, then quicadmit) and a per-client cap on proven clients,
//     served by an http3.Server.
//
// Every HTTP listener routes requests by host and longest path prefix to
// routes, each with its upstreams (round robin, an upstream that refuses
// connections skipped for a while), an optional concurrency limit and an
// optional shadow limit (httplimit, scoped to the route), behind an optional
// listener-wide per-client limit. The route table of a listener sits behind
// an atomic pointer: a reload swaps it, and an exchange in progress finishes
// on the table it started with. With a cluster section, the route and client
// limits count in Redis (limit/redisstore).
//
// Every HTTP exchange is counted in its route's request metrics and, unless
// log.access_log is false, logged when it ends with what the route and the
// limits decided (see admission.go and accesslog.go).
//
// The admin listener serves /metrics (Prometheus: the limiters through
// promlimit, the request metrics, the Go and process collectors),
// /debug/limits (a JSON [Snapshot]), /healthz, /readyz, and the live page
// (/live/, see internal/livepage) with its event stream, sampled once a
// second while the admin listener runs.
//
// Lifecycle: [Start] binds everything and serves; [Server.Reload] applies a
// new configuration; [Server.Shutdown] drains and [Server.Close] stops at
// once. The operator's view is docs/daemon.md in the repository.
package proxy
