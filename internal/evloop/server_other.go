//go:build !linux

package evloop

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

// Server runs the event loops; on this system there are none: New fails.
type Server struct{}

// New reports that this system has no event loops for the package: it
// needs Linux's epoll.
func New(Config) (*Server, error) {
	return nil, fmt.Errorf("evloop: event loops need Linux: %w", errors.ErrUnsupported)
}

// Supported reports whether New can start event loops on this system.
func Supported() bool { return false }

// Serve takes nothing: see New.
func (s *Server) Serve(net.Conn) bool { return false }

// Shutdown does nothing: see New.
func (s *Server) Shutdown(context.Context) error { return nil }

// Close does nothing: see New.
func (s *Server) Close() error { return nil }

// Conns returns 0: see New.
func (s *Server) Conns() int { return 0 }

// Adopted returns how many connections Serve took: none.
func (s *Server) Adopted() uint64 { return 0 }

// Conn is a client connection served by a loop: none on this system.
type Conn struct {
	// Value is the Handler's.
	Value any
	nc    net.Conn
}

// NetConn returns the connection the loop adopted.
func (c *Conn) NetConn() net.Conn { return c.nc }

// RemoteAddr returns the connection's remote address.
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// ShuttingDown reports false: see New.
func (c *Conn) ShuttingDown() bool { return false }

// Now returns the time.
func (c *Conn) Now() time.Time { return time.Now() }

// Abort does nothing: see New.
func (c *Conn) Abort() {}
