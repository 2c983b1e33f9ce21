package backend

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// closeWait bounds how long [Server.Close] waits for handlers to return. They
// all honour their request's context, so this only matters if one is stuck.
const closeWait = 5 * time.Second

// ErrCloseTimeout is returned by [Server.Close] when handlers were still
// running closeWait after every connection had been closed.
var ErrCloseTimeout = errors.New("backend: handlers still running after close")

// Server is a [Handler] served over HTTP/1.1 on a listener of its own.
type Server struct {
	h      *Handler
	srv    *http.Server
	ln     net.Listener
	served chan struct{} // closed when Serve has returned

	closeOnce sync.Once
	closeErr  error
}

// Start listens on the TCP address addr (for example "127.0.0.1:0") and serves
// a [Handler] with the zero [Config]. It returns once the listener is open.
func Start(addr string) (*Server, error) { return StartConfig(addr, Config{}) }

// StartConfig is [Start] with a [Config]. On error nothing is left open.
func StartConfig(addr string, cfg Config) (*Server, error) {
	h, err := New(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("backend: listen: %w", err)
	}
	return serve(ln, h), nil
}

// Serve serves a [Handler] for cfg on ln, which it takes over: [Server.Close]
// closes it. Tests use it to put a listener wrapper in front of the backend.
// On a config error ln is closed and the error wraps [ErrInvalidConfig].
func Serve(ln net.Listener, cfg Config) (*Server, error) {
	h, err := New(cfg)
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	return serve(ln, h), nil
}

func serve(ln net.Listener, h *Handler) *Server {
	s := &Server{
		h:  h,
		ln: ln,
		// No header or idle timeouts, on purpose: the backend stands for an
		// upstream that trusts its proxy, so an attack passed through to it
		// shows in full.
		srv: &http.Server{
			Handler:  h,
			ErrorLog: slog.NewLogLogger(h.cfg.Logger.Handler(), slog.LevelWarn),
		},
		served: make(chan struct{}),
	}
	go func() {
		defer close(s.served)
		_ = s.srv.Serve(ln) // always returns an error; ErrServerClosed after Close
	}()
	return s
}

// Addr is the listener's address, "host:port".
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL is "http://" followed by [Server.Addr].
func (s *Server) URL() string { return "http://" + s.Addr() }

// Handler is the handler being served, for its counters.
func (s *Server) Handler() *Handler { return s.h }

// Close stops the server abruptly: it closes the listener, every connection
// and every WebSocket, then waits for the serving goroutine and, up to
// closeWait, for handlers to return. It returns [ErrCloseTimeout] if handlers
// were still running then, and nil otherwise. Later calls return the first
// call's result. A closed Server cannot be restarted.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.h.closeTunnels()
		_ = s.srv.Close()
		<-s.served
		s.closeErr = s.waitHandlers()
	})
	return s.closeErr
}

// waitHandlers polls because handlers cannot be waited on directly once
// http.Server has dropped them; every one of them is ending already.
func (s *Server) waitHandlers() error {
	deadline := time.Now().Add(closeWait)
	for s.h.InFlight() > 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %d left", ErrCloseTimeout, s.h.InFlight())
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}
