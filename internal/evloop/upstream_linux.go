//go:build linux

package evloop

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// upConn is a connection to an upstream, the loop's own: carrying one
// client's exchange, or idle in the worker's pool.
type upConn struct {
	w     *worker
	fd    int
	token uint64
	addr  netip.AddrPort
	state upState

	c        *Conn // the exchange's client; nil while idle
	reused   bool  // it carried an exchange before this one
	canRead  bool  // an event said bytes may be waiting, and no read drained the socket since
	hup      bool  // an event said the upstream closed its side or the connection failed
	head     []byte
	off      int    // head[:off] was written
	in       []byte // the answer read so far: in[:n]
	n        int
	deadline time.Time // the connect or head deadline; zero: none
	since    time.Time // when it became idle
}

type upState uint8

const (
	upConnecting upState = iota
	upSending
	upReading
	upIdle
	upClosed
)

// connectTimeout bounds a connect, as the daemon's upstream transport
// bounds its dials.
const connectTimeout = 10 * time.Second

// maxAnswer bounds the bytes of an answer the loop reads before it hands
// the exchange over: an Exchange relays only small answers itself.
const maxAnswer = 256 << 10

// send sends the request of c's exchange: on an idle connection to its
// upstream unless fresh, or on a new one.
func (w *worker) send(c *Conn, fresh bool) {
	addr, head := c.ex.Upstream()
	var up *upConn
	if !fresh {
		up = w.takeIdle(addr)
	}
	if up == nil {
		up = w.connect(c, addr)
		if up == nil {
			return // handed over
		}
	}
	up.begin(c, head)
}

// begin starts c's exchange on up, connected or idle.
func (up *upConn) begin(c *Conn, head []byte) {
	up.c, c.up = c, up
	up.head, up.off, up.n = head, 0, 0
	if up.in == nil {
		up.in = up.w.answerBuf()
	}
	up.deadline = time.Time{}
	if d := c.ex.HeadTimeout(); d > 0 {
		up.deadline = up.w.now.Add(d)
	}
	if up.state == upConnecting {
		if dl := up.w.now.Add(connectTimeout); up.deadline.IsZero() || dl.Before(up.deadline) {
			up.deadline = dl
		}
		return // writable once connected
	}
	up.state = upSending
	up.sendHead()
}

// takeIdle returns an idle connection to addr on which nothing arrived,
// or nil. The events say when one was closed or spoke, but only once the
// loop reads them: a peek makes sure no byte waits on it now, so that
// bytes nobody asked for are never read as the answer to a request.
func (w *worker) takeIdle(addr netip.AddrPort) *upConn {
	for range 4 {
		stack := w.idle[addr]
		if len(stack) == 0 {
			return nil
		}
		up := stack[len(stack)-1]
		w.idle[addr] = stack[:len(stack)-1]
		if up.idleGone() {
			up.close()
			continue
		}
		w.s.cfg.Counts.Idle.Add(-1)
		up.state, up.reused, up.canRead = upSending, true, false // the peek found it empty
		return up
	}
	return nil
}

// idleGone reports whether the idle connection up was closed or reset,
// or bytes came on it that no request asked for, and counts which; false
// when nothing is waiting on it.
func (up *upConn) idleGone() bool {
	k, err := rawPeek(up.fd, up.w.scratch[:peekLen])
	switch {
	case err == unix.EAGAIN:
		return false
	case err != nil || k == 0 || is408(up.w.scratch[:k]):
		// A 408 is the upstream timing the connection out: it closes.
		up.w.s.cfg.Counts.IdleClosed.Add(1)
	default:
		up.w.s.cfg.Counts.Unsolicited.Add(1)
	}
	return true
}

// peekLen is what idleGone looks at: enough for a status line's code.
const peekLen = 12

func is408(b []byte) bool {
	return len(b) >= peekLen && string(b[:7]) == "HTTP/1." && string(b[8:12]) == " 408"
}

// connect opens a connection to addr, or to the addresses the exchange
// names when one refuses. It returns nil when it handed the exchange over
// instead.
func (w *worker) connect(c *Conn, addr netip.AddrPort) *upConn {
	for {
		up, err := w.dial(addr)
		if err == nil {
			return up
		}
		if err != unix.ECONNREFUSED {
			c.resume(nil, dialError(addr, err))
			return nil
		}
		next, ok := c.ex.Refused(addr)
		if !ok {
			c.resume(nil, dialError(addr, err))
			return nil
		}
		addr = next
	}
}

// dial starts a non-blocking connect to addr.
func (w *worker) dial(addr netip.AddrPort) (*upConn, error) {
	family := unix.AF_INET
	var sa unix.Sockaddr
	if a := addr.Addr(); a.Is4() || a.Is4In6() {
		sa = &unix.SockaddrInet4{Port: int(addr.Port()), Addr: a.Unmap().As4()}
	} else {
		family = unix.AF_INET6
		sa = &unix.SockaddrInet6{Port: int(addr.Port()), Addr: a.As16()}
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	state := upSending
	switch err := unix.Connect(fd, sa); err {
	case nil:
	case unix.EINPROGRESS:
		state = upConnecting
	default:
		unix.Close(fd)
		return nil, err
	}
	up := &upConn{w: w, fd: fd, addr: addr, state: state, token: w.sockets.token(fd)}
	// Edge-triggered, as the clients' sockets are.
	if err := w.ctl(unix.EPOLL_CTL_ADD, fd, unix.EPOLLIN|unix.EPOLLOUT|unix.EPOLLRDHUP|unix.EPOLLET, up.token); err != nil {
		unix.Close(fd)
		return nil, unix.ENOMEM
	}
	w.sockets.add(up.token, up)
	if state == upSending {
		w.s.cfg.Counts.Dials.Add(1)
	}
	return up, nil
}

// dialError is the error of a failed connect, worded as the daemon's
// upstream transport words its dial errors.
func dialError(addr netip.AddrPort, errno error) error {
	op := &net.OpError{Op: "dial", Net: "tcp", Addr: net.TCPAddrFromAddrPort(addr), Err: os.NewSyscallError("connect", errno)}
	return fmt.Errorf("upstream: dial %s: %w", addr, op)
}

func (up *upConn) ready(events uint32) {
	readable := events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0
	up.canRead = up.canRead || readable
	up.hup = up.hup || events&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0
	switch up.state {
	case upConnecting:
		up.connected()
	case upSending:
		up.sendHead()
	case upReading:
		if readable {
			up.readAnswer()
		}
	case upIdle:
		if readable && up.idleGone() {
			up.close()
		}
	}
}

// connected follows the end of a connect: the request goes out, or the
// exchange turns to another address or is handed over.
func (up *upConn) connected() {
	errno, err := unix.GetsockoptInt(up.fd, unix.SOL_SOCKET, unix.SO_ERROR)
	if err == nil && errno == 0 {
		up.w.s.cfg.Counts.Dials.Add(1)
		up.state = upSending
		up.sendHead()
		return
	}
	if err == nil {
		err = unix.Errno(errno)
	}
	c, addr, head := up.c, up.addr, up.head
	up.close()
	c.up = nil
	if err != unix.ECONNREFUSED {
		c.resume(nil, dialError(addr, err))
		return
	}
	next, ok := c.ex.Refused(addr)
	if !ok {
		c.resume(nil, dialError(addr, err))
		return
	}
	if nu := up.w.connect(c, next); nu != nil {
		nu.begin(c, head)
	}
}

// giveUp ends the exchange on up, which failed before the request was
// sent, handing it over with cause.
func (up *upConn) giveUp(cause error) {
	c := up.c
	up.close()
	c.up = nil
	c.resume(nil, cause)
}

// sendHead writes what is left of the request head.
func (up *upConn) sendHead() {
	for up.off < len(up.head) {
		k, err := rawWrite(up.fd, up.head[up.off:])
		if err == unix.EAGAIN {
			return // the next EPOLLOUT edge goes on
		}
		if err != nil {
			if up.stale() {
				return
			}
			up.giveUp(fmt.Errorf("upstream: write request: %w", os.NewSyscallError("write", err)))
			return
		}
		up.off += k
	}
	up.state = upReading
	if up.canRead {
		up.readAnswer() // an edge came while sending; otherwise the next one brings the answer
	}
}

// stale sends the exchange again on a new connection when up, taken from
// the pool, turns out to have been closed before the request reached the
// upstream: nothing came back on it. It reports whether it did.
func (up *upConn) stale() bool {
	if !up.reused || up.n > 0 {
		return false
	}
	c := up.c
	up.close()
	c.up = nil
	up.w.s.cfg.Counts.Retries.Add(1)
	up.w.send(c, true)
	return true
}

// readAnswer reads what the upstream sent, until the socket is empty or
// the exchange says the answer is whole or not for the loop.
func (up *upConn) readAnswer() {
	for up.state == upReading && up.canRead {
		if up.n == len(up.in) {
			if len(up.in) >= maxAnswer {
				up.handOver()
				return
			}
			grown := make([]byte, min(2*len(up.in), maxAnswer))
			copy(grown, up.in[:up.n])
			up.in = grown
		}
		k, err := rawRead(up.fd, up.in[up.n:])
		switch {
		case err == unix.EAGAIN:
			up.canRead = false
			return
		case err != nil || k == 0:
			if !up.stale() {
				up.handOver() // the transport reads the end of it, as it would have
			}
			return
		}
		if k < len(up.in)-up.n && !up.hup {
			up.canRead = false // see drained
		}
		up.n += k
		if !up.answered() {
			return
		}
	}
}

// answered asks the exchange about the answer read so far and acts on
// its verdict. It reports whether to read on.
func (up *upConn) answered() bool {
	c := up.c
	v, n := c.ex.Answer(up.in[:up.n], up.reused)
	switch v {
	case More:
		return true
	case Whole:
		r := c.ex.Reply(up.in[:n])
		if overlap(r.Out, up.in) {
			// The answer is written from the buffer it came in: the
			// connection's next exchange must not read into it.
			up.in = nil
		}
		if r.KeepUpstream && n == up.n && !up.hup {
			up.putIdle()
		} else {
			up.close() // or bytes after the answer, nobody asked for them, or the upstream closing
		}
		c.up = nil
		c.reply(r)
	case Retry:
		if !up.reused {
			up.handOver() // only a kept connection goes stale
			break
		}
		up.n = 0
		up.stale()
	default:
		up.handOver()
	}
	return false
}

// answerBufSize is the buffer an answer is read into at first.
const answerBufSize = 16 << 10

// answerBuf returns a buffer for an answer: one an idle connection gave
// back, or a new one.
func (w *worker) answerBuf() []byte {
	if n := len(w.spareBufs); n > 0 {
		b := w.spareBufs[n-1]
		w.spareBufs[n-1] = nil
		w.spareBufs = w.spareBufs[:n-1]
		w.spareLow = min(w.spareLow, n-1)
		return b
	}
	return make([]byte, answerBufSize)
}

// overlap reports whether a and b share memory.
func overlap(a, b []byte) bool {
	if len(a) == 0 || cap(b) == 0 {
		return false
	}
	a0, b0 := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return a0 < b0+uintptr(cap(b)) && b0 < a0+uintptr(len(a))
}

// handOver gives the exchange, with up as a connection of the Go
// runtime's whose bytes begin with those read, to Exchange.Resume.
func (up *upConn) handOver() {
	c := up.c
	c.up = nil
	nc, err := up.detach()
	if err != nil {
		c.resume(nil, fmt.Errorf("upstream: read response head: %w", err))
		return
	}
	c.resume(nc, nil)
}

// detach takes up out of the worker and returns its socket as a net.Conn
// with what was read from it in front.
func (up *upConn) detach() (net.Conn, error) {
	_ = up.w.ctl(unix.EPOLL_CTL_DEL, up.fd, 0, 0)
	up.w.sockets.remove(up.token)
	f := os.NewFile(uintptr(up.fd), "upstream")
	nc, err := net.FileConn(f) // a duplicate, in the runtime's poller
	f.Close()
	up.state, up.fd = upClosed, -1
	if err != nil {
		return nil, err
	}
	return withPrefix(nc, up.in[:up.n]), nil
}

// putIdle keeps up for the next exchange to its address.
func (up *upConn) putIdle() {
	w := up.w
	stack := w.idle[up.addr]
	if len(stack) >= w.s.cfg.maxIdlePerUpstream() {
		stack[0].close()
		stack = w.idle[up.addr]
	}
	if len(up.in) == answerBufSize {
		w.spareBufs = append(w.spareBufs, up.in) // an idle connection holds no buffer
	}
	up.c, up.head, up.n, up.in = nil, nil, 0, nil
	up.state, up.since, up.deadline = upIdle, w.now, time.Time{}
	w.idle[up.addr] = append(stack, up)
	w.s.cfg.Counts.Idle.Add(1)
}

// timeUp ends what ran out of time: an idle connection kept too long, a
// connect, or the wait for an answer's head (handed over: the transport
// finds the time up and answers as it does then).
func (up *upConn) timeUp() {
	now := up.w.now
	switch up.state {
	case upIdle:
		if now.Sub(up.since) >= up.w.s.cfg.upstreamIdleTimeout() {
			up.close()
		}
	case upConnecting:
		if !up.deadline.IsZero() && !now.Before(up.deadline) {
			up.giveUp(dialError(up.addr, errTimeout{}))
		}
	case upSending:
		// Not even the request went out whole: there is no answer to
		// read, only the time that ran out, as a write's would.
		if !up.deadline.IsZero() && !now.Before(up.deadline) {
			up.giveUp(fmt.Errorf("upstream: write request: %w", errTimeout{}))
		}
	case upReading:
		if !up.deadline.IsZero() && !now.Before(up.deadline) {
			up.handOver()
		}
	}
}

// errTimeout is a connect or a write that took longer than allowed: a
// timeout, as the daemon's transport reports one.
type errTimeout struct{}

func (errTimeout) Error() string   { return "i/o timeout" }
func (errTimeout) Timeout() bool   { return true }
func (errTimeout) Temporary() bool { return true }

// close closes up and takes it out of the worker and its pool.
func (up *upConn) close() {
	if up.state == upClosed {
		return
	}
	w := up.w
	if up.state == upIdle {
		w.s.cfg.Counts.Idle.Add(-1)
		stack := w.idle[up.addr]
		for i, o := range stack {
			if o == up {
				w.idle[up.addr] = append(stack[:i], stack[i+1:]...)
				break
			}
		}
		if len(w.idle[up.addr]) == 0 {
			delete(w.idle, up.addr)
		}
	}
	w.sockets.remove(up.token)
	unix.Close(up.fd) // which takes it out of the epoll set
	up.state, up.fd = upClosed, -1
}
