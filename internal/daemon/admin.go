package daemon

import (
	"context"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/connlimit"
	"github.com/seed-a07d1050/portcullis/internal/admin"
	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/livepage"
	"github.com/seed-a07d1050/portcullis/internal/relay"
	"github.com/seed-a07d1050/portcullis/internal/route"
	"github.com/seed-a07d1050/portcullis/limit"
)

// livePingTimeout bounds the PING of the cluster's Redis the live page
// makes once a second, so that a Redis that does not answer delays a
// sample by at most this.
const livePingTimeout = 500 * time.Millisecond

// startAdmin starts an admin listener on addr that reads s (internal/admin
// serves and formats; adminSource walks the listeners and tables).
func startAdmin(addr string, s *Server) (*admin.Server, error) {
	return admin.Start(admin.Config{
		Addr:       addr,
		Source:     adminSource{s},
		Auth:       &s.adminAuth,
		Metrics:    s.metrics,
		Collectors: []prometheus.Collector{relay.NewCollector(s.transport, s.loopCounts)},
		Log:        s.log,
	})
}

// logAdminChange logs what a start or a reload changed for the admin
// listener (admin.LogChange); prevAuth and prevAddr are what was in force
// before (nil at start).
func (s *Server) logAdminChange(prevAuth *admin.Auth, prevAddr net.Addr, starting bool) {
	admin.LogChange(s.log, admin.Change{
		Auth: s.adminAuth.Load(), PrevAuth: prevAuth,
		Addr: s.AdminAddr(), PrevAddr: prevAddr, Starting: starting,
	})
}

// Snapshot returns the state of every listener and limit now, as
// /debug/limits serves it.
func (s *Server) Snapshot() admin.Snapshot {
	return admin.SnapshotOf(adminSource{s}.Listeners())
}

// adminSource is the daemon as the admin listener reads it.
type adminSource struct{ s *Server }

var _ admin.Source = adminSource{}

// Listeners returns every listener with the limiters of its route table.
func (a adminSource) Listeners() []admin.Listener {
	paths := a.s.paths.Load()
	fronts := a.s.frontList()
	out := make([]admin.Listener, 0, len(fronts))
	for _, f := range fronts {
		l := admin.Listener{Config: &f.cfg, Addr: f.addr().String(), Conns: f.conns, AcceptRate: f.acceptRate()}
		if f.h3 != nil {
			l.Conns = h3Conns{f}
			l.QUIC, _ = f.ln.QUIC()
		}
		if f.table != nil && f.cfg.RoutesFrom == "" {
			l.Table = f.adminTable(f.table.Load(), paths)
		}
		out = append(out, l)
	}
	return out
}

// adminTable returns t, f's table, with how each route is served now and
// how the daemon said it would be (paths, by "listener/route").
func (f *front) adminTable(t *route.Table, paths *map[string]config.RoutePath) *admin.Table {
	s := route.Serving{
		Full:  f.h3 != nil || f.ln.AltSvc() != "",
		Loops: f.ln.Loops() != nil,
	}
	if paths != nil {
		s.Planned = *paths
	}
	return t.Admin(s)
}

// acceptRate returns f's accept-time rate (conn_rate or handshake_rate);
// nil without one.
func (f *front) acceptRate() *admin.AcceptRate {
	switch {
	case f.h3 != nil && f.h3.handshake != nil:
		return &admin.AcceptRate{Limit: route.RateLimitOf(f.cfg.HandshakeRate.Limit()), Handshake: true, Snapshot: f.h3.handshake.Snapshot}
	case f.conns != nil && f.cfg.ConnRate != nil:
		return &admin.AcceptRate{Limit: route.RateLimitOf(f.cfg.ConnRate.Limit()), Snapshot: f.conns.RateSnapshot}
	}
	return nil
}

// h3Conns are an http3 listener's connection counts: its QUIC admission
// mapped onto a connlimit.Listener's (listen.Front.QUICStats), with the
// attempts its lists refused, and the clients holding its per-client
// permits (quicadmit takes them without waiting).
type h3Conns struct{ f *front }

func (c h3Conns) Stats() connlimit.Stats {
	s := c.f.ln.QUICStats()
	// quicadmit never sees the attempts the lists refuse.
	s.Refused.Filtered = c.f.denied.denyList.Load() + c.f.denied.notAllowed.Load()
	return s
}

func (c h3Conns) Snapshot(top int) limit.Snapshot[clientkey.Key] {
	_, perClient := c.f.ln.QUIC()
	return perClient.Snapshot(top)
}

// Collect sends the metrics of every listener and limiter s runs now.
func (a adminSource) Collect(ch chan<- prometheus.Metric) {
	a.s.cluster.collectDegraded(ch)
	seen := make(map[*route.Table]bool)
	for _, f := range a.s.frontList() {
		f.stats.Collect(ch)
		if f.redis != nil {
			f.redis.Collect(ch)
		}
		if f.table == nil {
			continue
		}
		t := f.table.Load()
		if seen[t] { // listeners with routes_from share a table
			continue
		}
		seen[t] = true
		t.Collect(ch)
	}
}

func (a adminSource) Ready() (bool, string) { return a.s.Ready() }

func (a adminSource) Degraded() []string { return a.s.cluster.degraded() }

// Redis returns the health of the cluster's Redis: whether it answers a
// PING now, and how many of the daemon's stores have their circuit breaker
// open. Nil without a cluster.
func (a adminSource) Redis(ctx context.Context) *livepage.Redis {
	c := a.s.cluster
	if c == nil {
		return nil
	}
	r := &livepage.Redis{Addrs: c.cfg.Redis.Addrs, OnError: string(c.cfg.OnError)}
	r.OpenBreakers, r.OutageSince = c.outages.Current()
	r.Degraded = c.degraded()
	ctx, cancel := context.WithTimeout(ctx, livePingTimeout)
	defer cancel()
	start := time.Now()
	if err := c.client.Ping(ctx).Err(); err != nil {
		r.Error = err.Error()
		return r
	}
	r.Reachable = true
	r.PingMillis = float64(time.Since(start).Microseconds()) / 1000
	return r
}
