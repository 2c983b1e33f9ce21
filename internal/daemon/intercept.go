package daemon

import (
	"context"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/exchange"
	"github.com/seed-a07d1050/portcullis/internal/intercept"
)

// interceptState is the TLS interception of a forward listener's table:
// its intercept.Assembly (the Interceptor in front of the proxy, the
// Upstream its requests go to, the leaves it shows clients, and the chain
// of limits the requests inside go through), which a reload keeps part by
// part as intercept.Assembly says, and its metrics.
type interceptState struct {
	a     *intercept.Assembly
	stats prometheus.Collector
}

// stoppingInterceptor is a table's Interceptor as the server stops it:
// Shutdown and Close return once the requests inside its sessions have
// returned too (within forceWait once they were cut), so that their permits
// are back when the server's Shutdown returns.
type stoppingInterceptor struct{ st *interceptState }

func (s stoppingInterceptor) Shutdown(ctx context.Context) error { return s.st.a.Shutdown(ctx) }
func (s stoppingInterceptor) Close() error                       { return s.st.a.Close() }

// intercept puts the listener's Interceptor, when it has an intercept
// block, in front of *h (the forward proxy), and records it in t. limits
// puts a handler behind the listener's rate and limits, in their order;
// the requests inside sessions pass through them too, each taking and
// releasing its own permits. It reuses what it can of the old table's, as
// intercept.Assembly says. On error it leaves nothing of its own open.
func (b *tableBuilder) intercept(t *routeTable, limits func(http.Handler) http.Handler, h *http.Handler) error {
	ic := b.lc.Forward.Intercept
	if ic == nil {
		return nil
	}
	var old *intercept.Assembly
	if o := b.old.interceptState(); o != nil {
		old = o.a
	}
	a, err := intercept.NewAssembly(b.assemblyConfig(ic, t, limits), old)
	if err != nil {
		return fmt.Errorf("proxy: listener %s: intercept: %w", b.lc.Name, err)
	}
	t.forward.intercept = &interceptState{a: a, stats: a.Collector(prometheus.Labels{"listener": b.lc.Name})}
	*h = a.Wrap(*h)
	return nil
}

// assemblyConfig is what the interception of ic is built from: the
// listener's forward proxy (in t), its session settings, and the chain of
// its limits with the exchange handler around it.
func (b *tableBuilder) assemblyConfig(ic *config.Intercept, t *routeTable, limits func(http.Handler) http.Handler) intercept.AssemblyConfig {
	lc, fw := b.lc, b.lc.Forward
	return intercept.AssemblyConfig{
		Proxy:              t.forward.proxy,
		CACertFile:         ic.CACert,
		CAKeyFile:          ic.CAKey,
		AllowReadableCAKey: ic.AllowReadableCAKey,
		Leaves:             leafSettings(ic),
		Intercept:          ic.Intercept,
		Bypass:             ic.Bypass,
		HandshakeTimeout:   ic.HandshakeTimeout,
		IdleTimeout:        ic.IdleTimeout,
		ReadHeaderTimeout:  lc.ReadHeaderTimeout,
		ReadTimeout:        lc.ReadTimeout,
		WriteTimeout:       lc.WriteTimeout,
		MaxHeaderBytes:     lc.MaxHeaderBytes,
		DisableHTTP2:       !ic.IsOfferingHTTP2(),
		Upstream: intercept.UpstreamSettings{
			RootsFile:                  ic.Upstream.CAFile,
			InsecureSkipVerifyUpstream: ic.Upstream.InsecureSkipVerifyUpstream,
			Timeout:                    ic.Upstream.Timeout,
			MaxIdleConnsPerTarget:      fw.MaxIdleConnsPerTarget,
			MaxIdleConns:               fw.MaxIdleConns,
			IdleConnTimeout:            fw.IdleConnTimeout,
			Via:                        fw.Via,
		},
		Inner: func(up *intercept.Upstream) http.Handler {
			return exchange.Handler(limits(up), b.exchangeOpts())
		},
		Drain:  b.drain,
		Wait:   forceWait,
		Name:   lc.Name,
		Logger: b.deps.log.With("listener", lc.Name),
	}
}

// leafSettings are the leaves block of ic as intercept takes it: zero fields
// take intercept's defaults, which are the block's.
func leafSettings(ic *config.Intercept) intercept.LeafSettings {
	return intercept.LeafSettings{Validity: ic.Leaves.Validity, RenewBefore: ic.Leaves.RenewBefore, CacheSize: ic.Leaves.CacheSize}
}

// interceptState returns t's interception, or nil.
func (t *routeTable) interceptState() *interceptState {
	if t == nil || t.forward == nil {
		return nil
	}
	return t.forward.intercept
}

// commitIntercept points t's Interceptor, when a reload keeps it, at t's
// chain of limits: the requests its sessions send from now on count under
// t's limits.
func (t *routeTable) commitIntercept() {
	if st := t.interceptState(); st != nil {
		st.a.Commit()
	}
}

// closeNewIntercept closes what t's interception does not share with old's,
// for a table that failed to build or was discarded.
func (t *routeTable) closeNewIntercept(old *routeTable) {
	st, o := t.interceptState(), old.interceptState()
	if st == nil {
		return
	}
	var oa *intercept.Assembly
	if o != nil {
		oa = o.a
	}
	st.a.Discard(oa)
}

// retireIntercept retires, in the background, what old's interception has
// and t's does not (intercept.Assembly.Retire): a replaced Interceptor's
// sessions finish within the drain time, then are cut. t may be nil (the
// listener is gone).
func (s *Server) retireIntercept(old, t *routeTable) {
	o, st := old.interceptState(), t.interceptState()
	if o == nil {
		return
	}
	var next *intercept.Assembly
	if st != nil {
		next = st.a
	}
	if !o.a.Replaced(next) {
		return
	}
	s.retired.Add(1)
	go func() {
		defer s.retired.Done()
		if cut, sessions := o.a.Retire(s.base, next); cut {
			s.log.Warn("sessions of a replaced interceptor cut off after the shutdown timeout", "sessions", sessions)
		}
	}()
}

// closeIntercept ends t's interception at once, for a server that stops.
func (t *routeTable) closeIntercept() {
	if st := t.interceptState(); st != nil {
		st.a.CloseAll()
	}
}
