// Package forward is the daemon's forward proxy: clients send it
// absolute-form requests (GET http://host/path) and CONNECT host:port, and
// it carries them to their target.
//
// A [Proxy] is an http.Handler. The daemon places it behind the
// authentication middleware (internal/proxyauth, which answers 407 before
// any permit is taken) and the httplimit limiters of the listener, keyed
// by client (httplimit.ByClientIP), by verified user
// (httplimit.ByUser(proxyauth.UserOf)) or by target ([ByTargetHost]):
//
//	auth.Wrap(hostLimit.Wrap(userLimit.Wrap(proxy)))
//
// A CONNECT over HTTP/1.1 is answered by hijacking the connection, so an
// httplimit limiter sees the 200 and keeps the tunnel's permit until the
// connection closes; over HTTP/2 the tunnel is the CONNECT stream itself.
//
// Every connection to a target goes through a [Dialer] under a [Policy]:
// by default, loopback, private, link-local, metadata and the other
// special-purpose ranges of the IANA registries are refused, checked on the
// address actually dialled, so that DNS cannot steer the proxy inside.
//
// Targets are normalised by [ParseTarget] (lower case, no trailing dot,
// IDNA to ASCII, explicit port, canonical IP literals), so that one target
// is one key however a client spells it.
package forward
