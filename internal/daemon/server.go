package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/accesslog"
	"github.com/seed-a07d1050/portcullis/internal/admin"
	"github.com/seed-a07d1050/portcullis/internal/cidrlist"
	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/evloop"
	"github.com/seed-a07d1050/portcullis/internal/exchange"
	"github.com/seed-a07d1050/portcullis/internal/relay"
	"github.com/seed-a07d1050/portcullis/internal/route"
	uptransport "github.com/seed-a07d1050/portcullis/internal/upstream"
)

// ErrClosed is returned by [Server.Reload] after Shutdown or Close.
var ErrClosed = errors.New("daemon: server closed")

// forceWait bounds how long Shutdown waits, once its context has ended, for
// the exchanges it cut off to return.
const forceWait = 2 * time.Second

// Options are what a [Server] needs besides its configuration. The zero
// Options is valid.
type Options struct {
	// Logger receives the daemon's logs. Nil means a logger built from the
	// configuration's log section (text or JSON, at its level) writing to
	// LogOutput; the level then follows reloads.
	Logger *slog.Logger

	// LogOutput is where a logger built from the configuration writes. Nil
	// means os.Stderr. Unused when Logger is set. Access lines are written
	// to it in batches, up to 32 KiB at once and each at most 100 ms after
	// it was logged (and all of them when the server stops); other lines
	// at once. With Logger set, access lines go to Logger like the others.
	LogOutput io.Writer
}

// Server is the portcullis daemon: every listener of a configuration with
// its connection caps, routes, limits and upstreams, and the admin listener.
// Create it with [Start]; change its configuration with [Server.Reload]; stop
// it with [Server.Shutdown] (graceful) or [Server.Close] (abrupt). A Server
// cannot be restarted.
type Server struct {
	log   *slog.Logger
	level *slog.LevelVar // nil when Options.Logger was given
	// access writes the access lines: through log, or, when the server
	// built log itself, in the same format and at the same level into
	// accessOut.
	access    *accesslog.Logger
	accessOut *accesslog.LineBuffer // nil when Options.Logger was given
	transport *uptransport.Transport
	// loopCounts are what the event loops of every eventloop listener did
	// with their upstream connections, exported beside the transport's.
	loopCounts *evloop.Counts
	bufs       *relay.BufferPool
	metrics    *exchange.Metrics // the HTTP listeners' request metrics

	base       context.Context // the context of every request; cancelled to cut off
	cancelBase context.CancelFunc

	mu      sync.Mutex // serializes Reload, Shutdown and Close
	cfg     *config.Config
	fronts  atomic.Pointer[[]*front]                // in configuration order; read by admin
	tables  map[string]*atomic.Pointer[route.Table] // by listener name; kept across reloads
	admin   atomic.Pointer[admin.Server]
	closed  bool
	retired sync.WaitGroup

	draining atomic.Bool
	cluster  *cluster // nil without a cluster section; fixed at Start

	downMu sync.Mutex
	down   map[string]error // listeners that should serve and do not, by name

	adminAuth atomic.Pointer[admin.Auth] // the admin token in force; nil: none

	// paths say how each route of the configuration in force is served,
	// by listener and route name, for the live page.
	paths atomic.Pointer[map[string]config.RoutePath]
}

// routePathsOf returns cfg's route paths (config.RoutePaths) by
// "listener/route".
func routePathsOf(cfg *config.Config) *map[string]config.RoutePath {
	m := map[string]config.RoutePath{}
	for _, p := range cfg.RoutePaths(runtime.GOOS) {
		m[p.Listener+"/"+p.Route] = p
	}
	return &m
}

// Start validates cfg, builds what it names as [Check] does (a problem
// there is reported at its field's line, and nothing is opened), binds
// every listener and the admin listener, and starts serving. It returns once every socket is open, so that their
// addresses are known ([Server.Addr]). On error nothing is left open or
// running, and the error says which listener failed. cfg is not modified
// nor kept: Start works on its effective copy.
func Start(cfg *config.Config, opts Options) (*Server, error) {
	if cfg == nil {
		return nil, errors.New("daemon: nil config")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	eff := cfg.Effective()
	vals, err := buildValues(eff) // what check builds, before anything opens
	if err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	s := &Server{
		log:        opts.Logger,
		transport:  relay.NewTransport(),
		loopCounts: new(evloop.Counts),
		bufs:       relay.NewBufferPool(),
		metrics:    exchange.NewMetrics(),
		tables:     make(map[string]*atomic.Pointer[route.Table]),
	}
	if s.log == nil {
		out := opts.LogOutput
		if out == nil {
			out = os.Stderr
		}
		s.level = new(slog.LevelVar)
		s.log = accesslog.NewLogger(eff.Log, out, s.level)
		s.accessOut = accesslog.NewLineBuffer(out)
		s.access = &accesslog.Logger{
			Log:   accesslog.NewLogger(eff.Log, s.accessOut, s.level),
			Out:   s.accessOut,
			Level: s.level,
			JSON:  eff.Log.Format == config.LogJSON,
		}
	} else {
		s.access = &accesslog.Logger{Log: s.log}
	}
	s.base, s.cancelBase = context.WithCancel(context.Background())
	auth, err := admin.LoadAuth(eff.Admin)
	if err != nil {
		s.cancelBase()
		return nil, err
	}
	s.adminAuth.Store(auth) // before the admin listener serves
	cl, err := newCluster(eff.Cluster, s.log)
	if err != nil {
		s.cancelBase()
		return nil, err
	}
	s.cluster = cl
	fronts, err := s.bindAll(eff, vals.lists)
	if err != nil {
		s.cluster.close()
		s.cancelBase()
		return nil, err
	}
	built, err := s.buildTables(eff)
	if err != nil {
		closeUnserved(fronts)
		s.cluster.close()
		s.cancelBase()
		return nil, err
	}
	s.installTables(built)
	if eff.Admin.Listen != "" {
		a, err := startAdmin(eff.Admin.Listen, s)
		if err != nil {
			closeUnserved(fronts)
			s.closeTables()
			s.cluster.close()
			s.cancelBase()
			return nil, err
		}
		s.admin.Store(a)
	}
	linkAltSvc(fronts)
	for _, f := range fronts {
		if err := s.serve(f, eff); err != nil {
			s.cfg = eff
			s.fronts.Store(&fronts)
			_ = s.Close()
			return nil, err
		}
	}
	s.cfg = eff
	s.paths.Store(routePathsOf(eff))
	s.fronts.Store(&fronts)
	if a := s.admin.Load(); a != nil {
		a.Sample() // the live page shows the listeners before its first tick
	}
	s.logAdminChange(nil, nil, true)
	s.logWarnings(eff)
	s.log.Info("portcullis started", "listeners", len(fronts), "admin", addrString(s.AdminAddr()))
	return s, nil
}

// bindAll binds a new front for every listener of cfg, with its deny and
// allow lists (by listener name, from buildValues). On error it closes what it bound and returns the error.
func (s *Server) bindAll(cfg *config.Config, lists map[string]*cidrlist.Matcher) ([]*front, error) {
	var out []*front
	for _, lc := range cfg.Listeners {
		f, err := bindFront(lc, s.log, s.cluster, frontLists{m: lists[lc.Name]})
		if err != nil {
			closeUnserved(out)
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

func closeUnserved(fronts []*front) {
	for _, f := range fronts {
		if f != nil && !f.serving() {
			f.closeUnserved()
		}
	}
}

// testHookBuildTable, when set by a test, runs after each route table is
// built; an error from it fails the build, as a limiter refusing a value
// would.
var testHookBuildTable func(listener string) error

// testHookReverseProxy, when set by a benchmark, makes routes send their
// requests through httputil.ReverseProxy, as the daemon did before relay,
// so that the two can be compared in one run (route.Config.ReverseProxy).
var testHookReverseProxy bool

// testHookNoRequestMetrics, when set by a benchmark, builds route tables
// without request metrics, to measure what they cost.
var testHookNoRequestMetrics bool

// testHookLoopPanic, when set, is the PanicHook of the event loops of the
// listeners bound from now on, for the tests of what a panic in a loop's
// exchange gives back.
var testHookLoopPanic func(step string, r *http.Request)

// builtTables are the route tables of a configuration, built but not yet
// serving: by listener name, for the HTTP listeners that own routes.
type builtTables map[string]*route.Table

// buildTables builds the route table of every HTTP listener of cfg that
// has routes, keeping the limiters of the running tables whose settings did
// not change. It changes nothing that serves: on error it closes the new
// limiters it built and returns the error.
func (s *Server) buildTables(cfg *config.Config) (builtTables, error) {
	built := make(builtTables)
	for i := range cfg.Listeners {
		lc := &cfg.Listeners[i]
		if !lc.Protocol.IsHTTP() || lc.RoutesFrom != "" {
			continue
		}
		rc := route.Config{
			Listener: lc, Old: s.currentTable(lc.Name), Log: s.log, Stores: s.cluster.routeStores(),
			Transport: s.transport, Buffers: s.bufs, Access: s.access, Metrics: s.metrics,
			Drain: cfg.ShutdownTimeout, Wait: forceWait, Stopping: &s.draining,
			ReverseProxy: testHookReverseProxy,
		}
		if !cfg.Log.IsAccessLogOn() {
			rc.Access = nil
		}
		if testHookNoRequestMetrics {
			rc.Metrics = nil
		}
		t, err := route.Build(rc)
		if err == nil && testHookBuildTable != nil {
			if err = testHookBuildTable(lc.Name); err != nil {
				t.Discard(rc.Old)
			}
		}
		if err != nil {
			s.discard(built)
			return nil, err
		}
		built[lc.Name] = t
	}
	return built, nil
}

// currentTable returns the table the listener named name serves now, or nil.
func (s *Server) currentTable(name string) *route.Table {
	if p := s.tables[name]; p != nil {
		return p.Load()
	}
	return nil
}

// discard closes the limiters of built that the running tables do not use.
func (s *Server) discard(built builtTables) {
	for name, t := range built {
		t.Discard(s.currentTable(name))
	}
}

// installTables makes built the tables requests are served by from now on,
// and retires the limiters of the old tables that built no longer uses,
// together with the tables of listeners that no longer own routes: those
// limiters end once the exchanges still holding them have ended.
func (s *Server) installTables(built builtTables) {
	bg := route.Background{Group: &s.retired, Stop: s.base, Log: s.log}
	for name, t := range built {
		t.Commit()
		p := s.tables[name]
		if p == nil {
			p = new(atomic.Pointer[route.Table])
			s.tables[name] = p
		}
		if old := p.Swap(t); old != nil {
			old.Retire(t, bg)
		}
	}
	for name, p := range s.tables {
		if _, ok := built[name]; !ok {
			p.Load().Retire(nil, bg)
			delete(s.tables, name)
		}
	}
	s.pruneRequestMetrics()
}

// pruneRequestMetrics drops the request metrics of the routes and
// listeners no table serves any more, so that /metrics does not show them
// frozen at their last values. An exchange of a removed route still
// draining counts in series nobody scrapes.
func (s *Server) pruneRequestMetrics() {
	if s.metrics == nil {
		return
	}
	keep := make(map[exchange.SeriesKey]bool)
	for name, p := range s.tables {
		for _, r := range p.Load().Series() {
			keep[exchange.SeriesKey{Listener: name, Route: r}] = true
		}
	}
	s.metrics.Prune(keep)
}

// serve starts serving f with its table.
func (s *Server) serve(f *front, cfg *config.Config) error {
	table := s.tables[f.cfg.Name]
	if f.cfg.RoutesFrom != "" {
		table = s.tables[f.cfg.RoutesFrom]
	}
	return f.serve(table, s.base, s.loopCounts, cfg.Log.IsAccessLogOn())
}

// Addr returns the address of the listener named name, or nil if there is
// none.
func (s *Server) Addr(name string) net.Addr {
	for _, f := range s.frontList() {
		if f.cfg.Name == name {
			return f.addr()
		}
	}
	return nil
}

// AdminAddr returns the address of the admin listener, or nil without one
// and once the server has stopped.
func (s *Server) AdminAddr() net.Addr {
	a := s.admin.Load()
	if a == nil {
		return nil
	}
	return a.Addr()
}

func (s *Server) frontList() []*front {
	if p := s.fronts.Load(); p != nil {
		return *p
	}
	return nil
}

func (s *Server) drainInBackground(fronts []*front, timeout time.Duration) {
	for _, f := range fronts {
		s.retired.Add(1)
		go func() {
			defer s.retired.Done()
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			if err := f.shutdown(ctx); err != nil {
				s.log.Warn("old listener cut off after the shutdown timeout", "listener", f.cfg.Name)
			}
		}()
	}
}

func (s *Server) reloadAdmin(cfg *config.Config) error {
	want := cfg.Admin.Listen
	old := s.admin.Load()
	if want == s.cfg.Admin.Listen || (old != nil && sameBoundAddr(old.Addr(), want)) {
		return nil
	}
	var next *admin.Server
	if want != "" {
		a, err := startAdmin(want, s)
		if err != nil {
			return err // the old admin listener stays
		}
		next = a
	}
	s.admin.Store(next)
	if old != nil {
		old.Close()
	}
	return nil
}

// Draining reports whether Shutdown has begun.
func (s *Server) Draining() bool { return s.draining.Load() }

// Ready reports whether the server serves its whole configuration: it is
// not draining and no listener is down. When it is not ready, why says so
// in a line.
func (s *Server) Ready() (ok bool, why string) {
	if s.Draining() {
		return false, "draining"
	}
	s.downMu.Lock()
	defer s.downMu.Unlock()
	for name, err := range s.down {
		return false, fmt.Sprintf("listener %s is down: %v", name, err)
	}
	return true, "ready"
}

// markDown records that the listener named name cannot serve, for Ready.
func (s *Server) markDown(name string, err error) {
	s.downMu.Lock()
	defer s.downMu.Unlock()
	if s.down == nil {
		s.down = make(map[string]error)
	}
	s.down[name] = err
}

// clearDown records that every listener serves.
func (s *Server) clearDown() {
	s.downMu.Lock()
	defer s.downMu.Unlock()
	s.down = nil
}

// Shutdown stops the server gracefully: every listener stops accepting at
// once and /readyz turns 503; exchanges, tunnels and TCP connections in
// progress are waited for until ctx ends, then cut off. The admin listener
// closes last. It returns nil when everything ended by itself, ctx.Err()
// when something was cut off, and ErrClosed when the server was already
// stopped.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.closed = true
	s.draining.Store(true)
	s.log.Info("shutting down: draining exchanges")
	fronts := s.frontList()
	proxies := s.hijackers()
	errs := make(chan error, len(fronts)+len(proxies))
	for _, f := range fronts {
		go func() { errs <- f.shutdown(ctx) }()
	}
	for _, p := range proxies {
		// Refuses new CONNECTs, and cuts the tunnels and intercepted
		// sessions still open when ctx ends: http.Server.Shutdown does not
		// see hijacked connections.
		go func() { errs <- p.Shutdown(ctx) }()
	}
	var cut error
	for range len(fronts) + len(proxies) {
		if err := <-errs; err != nil {
			cut = err
		}
	}
	s.finish(cut != nil)
	return cut
}

// Close stops the server at once: listeners, connections, tunnels and
// exchanges in progress are closed. It returns ErrClosed when the server was
// already stopped, nil otherwise.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.closed = true
	s.draining.Store(true)
	for _, f := range s.frontList() {
		f.close()
	}
	for _, p := range s.hijackers() {
		_ = p.Close() // cuts the tunnels and sessions, which http.Server.Close leaves open
	}
	s.finish(true)
	return nil
}

// hijackers returns the forward proxies and interceptors of the running
// tables, which serve connections taken over from the listeners'
// http.Servers (route.Stopper).
func (s *Server) hijackers() []route.Stopper {
	var out []route.Stopper
	for _, p := range s.tables {
		out = append(out, p.Load().Stoppers()...)
	}
	return out
}

// finish cancels what is left (when cut), waits for it within forceWait,
// and closes the admin listener and the limiters.
func (s *Server) finish(cut bool) {
	s.cancelBase() // ends tunnels and upstream requests still running
	if cut {
		ctx, cancel := context.WithTimeout(context.Background(), forceWait)
		for _, f := range s.frontList() {
			_ = f.ln.WaitIdle(ctx)
		}
		cancel()
	}
	s.retired.Wait()
	if a := s.admin.Swap(nil); a != nil {
		a.Close()
	}
	s.closeTables()
	s.cluster.close()
	s.transport.CloseIdleConnections()
	if s.accessOut != nil {
		s.accessOut.Flush()
	}
	s.log.Info("portcullis stopped")
}

func (s *Server) closeTables() {
	for _, p := range s.tables {
		p.Load().Close()
	}
}

// Logger returns the logger the server logs to.
func (s *Server) Logger() *slog.Logger { return s.log }
