// Package intercept is the daemon's TLS interception for its forward
// proxy: instead of tunnelling the bytes of a CONNECT it cannot see into,
// the proxy answers 200, takes the client's TLS handshake with a
// certificate of its own CA, and serves the requests inside the session
// one by one, each as a forward-proxy exchange under the listener's
// limits. So a user's limit counts the requests inside its tunnels rather
// than the tunnels, and an intercepted CONNECT holds its permits only
// until interception starts.
//
// The parts:
//
//   - a [CA] (loaded by [LoadCA], made by [NewCA] and [WriteCA], which
//     `portcullis ca create` runs) and [Leaves], which mints leaf
//     certificates for the names clients ask for: ECDSA P-256, short
//     validity, cached in a bounded LRU, minted once per name however many
//     handshakes ask for it at once;
//   - an [Interceptor], the handler in front of the forward proxy
//     ([Interceptor.Wrap]) that takes over the CONNECTs its [Rules] select
//     and serves what is inside through the handler it was given;
//   - an [Upstream], the handler that carries those requests to their
//     target over TLS, verifying its certificate, through the destination
//     policy's dialer.
//   - an [Assembly], the three as one forward listener runs them across
//     reloads ([NewAssembly]): each part whose inputs did not change is
//     kept (the leaf cache, the idle target connections, the open
//     sessions), a kept Interceptor is pointed at the new limits on
//     [Assembly.Commit], and a replaced one is drained by
//     [Assembly.Retire]. [LoadCAFiles] names the CA file at fault.
//
// The daemon assembles them with the limiters (internal/proxyauth,
// httplimit, internal/forward) in this order, each limiter's Wrap called
// twice so that both chains share its counts:
//
//	limits := func(h http.Handler) http.Handler { return hostLimit.Wrap(userLimit.Wrap(h)) }
//	ic, _ := intercept.New(intercept.Config{Leaves: leaves, Handler: limits(upstream), ...})
//	listener := auth.Wrap(limits(ic.Wrap(proxy)))
//
// A CONNECT is authenticated and admitted by the limits like any CONNECT;
// once the client's handshake is done the Interceptor gives its permits
// back (httplimit.ReleaseTunnelPermits), and every request inside then
// passes through the same limits again, keyed by the CONNECT's client
// address, its verified user and the session's target. A client that
// fails its handshake, or does not speak TLS, is closed, and the CONNECT's
// permits go with the connection.
package intercept
