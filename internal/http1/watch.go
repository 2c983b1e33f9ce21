package http1

import (
	"context"
	"net"
	"sync"
	"syscall"
	"time"
)

// How a connection learns that its client went away while a handler runs.
const (
	watchUnset      uint32 = iota // not armed yet
	watchKernel                   // registered with the process's peerWatcher (Linux)
	watchBackground               // a one-byte background read, started on demand
)

// arm makes the peer's going away cancel x, from now until disarm. It is
// called once the request body has been read to its end (or at once when
// there is none), as net/http starts its background read.
func (c *conn) arm(x *requestContext) {
	c.watchMu.Lock()
	defer c.watchMu.Unlock()
	if c.inflight.Load() != x || c.hijackedFast() {
		return // the body was read to its end after the handler returned
	}
	if c.watchMode.Load() == watchUnset {
		mode := watchBackground
		if id, ok := kernelWatch.add(c); ok {
			mode, c.watchID = watchKernel, id
		}
		c.watchMode.Store(mode)
	}
	c.cur.Store(x)
	if c.peerClosed.Load() {
		x.cancel(context.Canceled)
		return
	}
	if c.watchMode.Load() == watchBackground {
		x.mu.Lock()
		wanted := x.watched
		x.mu.Unlock()
		if wanted {
			c.bg.start(c, x)
		}
	}
}

// disarm ends the watch for the request in flight, which is no longer.
func (c *conn) disarm() {
	c.watchMu.Lock()
	defer c.watchMu.Unlock()
	c.inflight.Store(nil)
	c.cur.Store(nil)
	if c.watchMode.Load() == watchBackground {
		c.bg.stop(c)
	}
}

// watchWanted is called when a handler starts waiting on x (Done, Err,
// AfterFunc). The kernel watch needs nothing; the background watch starts
// its read now, if x is armed.
func (x *requestContext) wantWatch() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	first := !x.watched
	x.watched = true
	return first
}

func (c *conn) watchWanted(x *requestContext) {
	if c.watchMode.Load() == watchKernel || !x.wantWatch() {
		return
	}
	c.watchMu.Lock()
	defer c.watchMu.Unlock()
	if c.cur.Load() == x && c.watchMode.Load() == watchBackground {
		c.bg.start(c, x)
	}
}

// peerGone is called when the peer closed or reset the connection.
func (c *conn) peerGone() {
	c.peerClosed.Store(true)
	if x := c.cur.Load(); x != nil {
		x.cancel(context.Canceled)
	}
}

// unwatch forgets the connection in the kernel watch; called when the
// connection ends or is hijacked.
func (c *conn) unwatch() {
	if c.watchMode.Load() == watchKernel {
		kernelWatch.remove(c.watchID)
		c.watchMode.Store(watchBackground)
		c.watchID = 0
	}
}

// backgroundRead is net/http's way to see a client go away, for
// connections the kernel watch cannot take: a goroutine blocked reading
// one byte, whose EOF or error cancels the request. Here it starts only
// when the handler waits on its context, and a byte it reads (a pipelined
// request) is put back in front of the next request's bytes.
type backgroundRead struct {
	mu      sync.Mutex
	touched bool // a read ran since the last stop: the read deadline is cleared
	running bool
	aborted bool
	hasByte bool
	b       [1]byte
	done    chan struct{}
}

// aLongTimeAgo is a deadline in the past: it wakes a blocked read.
var aLongTimeAgo = time.Unix(1, 0)

func (bg *backgroundRead) start(c *conn, x *requestContext) {
	bg.mu.Lock()
	defer bg.mu.Unlock()
	if bg.running || bg.hasByte || c.hijackedFast() {
		return
	}
	bg.running = true
	bg.touched = true
	bg.aborted = false
	bg.done = make(chan struct{})
	_ = c.rwc.SetReadDeadline(time.Time{})
	go bg.read(c)
}

func (bg *backgroundRead) read(c *conn) {
	n, err := c.rwc.Read(bg.b[:])
	bg.mu.Lock()
	if n == 1 {
		bg.hasByte = true // a pipelined request: the client is still there
	}
	var ne net.Error
	aborted := bg.aborted && err != nil && asNetError(err, &ne) && ne.Timeout()
	bg.running = false
	done := bg.done
	bg.mu.Unlock()
	if err != nil && !aborted {
		c.peerGone()
	}
	close(done)
}

// stop ends a running background read and keeps the byte it read.
func (bg *backgroundRead) stop(c *conn) {
	bg.mu.Lock()
	if !bg.touched {
		bg.mu.Unlock()
		return
	}
	bg.touched = false
	running := bg.running
	bg.aborted = running
	done := bg.done
	bg.mu.Unlock()
	if running {
		_ = c.rwc.SetReadDeadline(aLongTimeAgo)
		<-done
		_ = c.rwc.SetReadDeadline(time.Time{})
	}
	c.rd = time.Time{}
	bg.takeByte(c)
}

func (bg *backgroundRead) takeByte(c *conn) {
	bg.mu.Lock()
	defer bg.mu.Unlock()
	if bg.hasByte {
		c.rr.in.appendByte(bg.b[0])
		bg.hasByte = false
	}
}

func asNetError(err error, target *net.Error) bool {
	ne, ok := err.(net.Error)
	if ok {
		*target = ne
	}
	return ok
}

// rawConnOf returns the socket under c, through TLS and other wrappers
// that expose it, or nil.
func rawConnOf(c net.Conn) syscall.RawConn {
	for range 8 {
		if sc, ok := c.(syscall.Conn); ok {
			if rc, err := sc.SyscallConn(); err == nil {
				return rc
			}
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		c = u.NetConn()
	}
	return nil
}
