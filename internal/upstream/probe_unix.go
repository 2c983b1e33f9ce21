//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package upstream

import (
	"net"
	"syscall"
)

// canProbeSockets is true where a socket can be peeked without blocking.
const canProbeSockets = true

// socketProber checks an idle socket with one non-blocking MSG_PEEK:
// EAGAIN means nothing arrived; bytes, EOF or an error mean the
// connection cannot carry a request. It is made once per connection, so
// that a check allocates nothing.
type socketProber struct {
	raw  syscall.RawConn
	peek func(fd uintptr) // p.peekFD, bound once
	buf  [peekLen]byte
	n    int
	err  error
}

// newSocketProber returns the prober of nc's socket, or nil if nc does not
// expose one.
func newSocketProber(nc net.Conn) idleProber {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	p := &socketProber{raw: raw}
	p.peek = p.peekFD
	return p
}

func (p *socketProber) probeIdle() idleState {
	// Control, not Read: the connection is ours alone while it is checked,
	// so the read lock and poller preparation of Read would buy nothing.
	if err := p.raw.Control(p.peek); err != nil {
		return idleClosed
	}
	switch {
	case p.err == syscall.EAGAIN || p.err == syscall.EWOULDBLOCK:
		return idleOpen
	case p.err != nil || p.n <= 0: // reset, or EOF
		return idleClosed
	case is408(p.buf[:p.n]):
		return idleClosed
	}
	return idleUnsolicited
}
