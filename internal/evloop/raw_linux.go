//go:build linux

package evloop

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The loops' system calls on their non-blocking sockets, and the look at
// their epoll set that does not wait, never block: they are made raw, as
// the runtime makes its own netpoll calls, without entering and leaving
// the runtime's system call state, which would let it hand the thread's
// processor to another thread meanwhile.

// The sockets are read and written with recvfrom and sendto rather than
// read and write, as nginx does: the socket calls go straight to the
// socket, where read and write go through the file layer first (its
// position lock, permission hooks and iterator set-up), some 3 % of a
// loop's CPU under load. sendto's MSG_NOSIGNAL spares the thread the
// SIGPIPE a write to a reset connection would raise, only for the
// runtime to ignore it.

// rawRead reads into b; 0 with a nil error at the end of the stream,
// unix.EAGAIN when nothing is there yet.
func rawRead(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// rawWrite writes what the socket takes of b now; unix.EAGAIN when it
// takes nothing.
func rawWrite(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), unix.MSG_NOSIGNAL, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// rawPeek looks at what waits on the socket without taking it.
func rawPeek(fd int, b []byte) (int, error) {
	n, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)),
		unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// epollWaitNow returns the events waiting on ep, without waiting.
func epollWaitNow(ep int, events []unix.EpollEvent) (int, error) {
	n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(ep), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// drained is why a read that returns less than it asked for ends the
// reading of a socket until its next event, as nginx's reads do, instead
// of one more read to find it empty: the socket's queue was empty when
// the read returned, so whatever comes after it raises a new edge on the
// edge-triggered epoll set. Not when an event said the peer closed its
// side (EPOLLRDHUP: that edge came already) or the connection failed:
// then reads go on until the end of the stream or the error.
