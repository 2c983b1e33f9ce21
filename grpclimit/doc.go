// Package grpclimit caps how many gRPC calls run at once per client, API
// key, method or any key, over package limit, at two points of a
// grpc.Server:
//
//   - [Limiter.TapHandle] runs on the connection's reader goroutine when a
//     new stream's headers arrive, before grpc-go creates the stream,
//     starts a handler goroutine or reads any message. A client over its
//     limit is answered RESOURCE_EXHAUSTED there and costs the server no
//     more than its headers.
//   - [Limiter.UnaryServerInterceptor] and [Limiter.StreamServerInterceptor]
//     hold a permit for the whole call: it is released exactly once when
//     the handler returns or panics (for a streaming call, when the stream
//     ends). They wait in the key's queue when Config.QueueSize allows.
//
// [ServerOptions] installs the three for one or more limiters. With the tap
// handle installed, the permit it takes is handed to the interceptor
// through the stream's context, so a call is counted once.
//
// The tap handle never blocks: grpc-go calls it on the transport's reader
// goroutine with the transport's lock held, so a wait there would stall
// every stream of the connection. It can only try. How it meets the queue:
//
//   - Without a queue (Config.QueueSize zero) the tap handle takes the
//     call's permit itself (limit.Limiter.TryAcquire) and refuses the
//     stream when there is none. The interceptor then adopts that permit.
//   - With a queue, a call over the limit must wait, and only a goroutine
//     of its own may wait: the tap handle lets it through as long as the
//     key has fewer than Permits+QueueSize calls admitted (running or
//     waiting), and refuses it otherwise, since the queue would refuse it
//     anyway. The interceptor takes the call's permit, waiting in the queue
//     for at most Config.QueueTimeout and leaving as soon as the call's
//     context ends (client cancel, deadline, disconnect).
//   - In shadow mode the tap handle refuses nothing; the interceptor
//     counts and reports what would have been refused.
//
// Every permit the tap handle takes is also tied to the stream's context,
// which grpc-go cancels whenever a stream ends, so that a stream that never
// reaches an interceptor (an unknown method, a connection that drops
// first) gives its permit back too.
//
// Refusals are gRPC statuses: RESOURCE_EXHAUSTED when the limit refused
// (over the limit, queue full, wait limit reached), UNAVAILABLE when the
// limiter could not decide (closed, shared Store failed), and the context's
// status (CANCELLED, DEADLINE_EXCEEDED) when the client gave up while its
// call waited. RESOURCE_EXHAUSTED and UNAVAILABLE carry the retry hint of
// Config.RetryAfter twice: as a google.rpc.RetryInfo status detail, which
// any gRPC client can read, and, from the interceptors, as the
// grpc-retry-pushback-ms trailer that grpc-go's retry policy obeys (the tap
// handle cannot send it: grpc-go writes only the status of a stream it
// refused there).
//
// Calls are keyed by a [KeyFunc]: [ByPeer] (the client address, IPv4 /32
// and IPv6 /64 by default, behind trusted proxies the client they name in
// x-forwarded-for or forwarded metadata), [ByMetadata] (an API key, say) or
// [ByMethod]. Config.Methods scopes a Limiter to some methods, so that a
// method gets its own limit; several Limiters can guard one server.
//
// docs/grpc.md in the repository gives the operator's view.
package grpclimit
