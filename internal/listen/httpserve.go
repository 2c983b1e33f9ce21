package listen

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"sync"

	"github.com/seed-a07d1050/portcullis/internal/bytepath"
	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/evloop"
	"github.com/seed-a07d1050/portcullis/internal/h2check"
	"github.com/seed-a07d1050/portcullis/internal/http1"
)

// httpServers serve the admitted connections of an http or https
// listener, as its http1_server setting says: net/http alone, or
// internal/http1 for HTTP/1.x with, on https, net/http behind it for the
// connections whose TLS handshake chose HTTP/2. They are built when the
// listener is bound and started when it begins to serve, so that a reload
// builds everything before it commits.
type httpServers struct {
	// std is net/http's server: every connection with http1_server
	// net/http, the HTTP/2 connections fast hands off on https, nil on an
	// http listener served by fast.
	std *http.Server
	// fast serves HTTP/1.x with http1_server eventloop (or one of its
	// internal parts, lean or fast, set in Go); nil with net/http.
	fast *http1.Server
	// handoff carries the HTTP/2 connections from fast to std; https with
	// fast only.
	handoff *http1.Handoff
	// tls is the TLS configuration fast handshakes with; https with fast
	// only (net/http's ServeTLS makes its own from std.TLSConfig).
	tls *tls.Config

	base context.Context // the base of every request's context; set by start
	// handoffDone is closed when std's Serve of handoff returns; nil until
	// start, and without a handoff.
	handoffDone chan struct{}

	// loop relays the plainest exchanges on event loops, with
	// http1_server eventloop, of the plain connections of an http listener
	// and the HTTP/1.x connections of an https one (see
	// bytepath.Loops); fast serves what it gives back. Nil otherwise, and
	// until start.
	loop     *evloop.Server
	loopWith *bytepath.Loops // the loop's Handler; nil without eventloop
	loopLn   net.Listener    // what fast accepts from while the loops run
}

// newHTTPServers builds the servers of f, an http or https front, without
// starting them. Each request goes to f.ServeHTTP, or to the byte path.
func newHTTPServers(f *Front) *httpServers {
	lc := &f.cfg
	h := &httpServers{}
	baseContext := func(net.Listener) context.Context { return h.base }
	if lc.HTTP1Server.Fast() {
		h.fast = &http1.Server{
			Handler:           f,
			ReadHeaderTimeout: lc.ReadHeaderTimeout,
			ReadTimeout:       lc.ReadTimeout,
			WriteTimeout:      lc.WriteTimeout,
			IdleTimeout:       lc.IdleTimeout,
			MaxHeaderBytes:    lc.MaxHeaderBytes,
			BaseContext:       baseContext,
			Logger:            f.log,
		}
		if lc.HTTP1Server.Lean() {
			h.fast.Exchanges = bytepath.NewPoller(f.byteListener())
		}
		if lc.HTTP1Server == config.HTTP1ServerEventLoop {
			h.loopWith = bytepath.NewLoops(f.byteListener(), h.fast)
		}
		if lc.Protocol != config.ProtocolHTTPS {
			return h
		}
	}
	h.std = &http.Server{
		Handler:           f,
		ReadHeaderTimeout: lc.ReadHeaderTimeout,
		ReadTimeout:       lc.ReadTimeout,
		WriteTimeout:      lc.WriteTimeout,
		IdleTimeout:       lc.IdleTimeout,
		MaxHeaderBytes:    lc.MaxHeaderBytes,
		ErrorLog:          newServerErrorLog(f.log),
		BaseContext:       baseContext,
	}
	if lc.Protocol != config.ProtocolHTTPS {
		return h
	}
	// send_timeout bounds an HTTP/2 connection's writes as a whole: a stream's own
	// write deadline resets it with a frame that a connection whose client stopped
	// reading never sends, so the stream (and its permits) would stay.
	h.std.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: lc.MaxConcurrentStreams, WriteByteTimeout: lc.SendTimeout}
	_ = h2check.Configure(h.std) // fails only on a TLSConfig's CipherSuites: h.std has none yet
	tlsConfig := &tls.Config{
		GetCertificate: f.getCertificate,
		MinVersion:     tls.VersionTLS12,
		NextProtos:     []string{"h2", "http/1.1"},
	}
	if h.fast == nil {
		h.std.TLSConfig = tlsConfig
		return h
	}
	// fast runs every handshake; std only serves the HTTP/2 connections
	// handed to it, with the TLSConfig h2check gave it (sharing h.tls, it
	// would be written to while fast handshakes with it).
	h.tls = tlsConfig
	h.handoff = http1.NewHandoff(f.conns.Addr())
	h.fast.TLSNextProto = map[string]func(*tls.Conn){"h2": h.handoff.Deliver}
	return h
}

// start serves the connections of conns on their own goroutines, with
// s.Base as the base of every request's context, and closes served once the
// loop accepting from conns has returned (when conns is closed), as a
// reload that takes over the socket waits for. The connection caps run
// before any TLS handshake: the TLS listener wraps conns. With a handoff,
// std goes on serving the HTTP/2 connections whose handshakes were under
// way until shutdown or close.
func (h *httpServers) start(conns net.Listener, s Serving, served chan<- struct{}, log func(error)) {
	h.base = s.Base
	check := func(err error) {
		if err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			log(err)
		}
	}
	if h.handoff != nil {
		h.handoffDone = make(chan struct{})
		go func() {
			defer close(h.handoffDone)
			check(h.std.Serve(h.handoff))
		}()
	}
	if h.loopWith != nil {
		h.loopWith.PanicHook = s.LoopPanicHook
	}
	if h.startLoop(s.LoopCounts, log) {
		if h.tls != nil {
			// The handshake runs on fast's goroutine; then the loops take
			// the connections they serve (TakeTLS).
			h.loopLn = evloop.NewTLSListener(conns, h.tls)
			h.fast.TakeTLS = h.takeTLS
		} else {
			h.loopLn = &loopListener{Listener: conns, loop: h.loop, takes: h.loopWith.Takes}
		}
	}
	go func() {
		defer close(served)
		switch {
		case h.fast == nil && h.std.TLSConfig != nil:
			check(h.std.ServeTLS(conns, "", ""))
		case h.fast == nil:
			check(h.std.Serve(conns))
		case h.loopLn != nil:
			check(h.fast.Serve(h.loopLn))
		case h.handoff != nil:
			check(h.fast.Serve(tls.NewListener(conns, h.tls)))
		default:
			check(h.fast.Serve(conns))
		}
	}()
}

// takeTLS gives the loops an https connection whose handshake chose
// HTTP/1.x, when the listener's configuration gives them anything to
// serve.
func (h *httpServers) takeTLS(tc *tls.Conn) bool {
	return h.loopWith.Takes() && h.loop.Serve(tc)
}

// startLoop starts the event loops of an eventloop listener, and reports
// whether it did; without them (another setting, or a system without
// them) fast serves every connection with the lean path in Go's poller.
func (h *httpServers) startLoop(counts *evloop.Counts, log func(error)) bool {
	if h.loopWith == nil {
		return false
	}
	loop, err := h.loopWith.Start(counts)
	if err != nil {
		log(fmt.Errorf("http1_server eventloop: event loops unavailable, serving every connection with the lean path in Go's poller: %w", err))
		return false
	}
	h.loop = loop
	return true
}

// newServerErrorLog returns the log.Logger an http.Server writes its own
// errors to (TLS handshake failures, malformed requests). They are logged at
// DEBUG: a client can cause any number of them.
func newServerErrorLog(log *slog.Logger) *stdlog.Logger {
	return slog.NewLogLogger(log.Handler(), slog.LevelDebug)
}

// HTTP1Server returns the HTTP/1.x server that serves f now, as the
// http1_server setting names it: "eventloop" when the event loops run, or
// where they never do (a system without them) and the byte path
// serves in Go's poller instead; "lean" for the byte path in Go's poller
// set in Go, or where the loops failed to start; "fast" for
// internal/http1 alone; "net/http"; and "" for an http3 or tcp listener.
func (f *Front) HTTP1Server() config.HTTP1Server {
	h := f.http
	switch {
	case h == nil:
		return ""
	case h.fast != nil && h.fast.Exchanges != nil:
		if f.cfg.HTTP1Server == config.HTTP1ServerEventLoop &&
			(h.loop != nil || !evloop.Supported()) {
			return config.HTTP1ServerEventLoop
		}
		return config.HTTP1ServerLean
	case h.fast != nil:
		return config.HTTP1ServerFast
	}
	return config.HTTP1ServerNetHTTP
}

// Loops returns the event loops serving f's plainest exchanges, or nil
// when none run (another http1_server, http3, tcp, a system
// without them, or before Serve).
func (f *Front) Loops() *evloop.Server {
	if f.http == nil {
		return nil
	}
	return f.http.loop
}

// loopListener gives the event loops every connection they take: its
// Accept returns only those they do not (none but after shutdown began,
// for a plain TCP listener), and every connection while the listener's
// configuration (reloads included) gives the loops nothing to serve.
type loopListener struct {
	net.Listener
	loop  *evloop.Server
	takes func() bool
}

func (l *loopListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if !l.takes() || !l.loop.Serve(c) {
			return c, nil
		}
	}
}

// shutdown stops the servers gracefully, as http.Server.Shutdown does, all
// at once: no connection is accepted or handed off any more, idle ones
// close, and the exchanges in progress are waited for until ctx ends. It
// returns the first error (ctx.Err() when it had to give up). Hijacked
// connections are not waited for.
func (h *httpServers) shutdown(ctx context.Context) error {
	var stdErr error
	var wg sync.WaitGroup
	if h.std != nil {
		wg.Go(func() { stdErr = h.std.Shutdown(ctx) })
	}
	var err error
	if h.loop != nil {
		// First no more connections; then the loops' drain, whose
		// hand-overs go to fast, which still serves them; then fast's.
		_ = h.loopLn.Close()
		err = h.loop.Shutdown(ctx)
	}
	if h.fast != nil {
		if ferr := h.fast.Shutdown(ctx); err == nil {
			err = ferr
		}
	}
	wg.Wait()
	h.waitHandoff()
	if err == nil {
		err = stdErr
	}
	return err
}

// waitHandoff waits for std's Serve of the handoff to return, which it
// does as soon as std is shut down or closed.
func (h *httpServers) waitHandoff() {
	if h.handoffDone != nil {
		<-h.handoffDone
	}
}

// close closes every listener and connection of the servers at once;
// hijacked connections are left alone.
func (h *httpServers) close() {
	if h.loop != nil {
		_ = h.loop.Close()
	}
	if h.fast != nil {
		_ = h.fast.Close()
	}
	if h.std != nil {
		_ = h.std.Close()
	}
	h.waitHandoff()
}
