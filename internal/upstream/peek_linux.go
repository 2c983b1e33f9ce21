//go:build linux

package upstream

import "syscall"

// peerGone reports whether the idle connection c cannot carry a request:
// the upstream closed or reset it, or sent bytes nobody asked for. It costs
// one non-blocking peek; a connection that is not a socket is presumed fine.
func (c *conn) peerGone() bool {
	sc, ok := c.nc.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	gone := false
	var b [1]byte
	err = raw.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		// EAGAIN: nothing to read, the connection is as it should be.
		// n == 0 without error: EOF. n > 0: stray bytes. Else: reset.
		gone = (err != syscall.EAGAIN && err != syscall.EWOULDBLOCK) || n > 0
		return true
	})
	return gone || err != nil
}
