//go:build !linux

package connlimit

import (
	"errors"
	"net"

	"github.com/seed-a07d1050/portcullis/clientkey"
)

func newSYNInstaller(net.Listener) (func([]clientkey.Key) (int, error), error) {
	return nil, errors.New("connlimit: SYNFilter is only supported on Linux")
}
