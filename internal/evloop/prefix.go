package evloop

import (
	"net"
	"syscall"
)

// prefixConn is a connection whose first bytes were read already: Read
// returns them before the connection's own. It is how the loop hands a
// connection, and what it read from it, to code that reads with Read.
type prefixConn struct {
	net.Conn
	prefix []byte
}

// withPrefix returns c with a copy of b in front of its bytes; c itself
// when b is empty.
func withPrefix(c net.Conn, b []byte) net.Conn {
	if len(b) == 0 {
		return c
	}
	return &prefixConn{Conn: c, prefix: append([]byte(nil), b...)}
}

// TakeBuffered returns the bytes read from the connection that Read has
// not returned yet, and forgets them: the caller owns the slice, its
// capacity beyond its length included, and reads what follows with Read.
// A server that reads into a buffer of its own takes them so, as its
// buffer, rather than copying them out with Read.
func (c *prefixConn) TakeBuffered() []byte {
	b := c.prefix
	c.prefix = nil
	return b
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// NetConn returns the connection under the prefix, as tls.Conn's does, so
// that what finds a connection's origin through wrappers finds it.
func (c *prefixConn) NetConn() net.Conn { return c.Conn }

// SyscallConn returns the socket's, for what watches the socket rather
// than reading it (a client's departure).
func (c *prefixConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, syscall.EINVAL
}

// CloseWrite half-closes the connection when the one underneath can.
func (c *prefixConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return syscall.EINVAL
}

// handedConn is a connection a loop adopted and gives back: its socket,
// the runtime's again, under the connection that was adopted, whose own
// descriptor the loop closed when it took a duplicate. Closing it closes
// both, so that what the adopted connection holds (a connection cap's
// slot) is given back; its remote address and what its wrappers say of
// it (NetConn) are the adopted connection's, its I/O the socket's, with
// what the loop read from it first.
type handedConn struct {
	prefixConn // the socket
	owner      net.Conn
}

func (c *handedConn) Close() error {
	err := c.Conn.Close()
	_ = c.owner.Close()
	return err
}

func (c *handedConn) RemoteAddr() net.Addr { return c.owner.RemoteAddr() }

// NetConn returns the adopted connection, so that what finds a
// connection's origin through wrappers (connlimit.KeyOf) finds it.
func (c *handedConn) NetConn() net.Conn { return c.owner }
