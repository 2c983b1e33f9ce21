// Package writebatch gathers the writes a connection's goroutines make in
// one turn of the scheduler into one write to the connection.
//
// x/net/http2's server flushes its buffer whenever its queue of frames runs
// empty, from a goroutine it starts for each flush: a response's HEADERS
// and its DATA usually leave in two flushes, and the responses of a
// connection's other streams in flushes of their own, each a TLS record and
// a system call. An event loop such as nginx's writes what all the streams
// have ready at the end of its turn instead. A [Conn] does that for a
// server of goroutines: Write copies the bytes and returns, and a goroutine
// started for the batch yields once (so that the goroutines ready to run,
// the streams' handlers and the connection's own, run first and add theirs)
// and then writes everything pending with one Write to the connection
// underneath. On an idle machine the batch leaves at once; under load it
// gathers what the turn produced.
//
// The bytes leave in order and unchanged; only where one write ends and
// the next begins differs. A peer that stops reading holds the writer as a
// blocking write would: past MaxPending bytes waiting, Write writes
// itself, under the connection's write deadline, once the batch before it
// has left. Since Write returns before its bytes leave, a deadline the
// caller sets around it does not bound them: Config.WriteTimeout does,
// for each write to the connection underneath.
package writebatch

import (
	"net"
	"runtime"
	"sync"
	"time"
)

// MaxPending is how many bytes a Conn keeps waiting for a batch before a
// Write sends them (and its own) itself: four HTTP/2 frames of the default
// maximum size.
const MaxPending = 64 << 10

// closeFlushTimeout bounds how long Close waits to send what is pending
// to a peer that does not read: as long as x/net/http2's server gives a
// peer to take its GOAWAY before it closes the connection. A var for the
// tests.
var closeFlushTimeout = time.Second

// Config holds a Conn's settings. The zero Config is valid.
type Config struct {
	// WriteTimeout bounds each write to the connection underneath (a
	// batch, or a Write past MaxPending with what waited before it): one
	// that has not completed within it fails, and so does every Write
	// after it. A peer that stops reading then ends the connection in
	// that time, as a blocking write with a deadline would, though the
	// writer's own Write returned at once. Zero means no bound but the
	// deadlines the caller sets (SetWriteDeadline), which then bound the
	// writes made while they are set.
	WriteTimeout time.Duration
}

// Conn is a net.Conn whose writes are batched. Reads, deadlines and the
// addresses are the underlying connection's. Write and Close are safe to
// call from several goroutines.
type Conn struct {
	net.Conn
	timeout time.Duration // Config.WriteTimeout

	// out is held across each write to the underlying connection, so that
	// batches leave in the order their bytes came.
	out sync.Mutex

	mu        sync.Mutex
	pending   *[]byte // bytes written and not yet sent; nil when none (its buffer back in the pool)
	scheduled bool    // a batch's goroutine is on its way
	err       error   // the first failed write's: every later Write fails with it
	closed    bool
	closeBy   time.Time // once closed: the deadline of the last writes
}

// NewConn returns c with its writes batched.
func NewConn(c net.Conn, cfg Config) *Conn { return &Conn{Conn: c, timeout: cfg.WriteTimeout} }

// bufs holds the buffers of pending bytes, so that an idle connection
// keeps none.
var bufs = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

// Write copies p to be sent with the batch and returns len(p), or, with
// MaxPending bytes already waiting, sends them and p itself. It fails
// with the error of an earlier write that failed, or net.ErrClosed after
// Close.
func (c *Conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if err := c.failed(); err != nil {
		c.mu.Unlock()
		return 0, err
	}
	if c.pendingLen()+len(p) <= MaxPending {
		c.add(p)
		if !c.scheduled {
			c.scheduled = true
			go c.batch()
		}
		c.mu.Unlock()
		return len(p), nil
	}
	c.mu.Unlock()
	return c.writeThrough(p)
}

// writeThrough sends what is pending and then p, from the caller's
// goroutine, after the batch being sent. What was pending leaves even if
// Close came meanwhile, as Close would have sent it.
func (c *Conn) writeThrough(p []byte) (int, error) {
	c.out.Lock()
	defer c.out.Unlock()
	c.mu.Lock()
	b := c.take()
	c.mu.Unlock()
	if err := c.send(b); err != nil {
		return 0, err
	}
	c.mu.Lock()
	err := c.failed()
	c.mu.Unlock()
	if err != nil {
		return 0, err
	}
	if err := c.bound(); err != nil {
		c.fail(err)
		return 0, err
	}
	n, err := c.Conn.Write(p)
	if err != nil {
		c.fail(err)
	}
	return n, err
}

// batch sends the pending bytes once the goroutines ready to run have run.
func (c *Conn) batch() {
	runtime.Gosched()
	c.out.Lock()
	defer c.out.Unlock()
	c.mu.Lock()
	b := c.take()
	c.scheduled = false
	c.mu.Unlock()
	_ = c.send(b) // a failure is kept for the next Write
}

// Close sends what is pending, after the batch being sent, waiting at
// most closeFlushTimeout for a peer that does not read, and closes the
// underlying connection.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return net.ErrClosed
	}
	c.closed = true
	c.closeBy = time.Now().Add(closeFlushTimeout)
	c.mu.Unlock()
	_ = c.Conn.SetWriteDeadline(c.closeBy)
	c.out.Lock()
	c.mu.Lock()
	b := c.take()
	c.mu.Unlock()
	_ = c.send(b)
	c.out.Unlock()
	return c.Conn.Close()
}

// send writes b (taken from pending) to the underlying connection and
// gives its buffer back. The caller holds c.out.
func (c *Conn) send(b *[]byte) error {
	if b == nil {
		return nil
	}
	defer release(b)
	c.mu.Lock()
	err := c.err
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if err := c.bound(); err != nil {
		c.fail(err)
		return err
	}
	if _, err := c.Conn.Write(*b); err != nil {
		c.fail(err)
		return err
	}
	return nil
}

// bound sets the deadline of the write about to be made: Close's, once
// closed, or WriteTimeout from now. The caller holds c.out.
func (c *Conn) bound() error {
	c.mu.Lock()
	by := c.closeBy
	c.mu.Unlock()
	if by.IsZero() {
		if c.timeout <= 0 {
			return nil
		}
		by = time.Now().Add(c.timeout)
	}
	return c.Conn.SetWriteDeadline(by)
}

func (c *Conn) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
}

// failed reports why Write cannot go on, or nil. The caller holds c.mu.
func (c *Conn) failed() error {
	switch {
	case c.err != nil:
		return c.err
	case c.closed:
		return net.ErrClosed
	}
	return nil
}

// The caller of add, take and pendingLen holds c.mu.

func (c *Conn) add(p []byte) {
	if c.pending == nil {
		c.pending = bufs.Get().(*[]byte)
	}
	*c.pending = append(*c.pending, p...)
}

func (c *Conn) take() *[]byte {
	b := c.pending
	c.pending = nil
	return b
}

func (c *Conn) pendingLen() int {
	if c.pending == nil {
		return 0
	}
	return len(*c.pending)
}

// release gives a buffer back to the pool, unless a burst grew it past
// what a batch usually holds.
func release(b *[]byte) {
	if b == nil || cap(*b) > 2*MaxPending {
		return
	}
	*b = (*b)[:0]
	bufs.Put(b)
}
