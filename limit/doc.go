// Package limit is the keyed counting semaphore that every layer of
// Portcullis counts through: connections per client at accept time,
// exchanges per client or user on an HTTP route, QUIC connections per
// proven client.
//
// A [Limiter] gives each key a number of permits, as its [Policy] says
// (Permits, default 64, or a per-key number from Overrides or PermitsFor).
// The same Policy type is embedded by httplimit, grpclimit and connlimit,
// so that a limit reads the same in every layer. [Limiter.Acquire] takes
// one, waiting in the key's bounded FIFO queue when the key is at its limit
// and the configuration allows a queue; [Limiter.TryAcquire] never waits.
// Both return a [Permit] whose Release gives it back exactly once, however
// often and from however many goroutines it is called.
//
// Defaults, all taken where a Config field is zero:
//   - 64 permits per key; [Unlimited] (-1) means no limit, and a count
//     below it is an error;
//   - no global cap over all keys;
//   - no queue: a request over the limit is refused at once with
//     [ErrLimited]; with a queue, waiters are admitted in arrival order and
//     a waiter whose context ends leaves the queue at once;
//   - enforcing (not shadow) mode;
//   - permits held for more than 10 minutes are reclaimed, counted, and
//     logged at WARN to Config.Logger if one is set (tunnels call
//     [Permit.Exempt] to stay);
//   - counts kept in this process only (a [Store] shares them with a
//     cluster, see limit/redisstore);
//   - the real clock (tests inject a [Clock], see limit/limittest).
//
// A key is forgotten as soon as it has no permit in use and no waiter, so
// memory follows what is in use now, never how many clients were ever
// seen. Keys are spread over shards, each with its own lock, so requests
// for different keys rarely contend; the steady state allocates nothing.
//
// Every decision is counted ([Limiter.Snapshot], [Limiter.Totals]) and can
// be reported to an [Observer] for metrics and logs, so that this package
// imports neither.
package limit
