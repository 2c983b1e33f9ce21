package connlimit

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/proxyproto"
)

// Conn is a connection admitted by a [Listener]. It holds the connection's
// slots until Close, which gives them back exactly once however often and
// from however many goroutines it is called, and even when the inner
// Close fails. It keeps the fast paths of the inner connection: ReadFrom
// and WriteTo delegate to it (so a *net.TCPConn still splices and
// sendfiles), as do CloseRead, CloseWrite and SyscallConn.
//
// Conn is exported so that callers can type-assert to it, or find it with
// [KeyOf] under a *tls.Conn; only Accept makes one.
type Conn struct {
	conn   net.Conn
	l      *Listener
	key    clientkey.Key
	exempt bool
	remote net.Addr           // the client named by a PROXY header; nil: conn's own peer
	header *proxyproto.Header // nil: none was read
	client netip.Addr         // the address keyed
	ps     permits
	// release gives the slots back once; a Close that comes while another
	// is giving them back waits for it, so that every Close returns with
	// the slots given back (a server and its Shutdown may close one
	// connection at the same time).
	release sync.Once

	// In the list of l's open connections, under l.live.mu. gone is set
	// when Close takes it out.
	prev, next *Conn
	gone       bool
	// adopted are the slots the Listeners that adopted the connection
	// counted it under (see Listener.Adopt), given back by Close; under
	// l.live.mu.
	adopted []*adoption

	// Bytes read past the PROXY header, returned by Read before the
	// connection's own bytes. hasPending keeps Read lock-free once empty.
	hasPending atomic.Bool
	pendingMu  sync.Mutex
	pending    []byte
}

var (
	_ net.Conn      = (*Conn)(nil)
	_ io.ReaderFrom = (*Conn)(nil)
	_ io.WriterTo   = (*Conn)(nil)
	_ syscall.Conn  = (*Conn)(nil)
)

// ErrUnsupported is returned (wrapped, with the operation's name) by
// CloseRead, CloseWrite and SyscallConn when the inner connection does not
// have that method. It matches [errors.ErrUnsupported].
var ErrUnsupported = fmt.Errorf("connlimit: inner connection does not support it: %w", errors.ErrUnsupported)

// Key returns the client's key at the per-client level: the key of the
// client a PROXY header named, or of the peer. An exempt connection still
// reports its peer's key though it holds no slot; a peer with no IP
// address gives the zero Key.
func (c *Conn) Key() clientkey.Key { return c.key }

// Exempt reports whether the connection holds no per-client slot: its peer
// is trusted (and named no client in a PROXY header) or has no IP address.
func (c *Conn) Exempt() bool { return c.exempt }

// ProxyHeader returns the PROXY protocol header read from the connection,
// and false when none was read.
func (c *Conn) ProxyHeader() (proxyproto.Header, bool) {
	if c.header == nil {
		return proxyproto.Header{}, false
	}
	return *c.header, true
}

// NetConn returns the inner connection. Reading from it directly skips the
// bytes already read past a PROXY header, and closing it directly does
// not release the slot: close the Conn.
func (c *Conn) NetConn() net.Conn { return c.conn }

// Read reads from the connection: first any bytes read past a PROXY
// header, then the connection's own.
func (c *Conn) Read(b []byte) (int, error) {
	if c.hasPending.Load() {
		if p := c.takePending(len(b)); p != nil {
			return copy(b, p), nil
		}
	}
	return c.conn.Read(b)
}

// TakePending returns the bytes read past a PROXY header that Read has
// not returned yet, and removes them from what Read returns; nil when
// there are none. A caller that reads the socket itself, through
// SyscallConn, takes them first: they come before the socket's.
func (c *Conn) TakePending() []byte {
	if !c.hasPending.Load() {
		return nil
	}
	return c.takePending(math.MaxInt)
}

// takePending removes and returns up to n pending bytes, or nil when there
// are none.
func (c *Conn) takePending(n int) []byte {
	c.pendingMu.Lock()
	defer c.pendingMu.Unlock()
	if len(c.pending) == 0 {
		return nil
	}
	n = min(n, len(c.pending))
	p := c.pending[:n:n]
	c.pending = c.pending[n:]
	if len(c.pending) == 0 {
		c.pending = nil
		c.hasPending.Store(false)
	}
	return p
}

// Write writes to the inner connection.
func (c *Conn) Write(b []byte) (int, error) { return c.conn.Write(b) }

// Close closes the inner connection and gives back the connection's
// slots and its MaxConns place, once: a later or concurrent Close returns
// when they have been given back. It returns the inner Close's error; the
// slots are given back even then.
func (c *Conn) Close() error {
	err := c.conn.Close()
	c.release.Do(c.giveBack)
	return err
}

// giveBack returns the connection's slots, its MaxConns place and its
// place in the open connections, to its Listener and to every Listener
// that adopted it.
func (c *Conn) giveBack() {
	c.ps.release()
	if c.l.syn != nil && !c.exempt {
		c.l.syn.released(c.key)
	}
	c.l.stats.open.Add(-1)
	c.l.giveToken()
	for _, a := range c.l.live.remove(c) {
		a.end()
	}
}

// LocalAddr returns the inner connection's local address. A PROXY header's
// destination is in [Conn.ProxyHeader].
func (c *Conn) LocalAddr() net.Addr { return c.conn.LocalAddr() }

// RemoteAddr returns the client a PROXY header named (a *net.TCPAddr), or
// else the inner connection's peer.
func (c *Conn) RemoteAddr() net.Addr {
	if c.remote != nil {
		return c.remote
	}
	return c.conn.RemoteAddr()
}

// SetDeadline sets the inner connection's deadlines.
func (c *Conn) SetDeadline(t time.Time) error { return c.conn.SetDeadline(t) }

// SetReadDeadline sets the inner connection's read deadline.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.conn.SetReadDeadline(t) }

// SetWriteDeadline sets the inner connection's write deadline.
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.conn.SetWriteDeadline(t) }

// ReadFrom implements [io.ReaderFrom] with the inner connection's
// ReadFrom, so that copying a file or socket into a TCP connection keeps
// using sendfile or splice. A source that is itself a Conn with no pending
// bytes is unwrapped to its inner connection for the same reason. Without
// an inner ReadFrom it copies through Write.
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	if src, ok := r.(*Conn); ok && !src.hasPending.Load() {
		r = src.conn
	}
	if rf, ok := c.conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(writerOnly{c.conn}, r)
}

// WriteTo implements [io.WriterTo]: it writes any bytes pending after a
// PROXY header, then hands over to the inner connection's WriteTo (splice
// on Linux). A destination that is a Conn is unwrapped to its inner
// connection. Without an inner WriteTo it copies through Read.
func (c *Conn) WriteTo(w io.Writer) (int64, error) {
	if dst, ok := w.(*Conn); ok {
		w = dst.conn
	}
	var n int64
	if c.hasPending.Load() {
		if p := c.takePending(int(^uint(0) >> 1)); p != nil {
			m, err := w.Write(p)
			n += int64(m)
			if err != nil {
				return n, err
			}
		}
	}
	var m int64
	var err error
	if wt, ok := c.conn.(io.WriterTo); ok {
		m, err = wt.WriteTo(w)
	} else {
		m, err = io.Copy(w, readerOnly{c.conn})
	}
	return n + m, err
}

// CloseWrite shuts down the writing side of the inner connection (a TCP
// half-close). The slot is kept until Close.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return fmt.Errorf("CloseWrite: %w", ErrUnsupported)
}

// CloseRead shuts down the reading side of the inner connection. The slot
// is kept until Close.
func (c *Conn) CloseRead() error {
	if cr, ok := c.conn.(interface{ CloseRead() error }); ok {
		return cr.CloseRead()
	}
	return fmt.Errorf("CloseRead: %w", ErrUnsupported)
}

// SyscallConn returns the inner connection's raw connection, for socket
// options. Closing the descriptor through it bypasses the slot: use Close.
func (c *Conn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, fmt.Errorf("SyscallConn: %w", ErrUnsupported)
}

// writerOnly and readerOnly hide a connection's ReadFrom and WriteTo, so
// that io.Copy falls back to plain reads and writes instead of calling
// back into us.
type writerOnly struct{ io.Writer }
type readerOnly struct{ io.Reader }

// KeyOf returns the client key of a connection a [Listener] admitted, and
// true. It finds the [*Conn] through wrappers that expose their inner
// connection with a NetConn method, as *tls.Conn does. For any other
// connection it returns the zero Key and false.
func KeyOf(c net.Conn) (clientkey.Key, bool) {
	for range 8 { // wrappers nest a few deep at most; a cycle must not hang us
		switch v := c.(type) {
		case *Conn:
			return v.key, true
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		default:
			return clientkey.Key{}, false
		}
	}
	return clientkey.Key{}, false
}
