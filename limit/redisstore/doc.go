// Package redisstore makes a [limit.Limiter]'s limits hold across a
// cluster of nodes: it is a [limit.Store] that keeps the shared counts in
// Redis (a single server, Sentinel or Redis Cluster, through go-redis's
// UniversalClient).
//
// Each node runs its own Limiter with its own [Store] (its own NodeID); all
// use the same Prefix and Redis. A key's counts live in one Redis hash with,
// per node, a count and a lease expiry taken from Redis's own clock:
//
//   - [Store.Acquire] is one script call (EVALSHA, one round trip): it drops
//     other nodes' expired leases, sums the live counts, and counts the
//     permit for this node if the sum is under the key's limit. The limiter
//     calls it only after its own count for this node allowed the permit.
//   - [Store.TryAcquire] never calls Redis: it decides from the last cluster
//     count Redis returned for the key, or the node cap without one.
//   - [Store.Release] never blocks: releases are sent in batches by a
//     background goroutine, or ride along with the key's next acquire.
//   - Every Lease/3 the node writes its absolute count of every key it
//     holds, renewing its leases. That also repairs a lost release, a
//     script whose answer was lost, or a Redis that restarted empty. A node
//     that dies or is cut off stops renewing; its permits stop counting
//     one lease later.
//
// Every Redis call is bounded by Config.Timeout (50 ms by default). When
// Redis cannot answer, Config.OnError decides: [Open] (the default) grants
// up to the node cap, ceil(limit × NodeShare); [Closed] refuses with
// [ErrUnavailable]. A circuit breaker stops asking a dead Redis on the
// request path after a few failures in a row and probes it again after a
// backoff; once Redis answers the heartbeat rewrites every count.
//
// Waiters on one node are woken through Redis pub/sub when another node
// releases a permit of their key ([Store.NotifyRelease]); a lost message
// only delays them to their next poll.
//
// [RateStore] ([NewRate]) does the same for a rate.Limiter: one string per
// busy key holding its GCRA time in Redis's clock, one script per decision,
// refusals answered from the last known state without a round trip, an
// optional local fast path (RateConfig.LocalShare) whose bound
// docs/ratelimit.md works out, and the same OnError, NodeShare and breaker.
//
// Build the client with [NewClient]: it sets MaxRetries -1 (a retried
// script could count a permit twice) and ContextTimeoutEnabled. Metrics are
// in [Store.Stats]; package redisprom exports them to Prometheus. The model
// and its trade-offs are in docs/cluster.md.
package redisstore
