package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/config"
	uptransport "github.com/seed-a07d1050/portcullis/internal/upstream"
)

// ErrClosed is returned by [Server.Reload] after Shutdown or Close.
var ErrClosed = errors.New("proxy: server closed")

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
	// means os.Stderr. Unused when Logger is set.
	LogOutput io.Writer
}

// Server is the portcullis daemon: every listener of a configuration with
// its connection caps, routes, limits and upstreams, and the admin listener.
// Create it with [Start]; change its configuration with [Server.Reload]; stop
// it with [Server.Shutdown] (graceful) or [Server.Close] (abrupt). A Server
// cannot be restarted.
type Server struct {
	log       *slog.Logger
	level     *slog.LevelVar // nil when Options.Logger was given
	transport *uptransport.Transport
	bufs      *bufferPool

	base       context.Context // the context of every request; cancelled to cut off
	cancelBase context.CancelFunc

	mu      sync.Mutex // serializes Reload, Shutdown and Close
	cfg     *config.Config
	fronts  atomic.Pointer[[]*front]               // in configuration order; read by admin
	tables  map[string]*atomic.Pointer[routeTable] // by listener name; kept across reloads
	admin   atomic.Pointer[adminServer]
	closed  bool
	retired sync.WaitGroup

	draining atomic.Bool
	cluster  *cluster // nil without a cluster section; fixed at Start

	adminAuth atomic.Pointer[adminAuth] // the admin token in force; nil: none
}

// Start validates cfg, binds every listener and the admin listener, and
// starts serving. It returns once every socket is open, so that their
// addresses are known ([Server.Addr]). On error nothing is left open or
// running, and the error says which listener failed. cfg is not modified
// nor kept: Start works on its effective copy.
func Start(cfg *config.Config, opts Options) (*Server, error) {
	if cfg == nil {
		return nil, errors.New("proxy: nil config")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	eff := cfg.Effective()
	s := &Server{
		log:       opts.Logger,
		transport: newUpstreamTransport(),
		bufs:      newBufferPool(),
		tables:    make(map[string]*atomic.Pointer[routeTable]),
	}
	if s.log == nil {
		out := opts.LogOutput
		if out == nil {
			out = os.Stderr
		}
		s.level = new(slog.LevelVar)
		s.log = NewLogger(eff.Log, out, s.level)
	}
	s.base, s.cancelBase = context.WithCancel(context.Background())
	auth, err := loadAdminAuth(eff.Admin)
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
	fronts, err := s.bindAll(eff, nil)
	if err != nil {
		s.cluster.close()
		s.cancelBase()
		return nil, err
	}
	if err := s.installTables(eff, fronts); err != nil {
		closeUnserved(fronts)
		s.cluster.close()
		s.cancelBase()
		return nil, err
	}
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
	s.fronts.Store(&fronts)
	s.logAdminChange(nil, nil, true)
	s.log.Info("portcullis started", "listeners", len(fronts), "admin", addrString(s.AdminAddr()))
	return s, nil
}

// bindAll binds a front for every listener of cfg, taking over the fronts of
// keep (by name) whose socket configuration did not change. On error it
// closes what it bound and returns the error; keep is left as it was.
func (s *Server) bindAll(cfg *config.Config, keep map[string]*front) ([]*front, error) {
	var out, bound []*front
	for _, lc := range cfg.Listeners {
		if f, ok := keep[lc.Name]; ok && f.sameSocket(lc) {
			out = append(out, f) // its routes come from cfg, in installTables
			continue
		}
		f, err := bindFront(lc, s.log, s.cluster)
		if err != nil {
			closeUnserved(bound)
			return nil, err
		}
		bound = append(bound, f)
		out = append(out, f)
	}
	return out, nil
}

func closeUnserved(fronts []*front) {
	for _, f := range fronts {
		if !f.serving() {
			f.closeUnserved()
		}
	}
}

// installTables builds the route table of every HTTP listener of cfg that
// has routes and stores it, so that requests arriving from now on use it.
// Tables are built first and stored only if every one built, so a failure
// changes nothing.
func (s *Server) installTables(cfg *config.Config, fronts []*front) error {
	built := make(map[string]*routeTable)
	for i, f := range fronts {
		lc := &cfg.Listeners[i]
		if !lc.Protocol.IsHTTP() || lc.RoutesFrom != "" {
			continue
		}
		var old *routeTable
		if p := s.tables[lc.Name]; p != nil {
			old = p.Load()
		}
		b := &tableBuilder{
			lc: lc, id: f.id, old: old, transport: s.transport, bufs: s.bufs,
			accessLog: cfg.Log.AccessLog,
			deps:      limiterDeps{log: s.log, cluster: s.cluster},
		}
		t, err := b.build()
		if err != nil {
			for name, nt := range built {
				var prev *routeTable
				if p := s.tables[name]; p != nil {
					prev = p.Load()
				}
				nt.closeNew(prev)
			}
			return err
		}
		built[lc.Name] = t
	}
	for name, t := range built {
		p := s.tables[name]
		if p == nil {
			p = new(atomic.Pointer[routeTable])
			s.tables[name] = p
		}
		if old := p.Swap(t); old != nil {
			for _, l := range t.retired(old) {
				s.retire(l)
			}
		}
	}
	// Tables of listeners that no longer own routes: their limiters end
	// once the exchanges of the draining listeners that still hold the
	// table have ended.
	for name, p := range s.tables {
		if _, ok := built[name]; !ok {
			for _, l := range p.Load().limiters() {
				s.retire(l)
			}
			delete(s.tables, name)
		}
	}
	return nil
}

// retire closes a limiter a reload replaced once the exchanges that still
// use it have ended, so that they finish under the limits they started
// with and its queue does not fail waiters with 503.
func (s *Server) retire(l *limiter) {
	s.retired.Add(1)
	go func() {
		defer s.retired.Done()
		defer l.close()
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			tot := l.lim.Totals()
			if tot.InUse == 0 && tot.Waiting == 0 {
				return
			}
			select {
			case <-s.base.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// serve starts serving f with its table.
func (s *Server) serve(f *front, cfg *config.Config) error {
	table := s.tables[f.cfg.Name]
	if f.cfg.RoutesFrom != "" {
		table = s.tables[f.cfg.RoutesFrom]
	}
	switch {
	case f.cfg.Protocol == config.ProtocolTCP:
		f.serveTCP(s.base, cfg.Log.AccessLog)
		return nil
	case f.h3 != nil:
		f.serveH3(table)
		return nil
	default:
		return f.serveHTTP(table, s.base)
	}
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
	return a.ln.Addr()
}

func (s *Server) frontList() []*front {
	if p := s.fronts.Load(); p != nil {
		return *p
	}
	return nil
}

// Reload replaces the running configuration with cfg. It validates cfg
// first and, if it is invalid or a new socket cannot be bound, returns the
// error and leaves the running configuration untouched.
//
// Listeners whose socket settings (address, protocol, TLS files, caps,
// trusted proxies, timeouts) did not change keep their socket, their open
// connections and their counts; their routes are replaced, and a route limit
// whose settings did not change keeps its counts and waiters. Exchanges in
// progress finish on the routes and limits they started with. Listeners
// that changed are rebound: the old socket is closed first when the address
// is the same (connections arriving in that instant are refused), and its
// connections drain for up to the shutdown timeout. Listeners no longer in
// cfg drain the same way. The admin listener is rebound if its address
// changed, and its token file is read again. The log level follows cfg; a change of log format needs a restart,
// and a change of the cluster section is refused with an error. After
// Shutdown or Close it returns ErrClosed.
func (s *Server) Reload(cfg *config.Config) error {
	if cfg == nil {
		return errors.New("proxy: nil config")
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	eff := cfg.Effective()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if !s.cluster.sameAs(eff.Cluster) {
		return errors.New("proxy: a change of the cluster section needs a restart")
	}
	auth, err := loadAdminAuth(eff.Admin)
	if err != nil {
		return err
	}
	old := s.frontList()
	keep := make(map[string]*front, len(old))
	for _, f := range old {
		keep[f.cfg.Name] = f
	}
	// Listeners that change and stay on the same address must let go of it
	// before the new socket binds.
	var stopped []*front
	for _, lc := range eff.Listeners {
		if f, ok := keep[lc.Name]; ok && !f.sameSocket(lc) && f.sameAddr(lc.Listen) {
			f.closeSocket()
			stopped = append(stopped, f)
		}
	}
	fronts, err := s.bindAll(eff, keep)
	if err == nil {
		err = s.installTables(eff, fronts)
		if err != nil {
			closeUnserved(fronts)
		}
	}
	if err != nil {
		if len(stopped) > 0 {
			s.log.Error("reload failed after closing changed listeners; they stay down", "err", err)
		}
		return err
	}
	linkAltSvc(fronts)
	var drain []*front
	reused := make(map[*front]bool)
	for _, f := range fronts {
		if !f.serving() {
			if err := s.serve(f, eff); err != nil {
				s.log.Error("listener failed to start", "listener", f.cfg.Name, "err", err)
			}
			continue
		}
		reused[f] = true
		if f.cert.Load() != nil {
			// Same files, perhaps renewed content: a reload is how an
			// operator rotates a certificate.
			if err := f.loadCert(); err != nil {
				s.log.Error("certificate not reloaded; the old one stays", "listener", f.cfg.Name, "err", err)
			}
		}
	}
	for _, f := range old {
		if !reused[f] {
			drain = append(drain, f)
		}
	}
	s.drainInBackground(drain, eff.ShutdownTimeout)
	prevAuth, prevAdmin := s.adminAuth.Swap(auth), s.AdminAddr()
	if err := s.reloadAdmin(eff); err != nil {
		s.log.Error("admin listener not moved", "err", err)
	}
	s.logAdminChange(prevAuth, prevAdmin, false)
	if s.level != nil {
		s.level.Set(eff.Log.Level.Slog())
	}
	if eff.Log.Format != s.cfg.Log.Format {
		s.log.Warn("log format change needs a restart", "running", s.cfg.Log.Format, "configured", eff.Log.Format)
	}
	s.cfg = eff
	s.fronts.Store(&fronts)
	s.log.Info("configuration reloaded", "listeners", len(fronts), "rebound", len(fronts)-len(reused), "drained", len(drain))
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
	if want == s.cfg.Admin.Listen || (old != nil && sameBoundAddr(old.ln.Addr(), want)) {
		return nil
	}
	var next *adminServer
	if want != "" {
		a, err := startAdmin(want, s)
		if err != nil {
			return err // the old admin listener stays
		}
		next = a
	}
	s.admin.Store(next)
	if old != nil {
		old.close()
	}
	return nil
}

// sameBoundAddr reports whether listen names the bound address a (TCP or
// UDP): the same port, and the same IP or an unspecified one.
func sameBoundAddr(a net.Addr, listen string) bool {
	want, err := net.ResolveTCPAddr("tcp", listen)
	if err != nil || want.Port == 0 {
		return false
	}
	var ip net.IP
	var port int
	switch a := a.(type) {
	case *net.TCPAddr:
		ip, port = a.IP, a.Port
	case *net.UDPAddr:
		ip, port = a.IP, a.Port
	default:
		return false
	}
	return port == want.Port && (ip.Equal(want.IP) || want.IP == nil && ip.IsUnspecified())
}

// Draining reports whether Shutdown has begun.
func (s *Server) Draining() bool { return s.draining.Load() }

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
	errs := make(chan error, len(fronts))
	for _, f := range fronts {
		go func() { errs <- f.shutdown(ctx) }()
	}
	var cut error
	for range fronts {
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
	s.finish(true)
	return nil
}

// finish cancels what is left (when cut), waits for it within forceWait,
// and closes the admin listener and the limiters.
func (s *Server) finish(cut bool) {
	s.cancelBase() // ends tunnels and upstream requests still running
	if cut {
		ctx, cancel := context.WithTimeout(context.Background(), forceWait)
		for _, f := range s.frontList() {
			_ = waitZero(ctx, &f.active)
		}
		cancel()
	}
	s.retired.Wait()
	if a := s.admin.Swap(nil); a != nil {
		a.close()
	}
	s.closeTables()
	s.cluster.close()
	s.transport.CloseIdleConnections()
	s.log.Info("portcullis stopped")
}

func (s *Server) closeTables() {
	for _, p := range s.tables {
		for _, l := range p.Load().limiters() {
			l.close()
		}
	}
}

// Logger returns the logger the server logs to.
func (s *Server) Logger() *slog.Logger { return s.log }
