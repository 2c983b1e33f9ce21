//go:build !linux

package floorproxy

import (
	"errors"
	"fmt"
	"net"
)

// ServeEpoll is Linux only (it runs epoll loops of its own).
func ServeEpoll(ln net.Listener, upstream string, workers int) (stop func(), err error) {
	return nil, fmt.Errorf("floor: ServeEpoll: %w", errors.ErrUnsupported)
}

// ServeEpollAdmitting is Linux only (it runs epoll loops of its own).
func ServeEpollAdmitting(ln net.Listener, upstream string, workers int, a *Admission) (stop func(), err error) {
	return nil, fmt.Errorf("floor: ServeEpollAdmitting: %w", errors.ErrUnsupported)
}
