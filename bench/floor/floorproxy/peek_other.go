//go:build !unix

package floorproxy

import (
	"errors"
	"net"
)

// peeker is unix only: elsewhere a probing floor serves nothing.
type peeker struct{}

func newPeeker(net.Conn) (*peeker, error) {
	return nil, errors.New("floor: the idle check needs a unix socket")
}

func (*peeker) idle() bool { return false }
