package upstream

import (
	"errors"
	"math"
	"net"
	"time"
)

// errHeadLimit is what conn.Read returns once the response head budget is
// spent; the exchange turns it into ErrHeadTooLarge.
var errHeadLimit = errors.New("upstream: head read limit reached")

// conn is one upstream connection. While idle it holds no buffers; an
// exchange lends it a pooled bufio.Reader for its duration.
type conn struct {
	nc        net.Conn
	addr      string     // the pool key: host:port
	prober    idleProber // nil: the connection cannot be checked, so it is never kept
	idleSince time.Time  // set by the pool

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
}

func newConn(nc net.Conn, addr string) *conn {
	return &conn{nc: nc, addr: addr, prober: proberFor(nc)}
}

// beginExchange resets the per-exchange counters with a head budget of
// headBytes.
func (c *conn) beginExchange(headBytes int64) {
	c.readLimit = headBytes
	c.nread = 0
	c.nwritten = 0
	c.readErr = nil
}

// Write writes to the connection, counting what was written: a request of
// which nothing left may be sent again whatever its method.
func (c *conn) Write(p []byte) (int, error) {
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
	n, err := c.nc.Read(p)
	c.readLimit -= int64(n)
	c.nread += int64(n)
	if err != nil && c.readErr == nil {
		c.readErr = err
	}
	return n, err
}
