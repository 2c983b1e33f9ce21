package upstream

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// memNet is an in-memory network for the reuse fuzz target: every
// connection the Transport dials is a memConn whose server side the test
// drives by hand. One lock guards every connection, so that the test can
// wait on one condition for anything that happens on any of them.
// Delivery is immediate: a byte the server writes is readable, and seen by
// the idle check, as soon as the write returns, as on a socketpair.
type memNet struct {
	mu        sync.Mutex
	cond      *sync.Cond
	conns     []*memConn
	dialFails int    // dials left to refuse
	violation string // the first broken invariant, seen from the connections
}

func newMemNet() *memNet {
	n := &memNet{}
	n.cond = sync.NewCond(&n.mu)
	return n
}

// violate records the first broken invariant; the caller holds n.mu.
func (n *memNet) violate(format string, args ...any) {
	if n.violation == "" {
		n.violation = fmt.Sprintf(format, args...)
	}
}

// dial is the Transport's DialContext.
func (n *memNet) dial(_ context.Context, _, _ string) (net.Conn, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.dialFails > 0 {
		n.dialFails--
		return nil, fmt.Errorf("memnet: dial: %w", syscall.ECONNREFUSED)
	}
	c := &memConn{n: n, id: len(n.conns)}
	n.conns = append(n.conns, c)
	n.cond.Broadcast()
	return c, nil
}

// memConn is one in-memory connection; its net.Conn methods are the
// client's (the Transport's) side, its srv methods the server's.
type memConn struct {
	n  *memNet
	id int

	// Server to client.
	pending []byte // written by the server, not read yet
	wrote   int64  // bytes the server wrote
	read    int64  // bytes the client read
	fin     bool   // the server closed: EOF once pending is read
	reset   bool   // the server reset: reads and writes fail

	// Client to server.
	inbox        []byte // written by the client, not received yet
	clientClosed bool

	// The client's reader.
	blocked  bool // a Read waits for bytes
	deadline time.Time
	timer    *time.Timer

	// The request window: the server received its last request when it had
	// written windowStart bytes. A byte written before that and read after
	// it answers an earlier request, or none.
	windowStart int64
	window      []byte     // what the server wrote since
	events      []memWrite // how, with the tags of the responses among it
	requests    int        // requests received
	lastMethod  string
	owner       *flight // the flight whose request the server received last
}

// memWrite is one server action in a window.
type memWrite struct {
	kind    string // "valid", "garbage", "close", "reset", "cancel", "split"...
	tag     string // the tag of a valid response
	variant int
}

var _ net.Conn = (*memConn)(nil)
var _ idleProber = (*memConn)(nil)

func (c *memConn) Read(p []byte) (int, error) {
	n := c.n
	n.mu.Lock()
	defer n.mu.Unlock()
	for {
		switch {
		case c.clientClosed:
			return 0, net.ErrClosed
		case c.reset:
			return 0, syscall.ECONNRESET
		case !c.deadline.IsZero() && !time.Now().Before(c.deadline):
			return 0, os.ErrDeadlineExceeded
		case len(p) == 0:
			return 0, nil
		case len(c.pending) > 0:
			if c.read < c.windowStart {
				n.violate("conn %d: byte %d, written before request %d arrived (at byte %d), read after it", c.id, c.read, c.requests, c.windowStart)
			}
			k := copy(p, c.pending)
			c.pending = c.pending[k:]
			c.read += int64(k)
			return k, nil
		case c.fin:
			return 0, io.EOF
		}
		c.blocked = true
		n.cond.Broadcast()
		n.cond.Wait()
		c.blocked = false
	}
}

func (c *memConn) Write(p []byte) (int, error) {
	n := c.n
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case c.clientClosed:
		return 0, net.ErrClosed
	case c.reset:
		n.violate("conn %d: request written after the server reset the connection", c.id)
		return 0, syscall.ECONNRESET
	case c.fin:
		n.violate("conn %d: request written after the server closed the connection", c.id)
		return len(p), nil
	}
	c.inbox = append(c.inbox, p...)
	n.cond.Broadcast()
	return len(p), nil
}

func (c *memConn) Close() error {
	c.n.mu.Lock()
	defer c.n.mu.Unlock()
	c.clientClosed = true
	if c.timer != nil {
		c.timer.Stop()
	}
	c.n.cond.Broadcast()
	return nil
}

// probeIdle is what a MSG_PEEK finds on a socket in the same state:
// TestMemConnProbeMatchesSocket holds the two side by side.
func (c *memConn) probeIdle() idleState {
	c.n.mu.Lock()
	defer c.n.mu.Unlock()
	switch {
	case c.reset, c.clientClosed:
		return idleClosed
	case len(c.pending) > 0:
		if is408(c.pending[:min(len(c.pending), peekLen)]) {
			return idleClosed
		}
		return idleUnsolicited
	case c.fin:
		return idleClosed
	}
	return idleOpen
}

func (c *memConn) SetDeadline(t time.Time) error {
	n := c.n
	n.mu.Lock()
	defer n.mu.Unlock()
	c.deadline = t
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	if d := time.Until(t); !t.IsZero() && d > 0 {
		c.timer = time.AfterFunc(d, func() {
			n.mu.Lock()
			n.cond.Broadcast()
			n.mu.Unlock()
		})
	}
	n.cond.Broadcast()
	return nil
}

func (c *memConn) SetReadDeadline(t time.Time) error { return c.SetDeadline(t) }

// SetWriteDeadline does nothing: a write never blocks.
func (c *memConn) SetWriteDeadline(time.Time) error { return nil }

func (c *memConn) LocalAddr() net.Addr  { return memAddr("client") }
func (c *memConn) RemoteAddr() net.Addr { return memAddr("upstream") }

type memAddr string

func (a memAddr) Network() string { return "mem" }
func (a memAddr) String() string  { return string(a) }

// srvWrite writes b as the server, recording ev; the caller holds n.mu.
// Bytes for a closed connection are dropped.
func (c *memConn) srvWrite(b []byte, ev memWrite) {
	c.events = append(c.events, ev)
	if c.fin || c.reset || c.clientClosed {
		return
	}
	c.pending = append(c.pending, b...)
	c.window = append(c.window, b...)
	c.wrote += int64(len(b))
	c.n.cond.Broadcast()
}

// srvClose closes the server's side (a FIN); the caller holds n.mu.
func (c *memConn) srvClose() {
	c.events = append(c.events, memWrite{kind: "close"})
	c.fin = true
	c.n.cond.Broadcast()
}

// srvReset resets the connection: what was not read is lost; the caller
// holds n.mu.
func (c *memConn) srvReset() {
	c.events = append(c.events, memWrite{kind: "reset"})
	c.reset = true
	c.pending = nil
	c.n.cond.Broadcast()
}
