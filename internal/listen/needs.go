package listen

import (
	"context"
	"log/slog"
	"net/http"
	"net/netip"

	"github.com/quic-go/quic-go"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/internal/bytepath"
	"github.com/seed-a07d1050/portcullis/internal/evloop"
	"github.com/seed-a07d1050/portcullis/limit"
	"github.com/seed-a07d1050/portcullis/rate"
)

// This file is all a listener knows of the daemon: what its admission at
// accept is bound with (Admission) and what it serves the connections it
// admits with (Serving), as the daemon fills them in.

// Admission is what a listener's admission at accept takes from the daemon
// besides its configuration: who its clients are, the deny and allow
// lists, and the cluster's share of its caps and rates. The zero Admission
// is usable: clients keyed by the default prefixes, no peer trusted, no
// list, every cap and rate counted in this process alone.
type Admission struct {
	// Log receives the listener's lines, with listener=<name> added but
	// for connlimit's, which name the listener themselves. Nil:
	// slog.Default().
	Log *slog.Logger
	// Keyer maps a client's address to the key its per-client caps and
	// rates count (ipv4_prefix, ipv6_prefix).
	Keyer clientkey.Keyer
	// Trusted are the peers whose connections no per-client cap counts
	// (trusted_proxies). Nil: none.
	Trusted *clientkey.ProxySet
	// Filter is the connlimit Filter of a TCP listener: called on the
	// accepting goroutine for each connection, before the caps, it refuses
	// the client with the error it returns (the deny and allow lists). It
	// must not block. Nil: no client is refused before the caps.
	Filter func(client netip.Addr) error
	// FilterQUIC is called once when an http3 listener is bound, after
	// quicadmit attached its hooks to the transport and before a packet is
	// read: it may wrap the transport's VerifySourceAddress and
	// ConnContext to refuse clients before quicadmit sees them. Nil: none.
	FilterQUIC func(*quic.Transport)
	// ConnRate is a TCP listener's conn_rate: how fast one client may open
	// connections. The zero Limit: none.
	ConnRate rate.Limit
	// Store counts a TCP listener's per-client connection caps with the
	// other nodes (a cluster). Nil: in this process. The listener does not
	// close it.
	Store limit.Store[clientkey.Key]
	// ConnRateStore counts a TCP listener's conn_rate with the other
	// nodes. Nil: in this process. The listener does not close it.
	ConnRateStore rate.Store[clientkey.Key]
	// HandshakeRate is an http3 listener's handshake_rate, which quicadmit
	// asks once a client's address is proven. Nil: none. The listener does
	// not close it.
	HandshakeRate *rate.Limiter[clientkey.Key]
}

// Serving is what a listener serves the connections it admits with, given
// when it starts serving.
type Serving struct {
	// Base is the base of every request's context and the context of every
	// tcp connection's upstream dial; cancelling it cuts them off. Nil:
	// context.Background().
	Base context.Context
	// Handler serves each request of an http, https or http3 listener
	// that the byte path does not (the route table in force when it
	// arrives), on the request's own goroutine. The listener counts it as
	// under way while it runs and adds the Alt-Svc field first. Nil for tcp
	// listeners; required for the others.
	Handler http.Handler
	// Bytes returns the byte path's part of the route table in force now
	// (bytepath.Listener.Table), read once for each request the byte path
	// is offered; it must not block. Nil: the byte path declines every
	// request.
	Bytes func() *bytepath.Table
	// LoopCounts counts what the event loops of an http listener with
	// http1_server eventloop do with their upstream connections, shared by
	// every such listener. Nil: counts of their own.
	LoopCounts *evloop.Counts
	// LoopPanicHook, when set, is the PanicHook of the listener's event
	// loops (bytepath.Loops.PanicHook), for the tests of what a panic in a
	// loop's exchange gives back.
	LoopPanicHook func(step string, r *http.Request)
	// AccessLog makes a tcp listener log an access line for each
	// connection when it ends.
	AccessLog bool
}
