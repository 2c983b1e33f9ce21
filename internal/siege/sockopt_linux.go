package siege

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// bindNoPort sets IP_BIND_ADDRESS_NO_PORT on a socket about to be bound to a
// source address, so its port is picked at connect time by the full 4-tuple.
// Without it, binding picks a port per source address alone, and a client
// opening a fresh connection per request runs out of ports within seconds.
func bindNoPort(_, _ string, c syscall.RawConn) error {
	var sockErr error
	err := c.Control(func(fd uintptr) {
		sockErr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1)
	})
	if err != nil {
		return err
	}
	return sockErr
}
