package intercept

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/forward"
)

// A session is one intercepted CONNECT: the client's side of the tunnel
// (a hijacked HTTP/1.1 connection or an HTTP/2 stream), what the CONNECT
// established (its target, verified user, client address and forwarding
// headers), and, once the handshake chose it, the target the requests
// inside go to. It is the net.Conn under the session's tls.Conn, so that
// tls.Conn.NetConn leads from a connection of the inner server back to it.
type session struct {
	net.Conn
	i       *Interceptor
	prefix  []byte // bytes read ahead (sniffed, or buffered by the server), served first
	connect forward.Target
	user    string
	hasUser bool
	client  string              // the CONNECT's RemoteAddr
	fwd     map[string][]string // the CONNECT's Forwarded and X-Forwarded-For
	opened  time.Time

	// Set during the handshake, on the handshake's goroutine, and read
	// after it.
	target forward.Target
	sni    bool // the client named the target in SNI
	badSNI string

	requests  atomic.Int64
	closeOnce sync.Once
	abortFn   func() // ends the client side at once; nil: Close does
}

// Read serves the bytes read ahead first.
func (s *session) Read(p []byte) (int, error) {
	if len(s.prefix) > 0 {
		n := copy(p, s.prefix)
		s.prefix = s.prefix[n:]
		return n, nil
	}
	return s.Conn.Read(p)
}

// Close closes the client side and forgets the session; only the first
// call does anything. Closing a hijacked connection releases whatever
// permit the limiters kept on it.
func (s *session) Close() error {
	err := net.ErrClosed
	s.closeOnce.Do(func() {
		err = s.Conn.Close()
		s.i.untrack(s)
		if s.target.IsValid() {
			s.i.log.LogAttrs(context.Background(), slog.LevelDebug, "intercepted session closed",
				slog.String("client", s.client),
				slog.String("target", s.target.String()),
				slog.Int64("requests", s.requests.Load()),
				slog.Duration("duration", time.Since(s.opened)))
		}
	})
	return err
}

// abort ends the session at once, for Close and Shutdown of the
// Interceptor: an HTTP/2 stream is reset rather than ended.
func (s *session) abort() {
	if s.abortFn != nil {
		s.abortFn()
	}
	s.Close()
}

// matchesHost reports whether a request's authority (its Host header or
// :authority) names the session's target.
func (s *session) matchesHost(host string) bool {
	if host == "" {
		return true // HTTP/1.0 without Host: the session's target
	}
	t, err := forward.ParseTarget(host, forward.DefaultConnectPort)
	return err == nil && t == s.target
}

// streamConn is the client side of a CONNECT over HTTP/2 as a net.Conn:
// the request body carries the client's bytes, the response body ours
// (RFC 9113 §8.5). Deadlines are the stream's, through
// http.ResponseController. Close ends the stream gracefully when no write
// is under way, and abort resets it; either way the handler, waiting in
// wait, returns only when no Read or Write is left inside the stream.
type streamConn struct {
	body          io.Reader
	w             http.ResponseWriter
	rc            *http.ResponseController
	local, remote net.Addr

	mu      sync.Mutex
	closed  bool
	busy    sync.WaitGroup // Reads and Writes under way
	writing atomic.Int32
	done    chan struct{}
}

var _ net.Conn = (*streamConn)(nil)

func newStreamConn(w http.ResponseWriter, r *http.Request) *streamConn {
	c := &streamConn{body: r.Body, w: w, rc: http.NewResponseController(w), done: make(chan struct{})}
	c.remote = addrOf(r.RemoteAddr)
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		c.local = a
	} else {
		c.local = addrOf("")
	}
	return c
}

// addrOf parses "ip:port" into a *net.TCPAddr, or an empty one.
func addrOf(s string) net.Addr {
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return &net.TCPAddr{}
	}
	return net.TCPAddrFromAddrPort(ap)
}

func (c *streamConn) enter() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.busy.Add(1)
	return true
}

func (c *streamConn) Read(p []byte) (int, error) {
	if !c.enter() {
		return 0, net.ErrClosed
	}
	defer c.busy.Done()
	return c.body.Read(p)
}

func (c *streamConn) Write(p []byte) (int, error) {
	if !c.enter() {
		return 0, net.ErrClosed
	}
	defer c.busy.Done()
	c.writing.Add(1)
	defer c.writing.Add(-1)
	n, err := c.w.Write(p)
	if err == nil {
		err = c.rc.Flush()
	}
	return n, err
}

// Close ends the stream: reads return at once; the handler returns and
// net/http ends the stream with END_STREAM. A Write still under way (a
// tls.Conn closes its connection while a Write blocks only to break it)
// makes it an abort.
func (c *streamConn) Close() error {
	c.end(c.writing.Load() > 0)
	return nil
}

func (c *streamConn) abort() { c.end(true) }

var aLongTimeAgo = time.Unix(1, 0)

func (c *streamConn) end(abort bool) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.mu.Unlock()
	_ = c.rc.SetReadDeadline(aLongTimeAgo)
	if abort {
		// A past write deadline also resets the stream.
		_ = c.rc.SetWriteDeadline(aLongTimeAgo)
	}
	close(c.done)
}

// wait blocks until the stream is closed and no Read or Write is left in
// it, so that the handler may return.
func (c *streamConn) wait() {
	<-c.done
	c.busy.Wait()
}

func (c *streamConn) LocalAddr() net.Addr  { return c.local }
func (c *streamConn) RemoteAddr() net.Addr { return c.remote }

func (c *streamConn) SetDeadline(t time.Time) error {
	if err := c.rc.SetReadDeadline(t); err != nil {
		return err
	}
	return c.rc.SetWriteDeadline(t)
}

func (c *streamConn) SetReadDeadline(t time.Time) error  { return c.rc.SetReadDeadline(t) }
func (c *streamConn) SetWriteDeadline(t time.Time) error { return c.rc.SetWriteDeadline(t) }

// sessionListener hands the inner http.Server the sessions whose
// handshake is done.
type sessionListener struct {
	ch        chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
	addr      net.Addr
}

func newSessionListener() *sessionListener {
	return &sessionListener{ch: make(chan net.Conn), done: make(chan struct{}), addr: &net.TCPAddr{}}
}

// push hands c to the server; it reports false once the listener is
// closed, and c is then the caller's to close.
func (l *sessionListener) push(c net.Conn) bool {
	select {
	case <-l.done:
		return false
	default:
	}
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *sessionListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *sessionListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return nil
}

func (l *sessionListener) Addr() net.Addr { return l.addr }
