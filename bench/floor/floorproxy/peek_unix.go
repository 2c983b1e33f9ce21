//go:build unix

package floorproxy

import (
	"net"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// peeker checks a kept upstream connection without blocking, at the cost
// internal/upstream's check has: one non-blocking MSG_PEEK, called
// directly (unix.Recvfrom would allocate the source address) through a
// callback bound once.
type peeker struct {
	raw  syscall.RawConn
	peek func(fd uintptr)
	buf  [1]byte
	ok   bool
}

func newPeeker(c net.Conn) (*peeker, error) {
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return nil, err
	}
	p := &peeker{raw: raw}
	p.peek = p.peekFD
	return p, nil
}

// idle reports whether nothing arrived on the connection.
func (p *peeker) idle() bool {
	p.ok = false
	_ = p.raw.Control(p.peek)
	return p.ok
}

func (p *peeker) peekFD(fd uintptr) {
	_, _, errno := unix.RawSyscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&p.buf[0])), 1,
		unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
	p.ok = errno == unix.EAGAIN
}
