// Package caddyportcullis brings Portcullis admission control to Caddy:
//
//   - caddy.listeners.portcullis, a listener wrapper that caps the
//     connections each client may hold at accept time, before the TLS
//     handshake, with prefix levels, per-network overrides and trusted
//     proxies (package connlimit);
//   - http.handlers.portcullis_limit, the portcullis_limit directive, a
//     per-key concurrency limit on the routes it is placed on, with a
//     queue, 429 and Retry-After, shadow mode and keys from any Caddy
//     placeholder (package httplimit);
//   - the portcullis app, which gathers this configuration's limiters:
//     their metrics go to Caddy's Prometheus registry (the admin
//     endpoint's /metrics), their snapshot to the admin endpoint's
//     GET /portcullis/limits (admin.api.portcullis).
//
// Build Caddy with it: xcaddy build --with github.com/seed-a07d1050/portcullis/caddy.
// docs/caddy.md in the repository has the Caddyfile syntax and what each
// part guarantees.
package caddyportcullis
