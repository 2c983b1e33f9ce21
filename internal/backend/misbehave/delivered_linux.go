package misbehave

import (
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// deliveryWait bounds how long waitDelivered waits.
const deliveryWait = 2 * time.Second

// waitDelivered returns once every byte and FIN written on c has been
// acknowledged by the peer's kernel (the send queue, SIOCOUTQ, is empty),
// or the peer closed its side (what is unacknowledged then will never be
// read), or after deliveryWait. On loopback data is acknowledged within
// microseconds, or within the 40 ms of a delayed ACK.
func waitDelivered(c *net.TCPConn) {
	raw, err := c.SyscallConn()
	if err != nil {
		return
	}
	deadline := time.Now().Add(deliveryWait)
	for pause := time.Microsecond; time.Now().Before(deadline); pause = min(2*pause, time.Millisecond) {
		done := true
		ctlErr := raw.Control(func(fd uintptr) {
			info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
			if err != nil {
				return
			}
			switch info.State {
			case unix.BPF_TCP_ESTABLISHED, unix.BPF_TCP_FIN_WAIT1, unix.BPF_TCP_CLOSING:
				queued, err := unix.IoctlGetInt(int(fd), unix.SIOCOUTQ)
				done = err != nil || queued == 0
			}
		})
		if ctlErr != nil || done {
			return
		}
		time.Sleep(pause)
	}
}
