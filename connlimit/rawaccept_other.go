//go:build !linux

package connlimit

import (
	"errors"
	"net"
	"net/netip"
)

// rawAcceptor is Linux-only; elsewhere every connection is accepted
// through the inner listener.
type rawAcceptor struct{}

func newRawAcceptor(net.Listener) *rawAcceptor { return nil }

func (*rawAcceptor) try() (int, netip.AddrPort, bool) { return -1, netip.AddrPort{}, false }

func closeRaw(int, bool) {}

func rawConn(int) (net.Conn, error) { return nil, errors.ErrUnsupported }
