//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package upstream

import (
	"io"
	"net"
	"os"
	"syscall"
)

// rawOf returns the raw connection of nc's socket, or nil when nc is not a
// plain socket (the in-memory connections of the tests, or a wrapper whose
// Read or Write does more than the socket's).
func rawOf(nc net.Conn) syscall.RawConn {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return nil
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	return raw
}

// sendThenRead sends c.pending, the request head, and then reads its
// answer into p, both inside one RawConn.Read. That order is what saves a
// system call per exchange: a read right after the write would almost
// always find nothing (the upstream has not answered yet) and fail with
// EAGAIN before the goroutine parks. Here the goroutine parks at once after
// the write and reads only when the poller says the answer came.
//
// It must write inside the callback, not before it: RawConn.Read first
// clears the descriptor's readiness, and an answer whose readiness the
// poller had already recorded by then would never wake the wait. Written
// after the clearing, any answer wakes it.
//
// A write that cannot complete without blocking (a head larger than the
// socket buffer has room for) ends the callback; the rest goes through the
// connection's own Write, under its deadline, and the read through its
// own Read.
func (c *conn) sendThenRead(p []byte) (int, error) {
	st := &c.sr
	st.buf, st.sent, st.n, st.err = p, false, 0, nil
	if st.step == nil {
		st.step = c.sendThenReadStep // bound once: a closure per call would allocate
	}
	err := c.raw.Read(st.step)
	n, rerr := st.n, st.err
	st.buf = nil
	switch {
	case err != nil:
		return 0, err // the deadline passed, or the connection was closed
	case c.sendErr != nil:
		return 0, c.sendErr
	case len(c.pending) > 0:
		// The socket buffer was full: send the rest blocking, then read.
		rest := c.pending
		c.pending = nil
		if _, err := c.Write(rest); err != nil {
			c.sendErr = err
			return 0, err
		}
		return c.nc.Read(p)
	}
	if rerr != nil {
		return 0, os.NewSyscallError("read", rerr)
	}
	if n == 0 && len(p) > 0 {
		return 0, io.EOF
	}
	return n, nil
}

// sendThenReadStep is sendThenRead's RawConn.Read callback: the first call
// sends, the later ones read.
func (c *conn) sendThenReadStep(fd uintptr) bool {
	st := &c.sr
	if !st.sent {
		st.sent = true
		return !c.writePending(fd) // all sent: wait for the answer
	}
	st.n, st.err = readFD(fd, st.buf)
	return st.err != syscall.EAGAIN
}

// sendReadState is what sendThenRead and its callback share.
type sendReadState struct {
	step func(fd uintptr) bool
	buf  []byte
	sent bool
	n    int
	err  error
}

// writePending writes c.pending to fd without blocking and reports whether
// all of it went. A failure is kept in c.sendErr.
func (c *conn) writePending(fd uintptr) bool {
	for len(c.pending) > 0 {
		n, err := syscall.Write(int(fd), c.pending)
		if n > 0 {
			c.nwritten += int64(n)
			c.pending = c.pending[n:]
		}
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return false
		case err != nil:
			c.sendErr = os.NewSyscallError("write", err)
			c.pending = nil
			return false
		}
	}
	c.pending = nil
	return true
}

// readFD reads from fd once, retrying on EINTR.
func readFD(fd uintptr, p []byte) (int, error) {
	for {
		n, err := syscall.Read(int(fd), p)
		if err == syscall.EINTR {
			continue
		}
		if n < 0 {
			n = 0
		}
		return n, err
	}
}
