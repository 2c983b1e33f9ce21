// Package connlimit caps the connections each client may hold, at accept
// time: a [net.Listener] wrapper that admits a connection only while its
// client is under its caps and closes it at once otherwise, before any byte
// is read and before any TLS handshake. One client (an IPv4 address or an
// IPv6 /64 by default) cannot take the server's whole connection budget
// and lock every other client out.
//
// Wrap the listener before anything else reads from its connections:
//
//	ln, _ := net.Listen("tcp", ":443")
//	cl, err := connlimit.NewListener(ln, connlimit.Config{}) // 64 per client
//	...
//	srv.Serve(tls.NewListener(cl, tlsConfig))
//
// What happens to each accepted connection, in order:
//
//  1. At Config.MaxConns held connections, Accept does not call the inner
//     Accept at all: new connections wait in the kernel backlog (as with
//     HAProxy's maxconn) rather than being accepted and dropped.
//  2. The peer is keyed by [clientkey.Keyer]: IPv4 as is, IPv4-mapped IPv6
//     (a dual-stack socket's IPv4 peer) as its IPv4 address, IPv6 masked to
//     /64. A Trusted peer is exempt, unless with ProxyProtocol its PROXY
//     header names the real client, which is then keyed instead.
//  3. The client takes one slot of its key (Permits, or an Override for
//     its network) and one at every [Level] that applies, and, with
//     Config.ConnRate, one connection of its rate (new connections per
//     second, package rate). If any refuses, the others are given back, the
//     socket is closed (with a reset if ResetOnRefuse), the refusal is
//     counted in [Stats] and logged (rate-limited, to Config.Logger if one
//     is set), and Accept goes on to the next connection: a refusal
//     is never an Accept error, which would stop an http.Server.
//  4. Accept returns a [*Conn]. Its first Close gives every slot back,
//     whoever calls it: the server, a tls.Conn, http.Server's idle
//     timeout or shutdown, a hijacker.
//
// Without PROXY protocol or a Store, admission is a few map operations
// inline in Accept. With either, it can block (a header to read, a Store
// to ask), so it runs on each connection's own goroutine, under a deadline,
// and Accept returns connections as they are admitted: a slow client never
// holds up the accept loop.
//
// docs/connlimit.md in the repository gives the operator's view: what is
// counted, when, the defaults and the choices behind them.
package connlimit
