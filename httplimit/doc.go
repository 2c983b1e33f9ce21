// Package httplimit caps how many HTTP exchanges run at once per client,
// user, target host or any key, as an http.Handler middleware over package
// limit.
//
// A [Limiter] is built from a [Config] and wraps handlers with
// [Limiter.Wrap]; [MaxConcurrentPerClient] is the one-call form of the
// daemon's --max-concurrent-per-client N. Each request is keyed by a
// [KeyFunc] ([ByClientIP], [ByUser], [ByBasicAuthUser], [ByHost],
// [ByHeader], or any function); an empty key leaves it unlimited.
//
// Scope: a Limiter counts only the requests that pass through the handlers
// it wraps. A limit mounted on /hoge counts /hoge exchanges, nothing else;
// a server-wide per-client limit is a Limiter wrapped around the whole mux.
// (Apache's mod_limitipconn counts every request of the address in the
// whole server, whatever Location the limit is set on; this package does
// not. See docs/httplimit.md.)
//
// Lifetime of a permit: it is taken when the middleware is entered, so a
// middleware before it (authentication) refuses first and is never
// counted, and it is released exactly once when the exchange ends: the
// handler returns or panics (the panic goes on after the release), or the
// client leaves while the request waits in the queue. A tunnel (CONNECT,
// an HTTP/1.1 Upgrade such as WebSocket, HTTP/2 extended CONNECT) holds
// its permit until the tunnel closes: a hijacked connection releases it on
// Close. Established tunnels are exempt from reclaim. With
// Config.ReleaseTunnels the permit is released once the tunnel is
// established (101, or 2xx to CONNECT); [ReleaseTunnelPermits] lets the
// handler give them back when it chooses (an intercepting proxy, once the
// requests inside a CONNECT are counted one by one). Config.TunnelPermits
// counts tunnels apart from short exchanges.
//
// A request over the limit waits in its key's FIFO queue if Config allows
// one, blocking only its own goroutine, or is refused: 429 Too Many
// Requests, text/plain, Retry-After: 1 by default; everything about the
// answer can be replaced. Shadow mode counts and reports refusals but lets
// the requests through; a shadow Limiter can run inside an enforced one on
// the same route, each with its own counts.
//
// [NewRate] builds the other kind of limit on the same keys: a
// [RateLimiter], requests per second per key with nginx limit_req's burst
// and delay modes (package rate), answering refusals with 429,
// Retry-After and the IETF RateLimit and RateLimit-Policy fields computed
// from the key's state; a delayed request waits on its own goroutine and
// gives its place back if its client leaves. See docs/ratelimit.md.
//
// An ordinary exchange costs one small allocation, the hook that ends it if
// its permit is reclaimed (none with a negative ReclaimAfter): the
// ResponseWriter is wrapped only for tunnel requests, and ByClientIP caches
// the key strings of recent clients.
package httplimit
