package http1

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Server serves HTTP/1.x on connections it is given. Its fields mean what
// the fields of the same name of [http.Server] mean; the zero Server is
// valid and serves with no timeouts, 1 MiB heads and
// [http.DefaultServeMux]. Fields must not be changed once serving began.
type Server struct {
	// Handler serves every request, on the connection's goroutine. Nil
	// means http.DefaultServeMux.
	Handler http.Handler

	// Exchanges, if not nil, is offered every request whose head was read
	// and accepted, before the server builds an http.Request for it (see
	// [ExchangeHandler] and [Exchange], which says which requests are
	// offered), on the connection's goroutine. What it declines goes to
	// Handler. Nil: every request goes to Handler.
	Exchanges ExchangeHandler

	// ReadHeaderTimeout bounds reading a request head: the first head of a
	// connection from its start (after the TLS handshake), later ones from
	// their first bytes. Zero means ReadTimeout; zero for both means none.
	// A timeout ends the connection without an answer, as net/http does.
	ReadHeaderTimeout time.Duration

	// ReadTimeout bounds reading a whole request, head and body, from the
	// head's first bytes. Zero or negative means none.
	ReadTimeout time.Duration

	// WriteTimeout bounds writing a response, from the end of the request
	// head to the last byte written, handler time included. Zero or
	// negative means none.
	WriteTimeout time.Duration

	// IdleTimeout bounds the wait for the next request on a keep-alive
	// connection, until its first bytes arrive. Zero means ReadTimeout;
	// zero for both means none.
	IdleTimeout time.Duration

	// MaxHeaderBytes bounds a request head. A head not complete within
	// MaxHeaderBytes+4096 bytes (net/http's allowance for its buffer) is
	// answered 431 and the connection closed. Zero or negative means
	// http.DefaultMaxHeaderBytes (1 MiB).
	MaxHeaderBytes int

	// TLSNextProto, for a *tls.Conn whose handshake chose an ALPN protocol
	// other than "http/1.1" (such as "h2"), is called with the connection
	// on its serving goroutine; from then on the connection is the
	// callee's, which must close it, and the Server forgets it. A TLS
	// connection that chose a protocol not in the map is closed, as
	// net/http closes it. Nil means no protocol but HTTP/1.x. See
	// [Handoff] for passing connections to an http.Server.
	TLSNextProto map[string]func(*tls.Conn)

	// TakeTLS, if not nil, is offered each TLS connection that is to speak
	// HTTP/1.x once its handshake is done, on its serving goroutine. When
	// it returns true, the connection is the callee's, as with
	// TLSNextProto, and the Server forgets it; when false, the Server
	// serves it. The daemon's event loops take connections so
	// (evloop.Server.Serve), and give back what they do not serve
	// (ServeConn).
	TakeTLS func(*tls.Conn) bool

	// ConnState, if not nil, is called on every change of a connection's
	// state, as http.Server.ConnState is (StateNew, StateActive,
	// StateIdle, StateHijacked, StateClosed), on the connection's
	// goroutine. It must not block.
	ConnState func(net.Conn, http.ConnState)

	// BaseContext returns the context every request's context derives
	// from, for the listener passed to Serve (nil for ServeConn). Nil
	// means context.Background(). When that context ends, the requests
	// in flight see their contexts cancelled.
	BaseContext func(net.Listener) context.Context

	// ConnContext, if not nil, derives a connection's context from the
	// base context, as http.Server.ConnContext does.
	ConnContext func(ctx context.Context, c net.Conn) context.Context

	// DisableGeneralOptionsHandler, when true, passes "OPTIONS *"
	// requests to Handler instead of answering them 200 with an empty
	// body.
	DisableGeneralOptionsHandler bool

	// Logger receives the server's own errors: handler panics (ERROR),
	// accept failures (ERROR), TLS handshake failures and refused
	// requests (DEBUG: clients cause any number of them). Nil means
	// slog.Default().
	Logger *slog.Logger

	inShutdown atomic.Bool
	mu         sync.Mutex
	listeners  map[*net.Listener]struct{}
	conns      map[*conn]struct{}
	listenerWG sync.WaitGroup
}

// ErrServerClosed is returned by Serve and ServeConn after Shutdown or
// Close. It is http.ErrServerClosed, so that callers serving both kinds
// of server test one error.
var ErrServerClosed = http.ErrServerClosed

func (s *Server) logger() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.Default()
}

func (s *Server) maxHeaderBytes() int {
	if s.MaxHeaderBytes > 0 {
		return s.MaxHeaderBytes
	}
	return http.DefaultMaxHeaderBytes
}

// headLimit is the longest head read before answering 431.
func (s *Server) headLimit() int { return s.maxHeaderBytes() + 4096 }

func (s *Server) readHeaderTimeout() time.Duration {
	if s.ReadHeaderTimeout != 0 {
		return s.ReadHeaderTimeout
	}
	return s.ReadTimeout
}

// ReadLimits returns what bounds the reading of request heads on s's
// connections, with the defaults applied: the longest head read before
// the server answers 431, the time a head may take, and the wait for a
// kept connection's next request (zero: no bound). A reader of heads
// outside the server (see [HeadParser]) keeps to the same.
func (s *Server) ReadLimits() (maxHead int, headTimeout, idleTimeout time.Duration) {
	return s.headLimit(), s.readHeaderTimeout(), s.idleTimeout()
}

func (s *Server) idleTimeout() time.Duration {
	if s.IdleTimeout != 0 {
		return s.IdleTimeout
	}
	return s.ReadTimeout
}

// tlsHandshakeTimeout is the smallest positive of the read and write
// timeouts, as net/http bounds a handshake.
func (s *Server) tlsHandshakeTimeout() time.Duration {
	var d time.Duration
	for _, v := range [...]time.Duration{s.ReadHeaderTimeout, s.ReadTimeout, s.WriteTimeout} {
		if v > 0 && (d == 0 || v < d) {
			d = v
		}
	}
	return d
}

func (s *Server) shuttingDown() bool { return s.inShutdown.Load() }

// Serve accepts connections from l and serves each on its own goroutine
// until l fails or the server is shut down. A temporary Accept error is
// retried after a pause (5 ms doubling to 1 s), as net/http does. Serve
// closes l when it returns. It always returns a non-nil error: after
// Shutdown or Close, ErrServerClosed.
func (s *Server) Serve(l net.Listener) error {
	l = &onceCloseListener{Listener: l}
	defer l.Close()
	if !s.trackListener(&l, true) {
		return ErrServerClosed
	}
	defer s.trackListener(&l, false)
	base := context.Background()
	if s.BaseContext != nil {
		base = s.BaseContext(l)
		if base == nil {
			panic("http1: BaseContext returned a nil context")
		}
	}
	var delay time.Duration
	for {
		rw, err := l.Accept()
		if err != nil {
			if s.shuttingDown() {
				return ErrServerClosed
			}
			if isTemporary(err) {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				s.logger().Error("http1: accept failed, retrying", "error", err, "delay", delay)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		c := s.newConn(rw, base)
		if c == nil {
			_ = rw.Close()
			return ErrServerClosed
		}
		go c.serve()
	}
}

// isTemporary reports whether an Accept error is worth retrying, as
// net/http judges it: the error says it is temporary (EMFILE, ENFILE,
// ECONNABORTED and the like do).
func isTemporary(err error) bool {
	var te interface{ Temporary() bool }
	return errors.As(err, &te) && te.Temporary()
}

// ServeConn serves one connection on the calling goroutine, until it
// ends, is hijacked or handed off; it closes the connection unless a
// handler hijacked it or TLSNextProto took it. The connection may be a
// *tls.Conn whose handshake has not run yet. It returns ErrServerClosed
// if the server was shut down before the connection could be served, nil
// otherwise. When rw has a method TakeBuffered() []byte, as a connection an
// event loop hands back does, the server calls it once and takes the
// bytes it returns, read from rw already, as the start of its read buffer
// (the slice and its capacity are the server's from then on), instead of
// reading them again through Read.
func (s *Server) ServeConn(rw net.Conn) error {
	return s.ServeConnWith(rw, nil)
}

// ServeConnWith is ServeConn with first as the handler of the first
// request read from rw, which is neither offered to Exchanges nor given
// to Handler; the requests after it are served as ServeConn serves them.
// An event loop that read and began to serve a request itself hands the
// connection over so, with the request's head put back in front of rw's
// bytes, and first taking up where it left off. A nil first is ServeConn.
func (s *Server) ServeConnWith(rw net.Conn, first http.Handler) error {
	base := context.Background()
	if s.BaseContext != nil {
		base = s.BaseContext(nil)
	}
	c := s.newConn(rw, base)
	if c == nil {
		_ = rw.Close()
		return ErrServerClosed
	}
	c.first = first
	c.serve()
	return nil
}

func (s *Server) trackListener(l *net.Listener, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if add {
		if s.shuttingDown() {
			return false
		}
		if s.listeners == nil {
			s.listeners = make(map[*net.Listener]struct{})
		}
		s.listeners[l] = struct{}{}
		s.listenerWG.Add(1)
		return true
	}
	delete(s.listeners, l)
	s.listenerWG.Done()
	return true
}

// trackConn adds c to the connections Shutdown and Close know of, unless
// the server is shut down (false).
func (s *Server) trackConn(c *conn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !add {
		delete(s.conns, c)
		return true
	}
	if s.shuttingDown() {
		return false
	}
	if s.conns == nil {
		s.conns = make(map[*conn]struct{})
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) closeListenersLocked() error {
	var err error
	for ln := range s.listeners {
		if cerr := (*ln).Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	return err
}

// shutdownPollMax is the longest pause between two looks at the
// connections while Shutdown waits, as in net/http.
const shutdownPollMax = 500 * time.Millisecond

// Shutdown stops the server gracefully, as http.Server.Shutdown does: it
// closes the listeners, then closes idle connections (and new ones that
// sent nothing for 5 s) and waits for the active ones to finish their
// request and close, which they do instead of waiting for another. It
// returns when no connection is left (the listeners' Close error, if any)
// or when ctx ends (ctx.Err(), with connections still open: call Close).
// Hijacked and handed-off connections are not waited for. A shut-down
// Server cannot serve again.
func (s *Server) Shutdown(ctx context.Context) error {
	s.inShutdown.Store(true)
	s.mu.Lock()
	lnerr := s.closeListenersLocked()
	s.mu.Unlock()
	s.listenerWG.Wait()

	base := time.Millisecond
	next := func() time.Duration {
		d := base + rand.N(base/10+1)
		base = min(2*base, shutdownPollMax)
		return d
	}
	t := time.NewTimer(next())
	defer t.Stop()
	for {
		if s.closeIdleConns() {
			return lnerr
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			t.Reset(next())
		}
	}
}

// closeIdleConns closes the idle connections and reports whether none is
// left.
func (s *Server) closeIdleConns() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	quiescent := true
	now := time.Now().Unix()
	for c := range s.conns {
		st, since := c.getState()
		if st == http.StateNew && since < now-5 {
			st = http.StateIdle
		}
		if st != http.StateIdle || since == 0 {
			quiescent = false
			continue
		}
		_ = c.rwc.Close()
		delete(s.conns, c)
	}
	return quiescent
}

// Close closes the listeners and every connection at once, active ones
// included, as http.Server.Close does; it does not wait for handlers.
// Hijacked connections are left alone.
func (s *Server) Close() error {
	s.inShutdown.Store(true)
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.closeListenersLocked()
	s.mu.Unlock()
	s.listenerWG.Wait()
	s.mu.Lock()
	for c := range s.conns {
		c.closeNow()
		delete(s.conns, c)
	}
	return err
}

// onceCloseListener closes its listener once, whoever calls Close.
type onceCloseListener struct {
	net.Listener
	once sync.Once
	err  error
}

func (l *onceCloseListener) Close() error {
	l.once.Do(func() { l.err = l.Listener.Close() })
	return l.err
}
