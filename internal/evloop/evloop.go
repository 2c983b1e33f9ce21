// Package evloop serves the plainest HTTP/1.1 exchanges of adopted TCP
// connections on event loops of its own, outside the Go runtime's network
// poller: the shape of nginx's workers. Each worker is one goroutine with
// its own edge-triggered epoll set; it reads a connection's request heads,
// asks its [Handler] whether to relay each, sends the ones it takes to
// their upstream on connections of its own, and writes the answers back,
// each step only once epoll said the socket was ready. A worker with
// nothing ready parks on its epoll set in the runtime's poller; a busy one
// never waits and yields its processor once a millisecond.
//
// It serves no request by itself. What the Handler does not take goes
// back, with every byte read from it, to a server of goroutines
// (Handler.HandBack), which then serves the connection as if it had read
// those bytes itself; an exchange the loop began but cannot finish (an
// answer it does not relay, an upstream that failed, a client that left)
// is handed over the same way with both of its connections
// (Exchange.Resume). So the loop has no error answers, body framing or
// timeouts of its own to keep in step with the server: it only ever
// serves, or gives back.
//
// A TLS connection is served so too once Go's poller ran its handshake,
// when TLSServer made it: the loop then reads and writes it through
// crypto/tls's record layer over a transport of its own (tls_linux.go),
// and gives it back on the same session.
package evloop

import (
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"sync/atomic"
	"time"
)

// A Handler decides, on a loop's goroutine, what the loop relays. Its
// methods must not block: every connection of the worker waits for them.
type Handler interface {
	// Begin is called with the whole head of the next request of c, from
	// its request line to the empty line that ends it. It returns the
	// exchange to relay, or nil, having done nothing, to hand the
	// connection back (HandBack).
	Begin(c *Conn, head []byte) Exchange

	// HandBack serves c, whose bytes begin with those the loop read from
	// it and did not serve, until it ends; it is called on a goroutine of
	// its own and owns c.
	HandBack(c net.Conn)

	// Left is called once when the loop lets go of c: closed, handed back,
	// or with its exchange handed over. The connection is no longer the
	// loop's; Value may be released.
	Left(c *Conn)
}

// An Exchange is one request the loop relays. Its methods are called on
// the loop's goroutine, but Resume, which runs on a goroutine of its own.
type Exchange interface {
	// Upstream returns where to send the request and the bytes to send:
	// one request head, whole.
	Upstream() (addr netip.AddrPort, head []byte)

	// Refused is called when addr refused the connection, before anything
	// was sent; it returns another address to try, or false to give up
	// (Resume follows, with a cause wrapping syscall.ECONNREFUSED).
	Refused(addr netip.AddrPort) (netip.AddrPort, bool)

	// HeadTimeout bounds the wait for the answer's head from when the
	// request was sent; zero means no bound. When it passes, Resume takes
	// over (and finds the time up).
	HeadTimeout() time.Duration

	// Answer is called with the bytes the upstream sent so far, each time
	// more came, until it returns a verdict other than More; reused says
	// whether the connection carried an exchange before this one.
	Answer(b []byte, reused bool) (v Verdict, n int)

	// Reply returns what to write to the client for the whole answer.
	Reply(answer []byte) Reply

	// Done is called once Reply's bytes were written (err nil), or could
	// not be (the client went, the write timed out, the server closed);
	// the loop closes the connection after an error.
	Done(err error)

	// Resume takes over an exchange the loop will not finish, on a
	// goroutine of its own. client's bytes begin with the request's head;
	// up, when not nil, is the upstream connection after the request was
	// sent whole, its bytes beginning with the answer's first. cause is
	// why: nil when the answer is one to relay otherwise, ErrClientGone,
	// or the failure that left no upstream connection to read (a refused
	// or failed connect, a failed write).
	Resume(client, up net.Conn, cause error)
}

// A Reply is what the loop writes for a whole answer.
type Reply struct {
	Out          []byte    // the bytes for the client; they may be the answer's own, which the loop then leaves alone until written
	Close        bool      // the client's connection ends after them
	KeepUpstream bool      // the upstream's connection may carry another exchange
	WriteBy      time.Time // when writing them times out, if the client does not take them at once; zero: Config.WriteTimeout
}

// Verdict is what Exchange.Answer decides.
type Verdict int

const (
	// More: the answer is not whole yet; read on.
	More Verdict = iota
	// Whole: the answer is the first n bytes.
	Whole
	// Retry: the answer says the reused connection had gone stale (a
	// 408 before the request could be read); send the request again on a
	// new connection.
	Retry
	// Resume: the answer is not one the loop relays; hand the exchange
	// over (Exchange.Resume with a nil cause).
	Resume
)

// ErrClientGone is the cause Exchange.Resume and Exchange.Done are given
// when the client closed or reset its connection, or Conn.Abort cut it,
// while its exchange was under way.
var ErrClientGone = errors.New("evloop: the client went away")

// ErrClosed is the cause Exchange.Done is given when Server.Close cut
// the exchange.
var ErrClosed = errors.New("evloop: server closed")

// errWriteTimeout is Exchange.Done's cause when the answer could not be
// written within Config.WriteTimeout.
var errWriteTimeout = errors.New("evloop: writing the answer timed out")

// Config configures a [Server]. The zero value of each field is its
// default.
type Config struct {
	// Handler decides what the loop relays. Required.
	Handler Handler

	// Workers is the number of event loops, each a goroutine. Zero means
	// runtime.GOMAXPROCS(0).
	Workers int

	// ReadHeaderTimeout bounds reading a request head, from the adoption
	// for a connection's first and from its first bytes for the others;
	// IdleTimeout bounds the wait for the next request's first bytes. A
	// connection that runs out of either is closed without an answer, as
	// net/http does. Zero means none.
	ReadHeaderTimeout, IdleTimeout time.Duration

	// WriteTimeout bounds writing an answer the client does not take at
	// once. Zero means none.
	WriteTimeout time.Duration

	// MaxHeadBytes is the longest head the loop reads: a connection whose
	// head is longer is handed back, for its server to answer. Zero means
	// 1 MiB + 4 KiB, net/http's default limit with its slack.
	MaxHeadBytes int

	// UpstreamIdleTimeout closes a worker's idle upstream connection
	// after this long; zero means 90 s. MaxIdlePerUpstream bounds a
	// worker's idle connections to one address; zero means 1024, as the
	// daemon's upstream transport keeps (fewer than the exchanges under
	// way would close and open connections all the time).
	UpstreamIdleTimeout time.Duration
	MaxIdlePerUpstream  int

	// Counts, if not nil, is where the loops count what they do with
	// upstream connections; Servers may share one. Nil: a Server's own.
	Counts *Counts

	// Logger receives what goes wrong with the loops themselves; nil
	// means slog.Default().
	Logger *slog.Logger
}

// Counts are what event loops did with their upstream connections.
type Counts struct {
	Dials       atomic.Uint64 // connections opened
	Retries     atomic.Uint64 // requests sent again on a new connection after a kept one turned out stale
	IdleClosed  atomic.Uint64 // kept connections found closed or reset
	Unsolicited atomic.Uint64 // kept connections dropped because bytes came that no request asked for
	Idle        atomic.Int64  // connections kept for reuse now
}

func (c *Config) workers() int {
	if c.Workers > 0 {
		return c.Workers
	}
	return runtime.GOMAXPROCS(0)
}

func (c *Config) maxHeadBytes() int {
	if c.MaxHeadBytes > 0 {
		return c.MaxHeadBytes
	}
	return 1<<20 + 4096
}

func (c *Config) upstreamIdleTimeout() time.Duration {
	if c.UpstreamIdleTimeout > 0 {
		return c.UpstreamIdleTimeout
	}
	return 90 * time.Second
}

func (c *Config) maxIdlePerUpstream() int {
	if c.MaxIdlePerUpstream > 0 {
		return c.MaxIdlePerUpstream
	}
	return 1024
}

func (c *Config) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.Default()
}
