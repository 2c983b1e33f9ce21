//go:build !linux

package proxy

import (
	"net"
	"time"
)

// socketIdle reports that the kernel does not tell how long a socket has
// been idle here: the idle watch counts bytes itself.
func socketIdle(net.Conn) (time.Duration, bool) { return 0, false }
