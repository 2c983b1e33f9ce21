package daemon

import (
	"errors"
	"fmt"
	"slices"

	"github.com/seed-a07d1050/portcullis/internal/admin"
	"github.com/seed-a07d1050/portcullis/internal/cidrlist"
	"github.com/seed-a07d1050/portcullis/internal/config"
)

// Reload replaces the running configuration with cfg, all or nothing:
// either every listener serves cfg when it returns nil, or every listener
// goes on serving the running configuration and the error says why.
//
// It works in two phases, as a database commits. The first builds the new
// state beside the running one, and nothing that serves changes: it
// validates cfg, builds what it names as [Check] does (the lists, htpasswd
// files, CAs, rules and target patterns, each problem at its field's line),
// binds the sockets of listeners at new addresses, opens a
// second descriptor on each socket a changed TCP listener keeps (same
// address), builds the route tables and their limiters, and reads the
// certificates. Any failure there (a port taken, a limiter refusing a
// value, an unreadable certificate, a bad deny or allow list) undoes what was
// built and returns.
// The second phase switches over and cannot fail, except for an http3
// listener whose settings changed at the same address: a UDP socket cannot
// be shared, so the old one is closed and the new one bound, first, and if
// that bind fails every such listener is bound again with its running
// settings and the reload returns the error. If even that fails, the
// listener is down, and /readyz says so until a reload brings it back.
//
// Listeners whose socket settings (address, protocol, TLS files, caps,
// trusted proxies, timeouts) did not change keep everything but their
// routes; their deny and allow lists are read again and swapped in at the
// switch, so that the next connection is checked against the new lists while
// open ones are left alone. A route limit whose settings did not change
// keeps its counts and waiters. A changed TCP listener at the same address
// takes over the socket, so no connection attempt is refused; its
// connections, and those of a listener that moved to a new address, are
// counted by the new listener's caps until they close (connlimit's Adopt),
// and drain for up
// to the shutdown timeout. Exchanges in progress finish on the routes and
// limits they started with. The admin listener is rebound if its address
// changed (if that fails the old one stays, and it is logged); its token
// file is read in the first phase and takes effect at the switch. The log
// level follows cfg; a change of log format needs a restart, and a change
// of the cluster section is refused with an error. After Shutdown or Close
// it returns ErrClosed.
func (s *Server) Reload(cfg *config.Config) error {
	if cfg == nil {
		return errors.New("daemon: nil config")
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("daemon: %w", err)
	}
	eff := cfg.Effective()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if !s.cluster.sameAs(eff.Cluster) {
		return errors.New("daemon: a change of the cluster section needs a restart")
	}
	auth, err := admin.LoadAuth(eff.Admin) // first phase: read, nothing changes yet
	if err != nil {
		return err
	}
	vals, err := buildValues(eff) // what check builds, before anything changes
	if err != nil {
		return fmt.Errorf("daemon: %w", err)
	}
	p, err := s.prepare(eff, vals.lists)
	if err != nil {
		return err
	}
	if err := s.rebindH3(p); err != nil {
		p.abort(s)
		return err
	}
	s.commit(p)
	prevAuth, prevAdmin := s.adminAuth.Swap(auth), s.AdminAddr()
	if err := s.reloadAdmin(eff); err != nil {
		s.log.Error("admin listener not moved", "error", err)
	}
	s.logAdminChange(prevAuth, prevAdmin, false)
	s.logWarnings(eff)
	if s.level != nil {
		s.level.Set(eff.Log.Level.Slog())
	}
	if eff.Log.Format != s.cfg.Log.Format {
		s.log.Warn("log format change needs a restart", "running", s.cfg.Log.Format, "configured", eff.Log.Format)
	}
	s.cfg = eff
	s.paths.Store(routePathsOf(eff))
	s.log.Info("configuration reloaded", "listeners", len(p.fronts), "rebound", len(p.fronts)-len(p.kept), "drained", len(p.drain))
	return nil
}

// A reloadPlan is the new state a reload built beside the running one.
type reloadPlan struct {
	cfg    *config.Config
	fronts []*front          // the new fronts, in configuration order; nil where rebinds go
	kept   map[*front]bool   // running fronts that stay as they are
	bound  []*front          // fronts this reload bound or opened, not serving yet
	adopt  map[*front]*front // a bound front → the running front whose connections it counts
	shares map[*front]*front // a bound front → the running front whose socket it shares
	rebind []rebind          // http3 listeners whose UDP socket must be bound again
	drain  []*front          // running fronts that stop and drain
	tables builtTables
}

// rebind is an http3 listener to bind again at the address a running one
// holds, at commit.
type rebind struct {
	old   *front
	lc    config.Listener
	at    int               // its index in reloadPlan.fronts
	lists *cidrlist.Matcher // its deny and allow lists, read by prepare
}

// prepare builds the new state of cfg beside the running one, as Reload
// describes, with the deny and allow lists buildValues read (by listener
// name). On error nothing is left of it.
func (s *Server) prepare(cfg *config.Config, lists map[string]*cidrlist.Matcher) (*reloadPlan, error) {
	running := s.frontList()
	p := &reloadPlan{cfg: cfg, kept: map[*front]bool{}, adopt: map[*front]*front{}, shares: map[*front]*front{}}
	built := false
	defer func() {
		if !built {
			p.abort(s)
		}
	}()
	byName := make(map[string]*front, len(running))
	for _, f := range running {
		byName[f.cfg.Name] = f
	}
	taken := make(map[*front]bool) // running fronts whose socket or connections are spoken for
	for _, lc := range cfg.Listeners {
		if f := byName[lc.Name]; f != nil && f.sameSocket(lc) {
			p.kept[f], taken[f] = true, true
			p.fronts = append(p.fronts, f)
			f.nextLists = lists[lc.Name]
		}
	}
	for _, lc := range cfg.Listeners {
		if f := byName[lc.Name]; f != nil && p.kept[f] {
			continue
		}
		holder := socketHolder(running, lc, taken)
		if holder != nil && holder.h3 != nil {
			taken[holder] = true
			p.rebind = append(p.rebind, rebind{old: holder, lc: lc, at: len(p.fronts), lists: lists[lc.Name]})
			p.fronts = append(p.fronts, nil)
			continue
		}
		var nf *front
		var err error
		if holder != nil {
			taken[holder] = true
			nf, err = bindShared(holder, lc, s.log, s.cluster, listsOf(lists[lc.Name], byName[lc.Name]))
			p.shares[nf] = holder
		} else {
			nf, err = bindFront(lc, s.log, s.cluster, listsOf(lists[lc.Name], byName[lc.Name]))
		}
		if err != nil {
			return nil, err
		}
		p.bound = append(p.bound, nf)
		p.fronts = append(p.fronts, nf)
		p.adopt[nf] = adoptFrom(byName[lc.Name], holder, nf)
	}
	for _, f := range running {
		if !p.kept[f] && !slices.ContainsFunc(p.rebind, func(r rebind) bool { return r.old == f }) {
			p.drain = append(p.drain, f)
		}
	}
	var err error
	if p.tables, err = s.buildTables(cfg); err != nil {
		return nil, err
	}
	if err := p.readCerts(); err != nil {
		return nil, err
	}
	built = true
	return p, nil
}

// socketHolder returns the running front, not spoken for, bound to the
// address lc listens on with the same kind of socket (TCP or UDP), or nil.
// A port 0 address names the socket its own listener was given, never
// another listener's: "127.0.0.1:0" written for two listeners means two
// sockets.
func socketHolder(running []*front, lc config.Listener, taken map[*front]bool) *front {
	udp := lc.Protocol == config.ProtocolHTTP3
	for _, f := range running {
		if taken[f] || (f.h3 != nil) != udp {
			continue
		}
		if sameBoundAddr(f.addr(), lc.Listen) || (f.cfg.Name == lc.Name && f.sameAddr(lc.Listen)) {
			return f
		}
	}
	return nil
}

// adoptFrom returns the running front whose connections nf counts as its
// own once it serves: the listener of the same name, or else the one whose
// socket it took over; nil when there is none or either is not a TCP
// listener.
func adoptFrom(sameName, holder, nf *front) *front {
	if nf.conns == nil {
		return nil
	}
	for _, f := range []*front{sameName, holder} {
		if f != nil && f.conns != nil {
			return f
		}
	}
	return nil
}

// readCerts reads again the certificate files of the kept https and http3
// fronts, so that a reload rotates a renewed certificate; a file that
// cannot be read fails the reload. The certificates are stored at commit.
func (p *reloadPlan) readCerts() error {
	for f := range p.kept {
		if f.ln.Cert() == nil {
			continue
		}
		cert, err := f.cfg.TLS.Certificate()
		if err != nil {
			return fmt.Errorf("daemon: listener %s: load certificate: %w", f.cfg.Name, err)
		}
		f.nextCert = &cert
	}
	return nil
}

// abort undoes what prepare built: the fronts it bound (a shared socket
// stays open under its running front), the limiters it made, the
// certificates it read.
func (p *reloadPlan) abort(s *Server) {
	closeUnserved(p.bound)
	if p.tables != nil {
		s.discard(p.tables)
	}
	for f := range p.kept {
		f.nextCert = nil
		f.nextLists = nil
	}
}

// rebindH3 closes the running http3 fronts p binds again at the same
// address and binds their replacements. If one bind fails, it binds every
// closed one again with its running settings, serves it on its running
// table, and returns the error; a listener that cannot be bound even so is
// marked down.
func (s *Server) rebindH3(p *reloadPlan) error {
	var done []rebind
	for _, r := range p.rebind {
		r.old.close()
		nf, err := bindFront(r.lc, s.log, s.cluster, listsOf(r.lists, r.old))
		if err == nil {
			p.fronts[r.at] = nf
			p.bound = append(p.bound, nf)
			done = append(done, r)
			continue
		}
		s.restoreH3(append(done, r), p)
		return err
	}
	return nil
}

// restoreH3 binds the closed running fronts of rs again with their running
// settings, in place of the fronts p bound for them.
func (s *Server) restoreH3(rs []rebind, p *reloadPlan) {
	fronts := slices.Clone(s.frontList())
	for _, r := range rs {
		if nf := p.fronts[r.at]; nf != nil {
			nf.close()
			p.bound = slices.DeleteFunc(p.bound, func(f *front) bool { return f == nf })
			p.fronts[r.at] = nil
		}
		i := slices.Index(fronts, r.old)
		lc := r.old.cfg
		lc.Listen = r.old.addr().String() // the port it had, also when configured as 0
		// The running lists, not read again: the files may have changed.
		f, err := bindFront(lc, s.log, s.cluster, listsOf(r.old.lists.Load(), r.old))
		if err != nil {
			s.markDown(r.old.cfg.Name, err)
			s.log.Error("listener down: a failed reload could not bind it again", "listener", r.old.cfg.Name, "error", err)
			continue
		}
		if err := s.serve(f, s.cfg); err != nil {
			f.closeUnserved()
			s.markDown(r.old.cfg.Name, err)
			continue
		}
		fronts[i] = f
	}
	linkAltSvc(fronts)
	s.fronts.Store(&fronts)
}

// commit switches over to p, which can no longer fail: tables, then the
// fronts that take over sockets and connections, then the new fronts, then
// the drain of the old ones.
func (s *Server) commit(p *reloadPlan) {
	s.installTables(p.tables)
	for f := range p.kept {
		if f.nextCert != nil {
			f.ln.SetCert(f.nextCert)
			f.nextCert = nil
		}
		f.lists.Store(f.nextLists)
		f.nextLists = nil
	}
	// A front replacing a running one: the running one stops accepting
	// first (connection attempts wait in the shared socket's queue), then
	// the new one counts its connections, then serves.
	for _, nf := range p.bound {
		prev := p.adopt[nf]
		if shared := p.shares[nf]; shared != nil {
			shared.stopAccepting()
			if shared.cfg.SYNFilter && !nf.cfg.SYNFilter {
				nf.ln.DetachSocketFilter()
			}
		}
		if prev != nil {
			prev.stopAccepting()
			nf.conns.Adopt(prev.conns)
		}
	}
	linkAltSvc(p.fronts)
	for _, f := range p.fronts {
		if !f.serving() {
			if err := s.serve(f, p.cfg); err != nil {
				// Unreachable: certificates were read when the front was
				// bound, and serve fails for nothing else.
				s.log.Error("listener failed to start", "listener", f.cfg.Name, "error", err)
			}
		}
	}
	s.clearDown() // every listener of the configuration serves now
	fronts := p.fronts
	s.fronts.Store(&fronts)
	s.drainInBackground(p.drain, p.cfg.ShutdownTimeout)
}
