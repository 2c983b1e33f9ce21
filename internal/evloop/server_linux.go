//go:build linux

package evloop

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Server runs the event loops. Connections are given to it one by one
// (Serve), as a listener's accept loop gets them.
type Server struct {
	cfg     Config
	workers []*worker
	next    atomic.Uint32
	state   atomic.Int32 // running, shuttingDown, closed
	adopted atomic.Uint64
	wg      sync.WaitGroup
}

const (
	running int32 = iota
	shuttingDown
	closed
)

// New starts cfg.Workers event loops.
func New(cfg Config) (*Server, error) {
	if cfg.Handler == nil {
		return nil, errors.New("evloop: no Handler")
	}
	if cfg.Counts == nil {
		cfg.Counts = new(Counts)
	}
	s := &Server{cfg: cfg}
	for range cfg.workers() {
		w, err := newWorker(s)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.workers = append(s.workers, w)
		s.wg.Go(w.run)
	}
	return s, nil
}

// Supported reports whether New can start event loops on this system.
func Supported() bool { return true }

// Serve gives c to one of the loops and reports true; it reports false,
// having done nothing with c, when c is not a TCP connection underneath,
// a TLS one not made by TLSServer or whose handshake is not done, or the
// server is shutting down. Bytes that c read already and holds for its
// Read to return (a TakePending method returns them, as connlimit.Conn's
// does, past a PROXY header) come first; a TLS connection's are in
// crypto/tls's buffers.
func (s *Server) Serve(c net.Conn) bool {
	if s.state.Load() != running {
		return false
	}
	var ts *tlsSession
	under := c
	if tc, ok := c.(*tls.Conn); ok {
		if ts = sessionOf(tc); ts == nil {
			return false
		}
		under = ts.t.owner
	}
	tcp := tcpConnOf(under)
	if tcp == nil {
		return false
	}
	fd, err := adoptSocket(tcp)
	if err != nil {
		return false
	}
	var pending []byte
	if p, ok := c.(interface{ TakePending() []byte }); ok && ts == nil {
		pending = p.TakePending()
	}
	if ts != nil {
		ts.t.takenBy(fd)
	}
	s.adopted.Add(1)
	w := s.workers[int(s.next.Add(1))%len(s.workers)]
	conn := newConn(w, c, fd, pending, ts)
	if !w.post(func() { w.guard(conn, func() { w.adopt(conn) }) }, false) {
		// Closed meanwhile: the connection goes back.
		conn.state = stateGone
		go s.cfg.Handler.HandBack(conn.giveBack(true))
	}
	return true
}

// sessionOf returns the loop's session of tc, a TLS connection TLSServer
// made whose handshake is done; nil for any other.
func sessionOf(tc *tls.Conn) *tlsSession {
	t, ok := tc.NetConn().(*tlsTransport)
	if !ok {
		return nil
	}
	st := tc.ConnectionState()
	if !st.HandshakeComplete {
		return nil
	}
	return &tlsSession{tc: tc, t: t, state: st}
}

// tcpConnOf returns the TCP connection c is, or wraps (through the
// wrappers that expose what they wrap), or nil. A TLS connection is not a
// wrapper to see through: its bytes are not the socket's.
func tcpConnOf(c net.Conn) *net.TCPConn {
	for range 8 {
		switch v := c.(type) {
		case *net.TCPConn:
			return v
		case *tls.Conn:
			return nil
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		default:
			return nil
		}
	}
	return nil
}

// adoptSocket returns a duplicate of tc's socket for a loop, and closes
// tc, which takes its own descriptor out of the runtime's poller: left
// there, every byte that came for the loop would wake the runtime too.
// The duplicate shares the socket's non-blocking mode, which the runtime
// set.
func adoptSocket(tc *net.TCPConn) (int, error) {
	rc, err := tc.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd, derr := -1, error(nil)
	if err := rc.Control(func(s uintptr) {
		fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, derr
	}
	_ = tc.Close()
	return fd, nil
}

// Shutdown stops taking connections, closes those waiting for a request,
// and waits until every exchange under way ended or was handed over and
// every connection left, or until ctx ends; then it stops the loops. A
// request whose head comes during shutdown is not served: its connection
// closes, as net/http's server does then. It returns ctx.Err() when it
// had to give up, after closing what was left (see Close).
func (s *Server) Shutdown(ctx context.Context) error {
	if !s.state.CompareAndSwap(running, shuttingDown) {
		return s.waitOrClose(ctx)
	}
	for _, w := range s.workers {
		w.post(w.shutdown, false)
	}
	return s.waitOrClose(ctx)
}

func (s *Server) waitOrClose(ctx context.Context) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for !s.drained() {
		select {
		case <-ctx.Done():
			s.Close()
			return ctx.Err()
		case <-t.C:
		}
	}
	s.Close()
	return nil
}

func (s *Server) drained() bool {
	for _, w := range s.workers {
		if w.live.Load() > 0 {
			return false
		}
	}
	return true
}

// Close cuts every connection at once (an exchange under way ends with
// ErrClosed) and stops the loops; it returns once they stopped.
func (s *Server) Close() error {
	if s.state.Swap(closed) == closed {
		s.wg.Wait()
		return nil
	}
	for _, w := range s.workers {
		w.post(w.stop, true)
	}
	s.wg.Wait()
	return nil
}

// Conns returns how many connections the loops hold.
func (s *Server) Conns() int {
	n := 0
	for _, w := range s.workers {
		n += int(w.live.Load())
	}
	return n
}

// Adopted returns how many connections Serve took since New.
func (s *Server) Adopted() uint64 { return s.adopted.Load() }

func (s *Server) String() string { return fmt.Sprintf("evloop.Server(%d workers)", len(s.workers)) }
