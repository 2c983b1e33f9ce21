package route

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a07d1050/portcullis/internal/admin"
	"github.com/seed-a07d1050/portcullis/internal/config"
)

// Serving is how a listener serves its table now, which decides the path
// [Table.Admin] reports for each route.
type Serving struct {
	// Full says that every request goes to the full server: an http3
	// listener, or one whose answers announce an Alt-Svc.
	Full bool

	// Loops says that the listener's event loops run (http1_server:
	// eventloop on Linux, plain http).
	Loops bool

	// Planned is how the daemon said each route would be served, by
	// "listener/route" (config.RoutePaths); nil: not said.
	Planned map[string]config.RoutePath
}

// Admin returns t as the admin listener reads it: its client limit and
// rate, each route's limits, rate and path (how its requests are served
// now, as s says, and as they were planned), its authentication, and a
// forward listener's proxy, interception and limits.
func (t *Table) Admin(s Serving) *admin.Table {
	at := &admin.Table{Client: adminLimit(t.client), Rate: adminRate(t.rate)}
	for _, r := range t.routes {
		ar := admin.Route{
			Name: r.name, Path: t.pathOf(r, s),
			Limit: adminLimit(r.limit), Shadow: adminLimit(r.shadow), Rate: adminRate(r.rate),
		}
		if p, ok := s.Planned[t.name+"/"+r.name]; ok {
			ar.Planned = &p
		}
		at.Routes = append(at.Routes, ar)
	}
	if t.auth != nil {
		at.Auth = t.auth.a
	}
	if t.forward != nil {
		fw := &admin.Forward{Proxy: t.forward.proxy}
		if st := t.interceptState(); st != nil {
			fw.Interceptor, fw.Upstream = st.a.Interceptor(), st.a.Upstream()
		}
		for _, l := range t.forward.limits {
			fw.Limits = append(fw.Limits, *adminLimit(l))
		}
		at.Forward = fw
	}
	return at
}

func adminLimit(l *limiter) *admin.Limit {
	if l == nil {
		return nil
	}
	return &admin.Limit{Config: l.cfg, Limiter: l.lim}
}

func adminRate(r *rateLimiter) *admin.Rate {
	if r == nil {
		return nil
	}
	return &admin.Rate{Config: r.cfg, Limiter: r.lim}
}

// pathOf returns how r, a route of t, is served now: on the event loops
// when they run and take it, on the lean path when it takes the route's
// requests, through the full server otherwise.
func (t *Table) pathOf(r *routeState, s Serving) config.DataPath {
	switch {
	case s.Full || t.lean == nil || r.lean == nil:
		return config.PathFull
	case r.lean.OnLoop() && s.Loops:
		return config.PathEventLoops
	}
	return config.PathLean
}

// Collect sends the metrics of every limiter, rate, authenticator,
// forward proxy and interception of t.
func (t *Table) Collect(ch chan<- prometheus.Metric) {
	for _, l := range t.limiters() {
		for _, c := range l.collectors() {
			c.Collect(ch)
		}
	}
	for _, r := range t.rates() {
		for _, c := range r.collectors() {
			c.Collect(ch)
		}
	}
	for _, c := range t.extraCollectors() {
		c.Collect(ch)
	}
}

// A Stopper serves connections taken over from a listener's http.Server,
// which its Shutdown and Close do not see: a forward proxy (its tunnels)
// or an interceptor (its sessions).
type Stopper interface {
	// Shutdown refuses new work and waits for what runs until ctx ends,
	// then cuts it; it returns ctx.Err() when it had to cut.
	Shutdown(ctx context.Context) error
	// Close cuts everything at once.
	Close() error
}

// Stoppers returns t's forward proxy and interceptor, those it has, for a
// server that stops.
func (t *Table) Stoppers() []Stopper {
	var out []Stopper
	if fp := t.forwardProxy(); fp != nil {
		out = append(out, fp)
	}
	if st := t.interceptState(); st != nil {
		out = append(out, stoppingInterceptor{st})
	}
	return out
}
