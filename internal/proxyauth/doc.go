// Package proxyauth authenticates the clients of the daemon's forward proxy
// (and, for reverse-proxy routes keyed by user, its clients) with HTTP
// Basic credentials checked against an htpasswd file of bcrypt hashes.
//
// An [Authenticator] is made from a [Config] by [New] and wraps handlers
// with [Authenticator.Wrap]. A request without right credentials is
// answered 407 (or 401) before any other handler runs, so a limiter placed
// after Wrap never counts it; a request with right credentials goes on
// without its credentials header and with the verified user name in its
// context, where [UserOf] reads it for a per-user limit
// (httplimit.ByUser(proxyauth.UserOf)). A name a client merely claims never
// gets there.
//
// bcrypt is slow on purpose, so the package guards the CPU it spends:
// credentials verified once are remembered by a keyed hash (never the
// password) so that a keep-alive client pays bcrypt once; at most
// MaxConcurrentChecks checks run at once over all clients and one at a time
// per client; and a [FailureLimiter] refuses, without any check, a client
// that failed too often (429). An unknown user costs the same bcrypt run as
// a wrong password.
//
// [Authenticator.Reload] reads the file again; a file that fails to load
// leaves the previous users in effect. [Authenticator.PrepareReload] splits
// it in two for a caller that reloads several things all or nothing: the
// daemon reads the file while it prepares a reload on SIGHUP, and puts it
// in effect only when the whole reload commits.
package proxyauth
