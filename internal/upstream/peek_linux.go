package upstream

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// peekFD peeks at most len(p.buf) bytes of fd without blocking or
// consuming them. It calls recvfrom directly, without a source address:
// unix.Recvfrom would allocate one on every call. The call cannot block,
// so it need not tell the scheduler.
func (p *socketProber) peekFD(fd uintptr) {
	n, _, errno := unix.RawSyscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&p.buf[0])), uintptr(len(p.buf)),
		unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
	p.n, p.err = int(n), nil
	if errno != 0 {
		p.n, p.err = 0, syscall.Errno(errno)
	}
}
