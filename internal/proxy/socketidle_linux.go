package proxy

import (
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// socketIdle returns how long the TCP socket under c has neither sent nor
// received data, from the kernel's TCP_INFO (to the millisecond), and
// whether it could tell. Acknowledgements and keep-alive probes carry no
// data and do not count.
func socketIdle(c net.Conn) (time.Duration, bool) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var info *unix.TCPInfo
	var ierr error
	err = rc.Control(func(fd uintptr) {
		info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	})
	if err != nil || ierr != nil {
		return 0, false
	}
	return time.Duration(min(info.Last_data_recv, info.Last_data_sent)) * time.Millisecond, true
}
