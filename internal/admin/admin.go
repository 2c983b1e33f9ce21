// Package admin is the daemon's admin listener: /metrics (the Prometheus
// registry of every listener, limiter and store, the request metrics, the
// Go and process collectors), /debug/limits (a JSON [Snapshot]), /healthz,
// /readyz, and the live page (internal/livepage) with its token form and
// event stream, sampled once a second while the listener runs. Everything
// but the health checks and the live page's way in is behind the admin
// token ([Auth]) when one is configured.
//
// It knows the daemon only as a [Source]: the daemon walks its own
// listeners and route tables to fill plain [Listener] values, and this
// package reads the limiters they name and formats them (busiest keys,
// bounds, totals).
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/seed-a07d1050/portcullis/internal/exchange"
	"github.com/seed-a07d1050/portcullis/internal/livepage"
)

// Config is what an admin [Server] serves.
type Config struct {
	// Addr is the TCP address to listen on ("127.0.0.1:9901"; port 0
	// picks one). Required.
	Addr string
	// Source is the daemon. Required.
	Source Source
	// Auth holds the admin token in force, read at every request so that
	// a reload that stores a new one changes it at once on every admin
	// listener. A nil Auth, or a nil *Auth in it, means no token.
	Auth *atomic.Pointer[Auth]
	// Metrics are the HTTP listeners' request metrics, exported on
	// /metrics with the Go and process collectors and read by the live
	// page. Nil means none (and no Go and process collectors).
	Metrics *exchange.Metrics
	// Collectors are exported on /metrics besides the Source's: those
	// whose set does not change with reloads.
	Collectors []prometheus.Collector
	// Log receives the listener's errors. Nil means slog.Default().
	Log *slog.Logger
}

// Server is a running admin listener. Make it with [Start]; stop it with
// [Server.Close].
type Server struct {
	ln     net.Listener
	srv    *http.Server
	src    Source
	auths  *atomic.Pointer[Auth]
	log    *slog.Logger
	live   *livepage.Sampler // sampled while the listener serves
	served chan struct{}     // closed when Serve has returned
}

// Start binds cfg.Addr and serves the admin API on it until Close. It
// returns an error, with nothing left open, when cfg lacks its Addr or
// Source or the address cannot be bound.
func Start(cfg Config) (*Server, error) {
	switch {
	case cfg.Addr == "":
		return nil, errors.New("admin: no address to listen on")
	case cfg.Source == nil:
		return nil, errors.New("admin: no source")
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("admin: listen: %w", err)
	}
	s := &Server{ln: ln, src: cfg.Source, auths: cfg.Auth, log: cfg.Log, served: make(chan struct{})}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.live = livepage.NewSampler(liveSource{src: cfg.Source, metrics: cfg.Metrics}, 0)
	// What net/http and promhttp log goes to the daemon's log at debug.
	errorLog := slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)
	s.srv = &http.Server{
		Handler:           s.mux(registry(cfg), errorLog),
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       60 * time.Second,
		ErrorLog:          errorLog,
	}
	go func() {
		defer close(s.served)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("admin listener stopped", "error", err)
		}
	}()
	return s, nil
}

// registry assembles what /metrics exports.
func registry(cfg Config) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(sourceCollector{cfg.Source})
	reg.MustRegister(cfg.Collectors...)
	if cfg.Metrics != nil {
		cfg.Metrics.RegisterOn(reg)
	}
	return reg
}

// mux routes the admin API. Everything but the health checks is behind
// the admin token, when there is one; an unknown path gets its 404 only
// once authorized.
func (s *Server) mux(reg *prometheus.Registry, errorLog *stdlog.Logger) http.Handler {
	private := http.NewServeMux()
	private.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: errorLog}))
	private.HandleFunc("GET /debug/limits", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(SnapshotOf(s.src.Listeners()))
	})
	private.Handle("GET "+livepage.PagePath+"{$}", livepage.Page(s.live, s.log))
	private.Handle("GET "+livepage.EventsPath, livepage.Events(s.live))
	mux := http.NewServeMux()
	mux.Handle("/", s.requireToken(private))
	// The live page's way in: a redirect, its token form and its assets
	// hold no data.
	mux.Handle("GET /{$}", http.RedirectHandler(livepage.PagePath, http.StatusSeeOther))
	mux.HandleFunc("POST "+livepage.LoginPath, s.login)
	mux.Handle("GET "+livepage.AssetsPath, livepage.Assets())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		exchange.WriteShort(w, http.StatusOK, "ok\n")
	})
	mux.HandleFunc("GET /readyz", s.ready)
	return mux
}

// ready serves /readyz: 503 with the reason while the daemon is not ready.
func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	if ok, why := s.src.Ready(); !ok {
		exchange.WriteShort(w, http.StatusServiceUnavailable, why+"\n")
		return
	}
	// A degraded cluster stays ready: Redis away degrades every node at
	// once, and 503 from all of them would take the whole fleet out of its
	// load balancer (docs/cluster.md).
	if d := s.src.Degraded(); len(d) > 0 {
		exchange.WriteShort(w, http.StatusOK, "ready; cluster degraded ("+strings.Join(d, ",")+"): limits decide by on_error\n")
		return
	}
	exchange.WriteShort(w, http.StatusOK, "ready\n")
}

// auth returns the token in force; nil: none.
func (s *Server) auth() *Auth {
	if s.auths == nil {
		return nil
	}
	return s.auths.Load()
}

// Addr returns the address the listener is bound to.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Sample has the live page sample the Source now rather than at its next
// tick, so that it shows the listeners as soon as they serve.
func (s *Server) Sample() { s.live.Sample() }

// Close stops the live page's sampling first, which ends its event
// streams, so that the shutdown of the listener does not wait on them;
// then it shuts the listener down, within a second, and returns once it
// has stopped serving. Later calls return at once.
func (s *Server) Close() {
	s.live.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if s.srv.Shutdown(ctx) != nil {
		_ = s.srv.Close()
	}
	<-s.served
}

// sourceCollector collects what a Source runs now. It describes nothing
// (an unchecked collector) because the set of listeners and routes
// changes with reloads.
type sourceCollector struct{ src Source }

func (c sourceCollector) Describe(chan<- *prometheus.Desc) {}

func (c sourceCollector) Collect(ch chan<- prometheus.Metric) { c.src.Collect(ch) }
