package upstream

import (
	"errors"
	"math"
	"net"
	"syscall"
	"time"
)

// errHeadLimit is what conn.Read returns once the response head budget is
// spent; the exchange turns it into ErrHeadTooLarge.
var errHeadLimit = errors.New("upstream: head read limit reached")

// conn is one upstream connection. While idle it holds no buffers; an
// exchange lends it a pooled bufio.Reader for its duration.
type conn struct {
	nc        net.Conn
	addr      string          // the pool key: host:port
	prober    idleProber      // nil: the connection cannot be checked, so it is never kept
	raw       syscall.RawConn // nc's socket, for sendThenRead; nil when nc is not a plain TCP socket
	idleSince time.Time       // set by the pool
	// deadline is the read and write deadline set on nc by headDeadline,
	// which a connection keeps between exchanges when it did not stand in
	// the way of a body; zero when none is set.
	deadline time.Time

	// older and newer link the pool's idle connections of every host in
	// the order they became idle, so that a full pool closes its oldest
	// first; both nil while the connection is not idle. Under the pool's
	// lock.
	older, newer *conn

	// The fields below belong to the exchange that holds the connection.
	readLimit int64 // bytes that may still be read; the head budget, then unlimited
	nread     int64 // bytes read during this exchange
	nwritten  int64 // bytes written during this exchange
	readErr   error // first error of the underlying Read during this exchange

	// holdHead makes Write keep the bytes it is given in pending instead of
	// writing them; the first Read then sends them (sendThenRead).
	holdHead bool
	pending  []byte // the held request head, not yet sent; it is the writer's buffer
	sendErr  error  // why sending pending failed
	sr       sendReadState

	// abort is c.abortIO, bound once: each exchange hands it to the watch
	// on its request's context, and a method value made per exchange
	// would be an allocation per request.
	abort func()
}

func newConn(nc net.Conn, addr string) *conn {
	c := &conn{nc: nc, addr: addr, prober: proberFor(nc), raw: rawOf(nc)}
	c.abort = c.abortIO
	return c
}

// abortIO makes the connection's blocked I/O return at once; it runs when
// the context of the exchange holding the connection ends. An exchange
// whose watch ran (or is running) never gives the connection back to the
// pool (exchange.end), so it cannot strike a later exchange.
func (c *conn) abortIO() { c.nc.SetDeadline(aLongTimeAgo) }

// beginExchange resets the per-exchange counters with a head budget of
// headBytes.
func (c *conn) beginExchange(headBytes int64) {
	c.readLimit = headBytes
	c.nread = 0
	c.nwritten = 0
	c.readErr = nil
	c.holdHead = false
	c.pending = nil
	c.sendErr = nil
}

// Write writes to the connection, counting what was written: a request of
// which nothing left may be sent again whatever its method.
func (c *conn) Write(p []byte) (int, error) {
	if c.holdHead {
		c.holdHead = false
		c.pending = p
		return len(p), nil
	}
	n, err := c.nc.Write(p)
	c.nwritten += int64(n)
	return n, err
}

// liftReadLimit ends the head budget once the head is read.
func (c *conn) liftReadLimit() { c.readLimit = math.MaxInt64 }

// Read reads from the connection within the head budget, recording how much
// arrived and the first error, which decide whether a failure may be retried.
func (c *conn) Read(p []byte) (int, error) {
	if c.readLimit <= 0 {
		return 0, errHeadLimit
	}
	if int64(len(p)) > c.readLimit {
		p = p[:c.readLimit]
	}
	var n int
	var err error
	if c.pending != nil {
		n, err = c.sendThenRead(p)
	} else {
		n, err = c.nc.Read(p)
	}
	c.readLimit -= int64(n)
	c.nread += int64(n)
	if err != nil && c.readErr == nil {
		c.readErr = err
	}
	return n, err
}

// headDeadline sets the deadline of an exchange's head on the connection:
// want, or a deadline already set that falls no more than slack after it,
// so that a busy connection does not set one for every exchange. A zero
// want clears any deadline.
func (c *conn) headDeadline(want time.Time, slack time.Duration) {
	if want.IsZero() {
		c.clearDeadline()
		return
	}
	if !c.deadline.IsZero() && !c.deadline.Before(want) && !c.deadline.After(want.Add(slack)) {
		return
	}
	c.deadline = want.Add(slack)
	c.nc.SetDeadline(c.deadline)
}

// clearDeadline lifts the deadline headDeadline set, if any.
func (c *conn) clearDeadline() {
	if !c.deadline.IsZero() {
		c.deadline = time.Time{}
		c.nc.SetDeadline(time.Time{})
	}
}

// deadlineSlack is how much later than asked a head deadline d away may
// expire: an eighth of d, at most 500 ms, as internal/http1 allows its
// own timeouts.
func deadlineSlack(d time.Duration) time.Duration {
	return max(min(d/8, 500*time.Millisecond), 0)
}
