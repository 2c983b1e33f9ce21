//go:build linux

package evloop

import (
	"bytes"
	"crypto/tls"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Conn is a client connection served by a loop.
type Conn struct {
	w     *worker
	nc    net.Conn    // the adopted connection; its own socket was closed at adoption (see Server.Serve)
	fd    int         // the loop's duplicate of that socket, the loop's alone
	tls   *tlsSession // nil: a plain connection
	token uint64
	state connState

	// Value is the Handler's, for its state of the connection.
	Value any

	in  []byte // in[:n] was read and not yet served: the head being read, and what follows
	n   int
	out []byte // the answer being written: out[off:] is left
	off int

	ex       Exchange
	up       *upConn
	headLen  int       // the head of the exchange under way, in[:headLen]
	deadline time.Time // zero: none
	close1   bool      // close once the answer is written
	writeBy  time.Time // the answer's write deadline, from its Reply
	canRead  bool      // the socket may hold bytes: no read since its last event drained it
	shut     bool      // the client closed its side (EPOLLRDHUP)
	served   bool      // a request was served: the next head waits under IdleTimeout
}

type connState uint8

const (
	stateReading  connState = iota // waiting for, or reading, a request head
	stateExchange                  // the request is upstream
	stateWriting                   // the answer waits for the client to take it
	stateGone                      // closed or handed over
)

const minInBuf = 4 << 10

func newConn(w *worker, nc net.Conn, fd int, pending []byte, ts *tlsSession) *Conn {
	c := &Conn{w: w, nc: nc, fd: fd, tls: ts}
	c.in = make([]byte, max(minInBuf, len(pending)))
	c.n = copy(c.in, pending)
	return c
}

// NetConn returns the connection the loop adopted, for its addresses
// and what its wrappers say of it (a connection cap's key): its socket is
// closed, the loop serving a duplicate of it.
func (c *Conn) NetConn() net.Conn { return c.nc }

// RemoteAddr returns the connection's remote address.
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// TLS returns the state of a TLS connection's handshake; nil for a plain
// connection. The caller must not change it.
func (c *Conn) TLS() *tls.ConnectionState {
	if c.tls == nil {
		return nil
	}
	return &c.tls.state
}

// Now returns the loop's clock: the time it read last, when its latest
// look at the epoll set returned or at most clockEvery events later. A
// duration between two readings is off by at most a turn's work, as with
// nginx's cached clock, for one read per turn instead of several per
// exchange. For the Handler, on the loop's goroutine.
func (c *Conn) Now() time.Time { return c.w.now }

// ShuttingDown reports whether the server is shutting down: the
// connection closes after the exchange under way, whose answer should say
// so. For the Handler, on the loop's goroutine.
func (c *Conn) ShuttingDown() bool { return c.w.draining || c.w.stopping }

// Abort cuts the connection from any goroutine: an exchange under way
// ends as when the client goes (ErrClientGone). It does nothing once the
// connection was closed or handed over.
func (c *Conn) Abort() {
	c.w.post(func() {
		if c.state != stateGone {
			c.w.guard(c, c.clientGone)
		}
	}, false)
}

// read reads into b; n is 0 with a nil error at the end of the stream,
// and err is unix.EAGAIN when nothing is there yet. On a TLS connection,
// b gets plaintext.
func (c *Conn) read(b []byte) (int, error) {
	if c.tls != nil {
		return c.tls.read(b)
	}
	return rawRead(c.fd, b)
}

// write writes what the socket takes of b; unix.EAGAIN when it takes
// nothing. On a TLS connection, it takes b's bytes into records, which
// may wait for the socket (unsent): an empty b writes those out.
func (c *Conn) write(b []byte) (int, error) {
	if c.tls != nil {
		return c.tls.write(b)
	}
	return rawWrite(c.fd, b)
}

// unsent reports whether a TLS connection's records wait for the socket.
func (c *Conn) unsent() bool { return c.tls != nil && c.tls.t.pending() }

// adopt registers c in the worker's epoll set and serves what it holds.
func (w *worker) adopt(c *Conn) {
	if w.draining || w.stopping {
		c.handBack()
		return
	}
	c.token = w.sockets.token(c.fd)
	// Edge-triggered, for everything at once: no change of the
	// registration per request, and each socket is read until it is empty.
	if err := w.ctl(unix.EPOLL_CTL_ADD, c.fd, unix.EPOLLIN|unix.EPOLLOUT|unix.EPOLLRDHUP|unix.EPOLLET, c.token); err != nil {
		w.s.cfg.logger().Error("evloop: cannot watch a connection; handing it back", "error", err)
		c.token = 0
		c.handBack()
		return
	}
	w.sockets.add(c.token, c)
	w.live.Add(1)
	c.canRead = true
	c.waitHead()
	if c.serveBuffered() {
		c.readHead()
	}
}

// waitHead sets the deadline for the next head: IdleTimeout until its
// first bytes, ReadHeaderTimeout from then (from the adoption for the
// first head).
func (c *Conn) waitHead() {
	cfg := &c.w.s.cfg
	d := cfg.ReadHeaderTimeout
	if c.n == 0 && c.served {
		d = cfg.IdleTimeout
	}
	c.deadline = time.Time{}
	if d > 0 {
		c.deadline = c.w.now.Add(d)
	}
}

func (c *Conn) ready(events uint32) {
	if events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		c.canRead = true
	}
	if events&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		c.shut = true
	}
	switch c.state {
	case stateReading:
		c.readHead()
	case stateExchange:
		// What the client sends while its request is upstream waits in the
		// socket; only its leaving matters now.
		if events&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
			c.clientGone()
		}
	case stateWriting:
		if events&(unix.EPOLLOUT|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
			c.writeOut()
		}
	}
}

// readHead reads what the client sent, serving the heads it completes,
// until the socket is empty or an exchange begins.
func (c *Conn) readHead() {
	for c.canRead && c.state == stateReading {
		if c.n == len(c.in) {
			if len(c.in) >= c.w.headLimit {
				c.handBack() // too long: the server answers it
				return
			}
			grown := make([]byte, min(2*len(c.in), c.w.headLimit))
			copy(grown, c.in[:c.n])
			c.in = grown
		}
		k, err := c.read(c.in[c.n:])
		switch {
		case err == unix.EAGAIN:
			c.canRead = false
			return
		case err != nil || k == 0:
			if c.n == 0 {
				c.close() // a kept connection ended between requests
			} else {
				c.handBack() // ended inside a head: the server answers as it would
			}
			return
		}
		if k < len(c.in)-c.n && !c.shut && (c.tls == nil || !c.tls.t.more()) {
			// See drained. On TLS, the read that found the socket
			// drained may have read more records than the one whose
			// plaintext this is (tlsTransport.more).
			c.canRead = false
		}
		if c.n == 0 && c.served {
			c.n = k
			c.waitHead() // the head's own time starts with its first bytes
		} else {
			c.n += k
		}
		if !c.serveBuffered() {
			return
		}
	}
}

// serveBuffered serves the head at the start of in, if it is whole. It
// reports whether the connection waits for more of a head.
func (c *Conn) serveBuffered() bool {
	end := headEnd(c.in[:c.n])
	if end < 0 || end > c.w.headLimit {
		if end > 0 || c.n >= c.w.headLimit {
			c.handBack() // too long: the server answers it
			return false
		}
		return true
	}
	if c.w.draining {
		c.close() // a request after shutdown began: not served, as net/http's
		return false
	}
	if c.shut {
		// The client closed its side: its server abandons the request as
		// it does then (and edge-triggered, the loop would not hear of it
		// again while the request is upstream).
		c.handBack()
		return false
	}
	ex := c.w.s.cfg.Handler.Begin(c, c.in[:end])
	if ex == nil {
		c.handBack()
		return false
	}
	c.ex, c.headLen = ex, end
	c.state = stateExchange
	c.deadline = time.Time{}
	c.w.send(c, false)
	return false
}

// headEnd returns the length of the request head at the start of b, up
// to the empty line that ends it, or -1 when b holds no whole head. Lines
// may end in LF alone, as net/http reads them.
func headEnd(b []byte) int {
	for i := 0; ; {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return -1
		}
		i += j + 1
		switch {
		case i < len(b) && b[i] == '\n':
			return i + 1
		case i+1 < len(b) && b[i] == '\r' && b[i+1] == '\n':
			return i + 2
		}
	}
}

// reply writes the answer out, ending the exchange when it is written.
func (c *Conn) reply(r Reply) {
	c.out, c.off, c.close1, c.writeBy = r.Out, 0, r.Close, r.WriteBy
	c.writeOut()
}

func (c *Conn) writeOut() {
	for c.off < len(c.out) || c.unsent() {
		k, err := c.write(c.out[c.off:])
		if err == unix.EAGAIN {
			if c.state != stateWriting {
				c.state = stateWriting
				c.deadline = c.writeBy
				if d := c.w.s.cfg.WriteTimeout; c.deadline.IsZero() && d > 0 {
					c.deadline = c.w.now.Add(d)
				}
			}
			return // the next EPOLLOUT edge goes on
		}
		if err != nil {
			c.fail(ErrClientGone)
			return
		}
		c.off += k
	}
	c.exchangeEnded()
}

// exchangeEnded follows an answer written whole: the next request, or
// the connection's end.
func (c *Conn) exchangeEnded() {
	ex := c.ex
	c.ex, c.out = nil, nil
	copy(c.in, c.in[c.headLen:c.n])
	c.n -= c.headLen
	c.headLen = 0
	c.served = true
	ex.Done(nil)
	if c.close1 || c.w.draining || c.w.stopping {
		c.close()
		return
	}
	c.state = stateReading
	c.waitHead()
	if c.serveBuffered() {
		c.readHead()
	}
}

// timeUp ends what ran out of time: a head or idle wait (the connection
// closes without an answer), or the write of an answer.
func (c *Conn) timeUp() {
	switch c.state {
	case stateReading:
		c.close()
	case stateWriting:
		c.fail(errWriteTimeout)
	}
}

// clientGone ends the exchange under way because the client left; the
// connection closes.
func (c *Conn) clientGone() {
	switch c.state {
	case stateExchange:
		up := c.up
		c.up = nil
		if up != nil {
			up.close() // half a request or half an answer: never reused
		}
		c.resume(nil, ErrClientGone)
	case stateWriting:
		c.fail(ErrClientGone)
	default:
		c.close()
	}
}

// fail ends the exchange under way, if any, with err, and closes the
// connection.
func (c *Conn) fail(err error) {
	if c.state == stateGone {
		return
	}
	defer c.close() // also when Done panics
	if up := c.up; up != nil {
		c.up = nil
		up.close()
	}
	if ex := c.ex; ex != nil {
		c.ex = nil
		ex.Done(err)
	}
}

// forget takes c out of the worker: its epoll registration and its
// place among the live connections.
func (c *Conn) forget() {
	if c.token != 0 {
		_ = c.w.ctl(unix.EPOLL_CTL_DEL, c.fd, 0, 0)
		c.w.sockets.remove(c.token)
		c.w.live.Add(-1)
		c.token = 0
	}
	c.state = stateGone
	c.w.s.cfg.Handler.Left(c)
}

func (c *Conn) close() {
	if c.state == stateGone {
		return
	}
	c.forget()
	if c.tls != nil {
		// Its close_notify goes out on the socket before the loop closes it.
		_ = c.nc.Close()
		unix.Close(c.fd)
		c.tls.t.givenBack(nil)
		return
	}
	unix.Close(c.fd)
	_ = c.nc.Close() // what the adopted connection holds (a cap's slot)
}

// handBack gives the connection, and what was read from it, to the
// Handler's server.
func (c *Conn) handBack() {
	c.forget()
	nc := c.giveBack(true)
	c.in = nil
	go c.w.s.cfg.Handler.HandBack(nc)
}

// giveBack returns the connection as the runtime's again, with what the
// loop read from it in front (see handedConn). With own, the connection
// takes the loop's buffer itself, which the loop must then drop: the
// server it goes to may take that as its own (TakeBuffered) instead of
// copying a head of up to the head limit, twice. Without, it takes a copy,
// for an exchange whose Handler may still hold the head the loop read.
func (c *Conn) giveBack(own bool) net.Conn {
	f := os.NewFile(uintptr(c.fd), "client")
	sock, err := net.FileConn(f) // a duplicate, in the runtime's poller
	f.Close()
	if c.tls != nil {
		c.tls.t.givenBack(sock) // nil on failure: its I/O fails, on the closed accepted connection
	}
	if err != nil {
		// Nothing can serve it: close it as the server would a connection
		// it cannot read (the Handler's server finds it closed).
		c.w.s.cfg.logger().Error("evloop: cannot hand a connection back", "error", err)
		_ = c.nc.Close()
		return c.nc
	}
	prefix := c.in[:c.n]
	if !own {
		prefix = append([]byte(nil), prefix...)
	}
	if c.tls != nil {
		return &tlsHanded{prefixConn: prefixConn{Conn: c.nc, prefix: prefix}}
	}
	return &handedConn{prefixConn: prefixConn{Conn: sock, prefix: prefix}, owner: c.nc}
}

// resume hands the exchange under way over with the client's connection,
// what was read from it, and up (nil when there is none).
func (c *Conn) resume(up net.Conn, cause error) {
	ex := c.ex
	c.ex = nil
	c.forget()
	nc := c.giveBack(false)
	c.in = nil
	go ex.Resume(nc, up, cause)
}
