// Package listen is the listeners of the portcullis daemon: each [Front]
// is a bound socket, its admission at accept, and what serves the
// connections it admits.
//
//   - http and https: a TCP socket ([ListenTCP], or [Share] for a reload
//     that takes a running socket over) wrapped in a connlimit.Listener
//     ([NewTCP]): the daemon's filter (its deny and allow lists), then the
//     per-client caps and conn_rate, before a byte is read or a TLS
//     handshake runs. httpserve.go chooses the HTTP/1.1 server as the
//     listener's http1_server says: the event loops with the byte path
//     (internal/bytepath), internal/http1 in Go's poller, or net/http; on
//     https net/http serves the connections whose handshake chose HTTP/2.
//   - tcp: the same socket and caps, each admitted connection copied to
//     the listener's upstream until both directions end or it idles
//     (tcp.go).
//   - http3: a UDP socket with QUIC handshake admission (the daemon's
//     filter, then quicadmit) and a per-client cap on proven clients
//     ([BindH3]), served by an http3.Server; [LinkAltSvc] makes the TCP
//     listeners whose routes it shares advertise its port.
//
// A Front is bound, then started with [Front.Serve], then stopped with
// [Front.Shutdown] (graceful: its exchanges drain) or [Front.Close]. It
// knows nothing of routes, limits or the cluster: what it takes of the
// daemon is declared in needs.go, an [Admission] when it is bound and a
// [Serving] when it starts, and the daemon fills them in
// (internal/daemon's listeners.go).
package listen
