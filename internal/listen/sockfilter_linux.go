package listen

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// detachSocketFilter removes the socket filter of ln's socket: the SYN
// filter a running front installed on a socket a new front without
// syn_filter takes over. Errors are ignored: a socket without a filter
// reports one, and a filter left behind is replaced by the next one
// installed.
func detachSocketFilter(ln net.Listener) {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_DETACH_FILTER, 0)
	})
}
