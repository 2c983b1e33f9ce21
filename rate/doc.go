// Package rate limits how fast each key (a client, a user, a host) may
// make requests, connections or handshakes: a keyed rate limiter with the
// semantics of nginx's limit_req, beside package limit's keyed
// concurrency limiter and over the same key types.
//
// A concurrency cap bounds how much a client holds at once; only a rate
// bounds how fast it churns cheap requests or reconnects in a loop. Both
// belong on the same keys, and the layers of Portcullis offer both:
// connlimit (new connections per second at accept), httplimit (requests
// per second, as middleware) and quicadmit (handshakes per second of proven
// clients).
//
// # The model
//
// A [Limiter] applies the generic cell rate algorithm (GCRA) to each key.
// A key's whole state is one number, its theoretical arrival time (TAT):
// with interval T = 1/Rate, a request arriving at now moves it to
// max(TAT, now) + T, and is admitted when that is at most (Burst+1)·T past
// now, refused otherwise (a refused request leaves the state alone). This
// is exactly nginx's leaky bucket: its "excess" after a request is
// (TAT - now)/T - 1. Of the admitted requests, those whose excess is above
// Delay are delayed by (TAT - now) - (Delay+1)·T, which spaces them out at
// Rate; Delay 0 delays every early request (nginx's default), [NoDelay]
// none (nginx's nodelay).
//
// There is no timer per key: a key whose TAT has passed is in a fresh
// state and is forgotten (by a sweep every second, or when its slot is
// needed), so memory follows the keys active within about one burst
// window, (Burst+1)·T. Keys are spread over shards with a lock each, and
// a decision allocates nothing.
//
// [Limiter.Allow] decides without blocking; [Limiter.Reserve] returns a
// [Reservation] whose Cancel gives back a delayed request whose caller
// left before it proceeded; [Limiter.Wait] waits out the delay on the
// caller's goroutine and gives the request back if the context ends first.
// Every [Decision] carries what the IETF RateLimit header fields need: the
// remaining count, the time to reset, and for a refusal the time to retry.
//
// Differences from nginx, all within its millisecond granularity: times
// are kept in nanoseconds (nginx rounds to its cached millisecond clock and
// truncates its arithmetic to thousandths of a request, so nginx's 1r/m is
// really one per 62.5 s; here it is one per 60 s), and the interval is
// rounded up to the nanosecond. See docs/ratelimit.md.
//
// A [Store] shares the state with other nodes (package
// limit/redisstore's RateStore), with a local fast path whose exactness
// bound docs/ratelimit.md works out.
package rate
