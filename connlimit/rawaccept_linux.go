package connlimit

import (
	"net"
	"net/netip"
	"os"
	"syscall"
)

// rawAcceptor accepts pending connections of a TCP listener without the
// runtime poller: accept4 on the listener's own descriptor, through
// SyscallConn().Control, which holds a reference to it so that a concurrent
// Close is safe. A connection refused on this path costs accept4 and close
// and nothing else; one admitted on it becomes a net.Conn through
// net.FileConn, which costs a few system calls more than the poller's
// accept would (dup, getsockopt, getsockname, getpeername and Go's default
// keep-alive). The Listener therefore uses it only while refusals are
// frequent.
type rawAcceptor struct {
	rc syscall.RawConn
}

// newRawAcceptor returns an acceptor for inner, or nil when inner is not a
// *net.TCPListener.
func newRawAcceptor(inner net.Listener) *rawAcceptor {
	tl, ok := inner.(*net.TCPListener)
	if !ok {
		return nil
	}
	rc, err := tl.SyscallConn()
	if err != nil {
		return nil
	}
	return &rawAcceptor{rc: rc}
}

// try accepts one pending connection without waiting. It returns false
// when none is pending or anything failed; the caller then accepts through
// the poller, which waits, and reports any error that persists.
func (a *rawAcceptor) try() (fd int, peer netip.AddrPort, ok bool) {
	var sa syscall.Sockaddr
	err := a.rc.Control(func(lfd uintptr) {
		var aerr error
		fd, sa, aerr = syscall.Accept4(int(lfd), syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
		ok = aerr == nil
	})
	if err != nil || !ok {
		return -1, netip.AddrPort{}, false
	}
	return fd, sockaddrIPPort(sa), true
}

// sockaddrIPPort returns the unmapped IP address and port of sa, or the
// zero AddrPort.
func sockaddrIPPort(sa syscall.Sockaddr) netip.AddrPort {
	switch sa := sa.(type) {
	case *syscall.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port))
	case *syscall.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), uint16(sa.Port))
	}
	return netip.AddrPort{}
}

// closeRaw closes a raw connection, with a reset first when reset is set.
func closeRaw(fd int, reset bool) {
	if reset {
		// Best effort, as for a net.Conn: a FIN is the fallback.
		_ = syscall.SetsockoptLinger(fd, syscall.SOL_SOCKET, syscall.SO_LINGER, &syscall.Linger{Onoff: 1, Linger: 0})
	}
	_ = syscall.Close(fd)
}

// rawConn turns an admitted raw connection into a net.Conn. The
// descriptor is closed either way: net.FileConn works on a duplicate.
func rawConn(fd int) (net.Conn, error) {
	f := os.NewFile(uintptr(fd), "")
	defer f.Close()
	return net.FileConn(f)
}
