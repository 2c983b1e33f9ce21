//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package upstream

import (
	"net"
	"syscall"
)

// rawOf returns nil: the send-then-read path needs POSIX sockets, and the
// request head is written by the connection's own Write instead.
func rawOf(net.Conn) syscall.RawConn { return nil }

func (c *conn) sendThenRead([]byte) (int, error) {
	panic("upstream: sendThenRead without a raw socket")
}

type sendReadState struct{}
