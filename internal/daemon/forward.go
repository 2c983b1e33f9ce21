package daemon

import (
	"fmt"
	"net/http"
	"reflect"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/exchange"
	"github.com/seed-a07d1050/portcullis/internal/forward"
	"github.com/seed-a07d1050/portcullis/internal/proxyauth"
)

// forwardState is what a forward listener's table holds besides its
// client limit and authentication: the proxy and its limits.
type forwardState struct {
	cfg       config.Forward // effective, Limits and Intercept left out: what the proxy was built from
	proxy     *forward.Proxy
	limits    []*limiter // outermost first
	stats     prometheus.Collector
	intercept *interceptState // nil without an intercept block
}

// authState is a listener's authentication: the Authenticator, what it was
// built from, and, for an Authenticator a reload keeps, the prepared
// reading of its htpasswd file, put in effect when the reload commits.
type authState struct {
	cfg    config.Auth // effective
	id     identity
	a      *proxyauth.Authenticator
	commit func() // nil once committed, and for a new Authenticator
	stats  prometheus.Collector
}

// authenticator returns t's Authenticator, or nil.
func (t *routeTable) authenticator() *proxyauth.Authenticator {
	if t == nil || t.auth == nil {
		return nil
	}
	return t.auth.a
}

// forwardProxy returns t's forward proxy, or nil.
func (t *routeTable) forwardProxy() *forward.Proxy {
	if t == nil || t.forward == nil {
		return nil
	}
	return t.forward.proxy
}

// buildForward builds the table of a forward listener: authentication,
// then the listener's rate, then the client limit, then the forward limits
// outermost first, then the interceptor (with an intercept block), then the
// proxy. A request refused by authentication never reaches a limiter, and a
// request refused by a limiter holds the permits of the limits before it
// only until it is answered. The requests inside intercepted sessions pass
// the same rate and limits again, each with its own permits.
func (b *tableBuilder) buildForward() (*routeTable, error) {
	t := &routeTable{forward: &forwardState{}}
	fail := func(err error) (*routeTable, error) {
		t.closeNew(b.old)
		return nil, err
	}
	if err := b.forwardProxy(t); err != nil {
		return fail(err)
	}
	limits, err := b.forwardLimits(t)
	if err != nil {
		return fail(err)
	}
	var h http.Handler = t.forward.proxy
	if err := b.intercept(t, limits, &h); err != nil {
		return fail(err)
	}
	h = limits(h)
	if err := b.authenticate(t, &h); err != nil {
		return fail(err)
	}
	if b.lc.IsLocalClientsOnly() {
		// Outermost: a client refused here holds no rate token and no permit.
		h = forward.LocalClientsOnly(h, forward.LocalClientsConfig{
			ClientAddr: b.id.resolver.ClientAddr,
			Listener:   b.lc.Name,
			Logger:     b.deps.log.With("listener", b.lc.Name),
			OnRefuse:   exchange.ForwardRefused,
		})
	}
	t.handler = exchange.Handler(h, b.exchangeOpts())
	return t, nil
}

// forwardLimits builds the rate, client limit and forward limits of the
// listener into t, and returns what puts a handler behind them: the rate
// first, so that a request it delays holds no permit, then the client
// limit, then the forward limits outermost first. Each call wraps the same
// limiters, so that every chain it makes counts in them.
func (b *tableBuilder) forwardLimits(t *routeTable) (func(http.Handler) http.Handler, error) {
	limits := b.lc.Forward.Limits
	t.forward.limits = make([]*limiter, len(limits))
	for i := len(limits) - 1; i >= 0; i-- {
		l, err := b.limiter(&limits[i], "", forwardKind(limits[i].Key))
		if err != nil {
			t.forward.limits = t.forward.limits[i+1:]
			return nil, err
		}
		t.forward.limits[i] = l
	}
	if cl := b.lc.ClientLimit; cl != nil {
		l, err := b.limiter(cl, "", kindClient)
		if err != nil {
			return nil, err
		}
		t.client = l
	}
	if b.lc.Rate != nil {
		r, err := b.rateLimiter(b.lc.Rate, "")
		if err != nil {
			return nil, err
		}
		t.rate = r
	}
	return func(h http.Handler) http.Handler {
		for i := len(t.forward.limits) - 1; i >= 0; i-- {
			h = t.forward.limits[i].lim.Wrap(h)
		}
		if t.client != nil {
			h = t.client.lim.Wrap(h)
		}
		if t.rate != nil {
			h = t.rate.wrap(h)
		}
		if b.countsTargetAddr() {
			h = t.forward.proxy.ResolveTargets(h) // pins each target to the address its key names
		}
		return h
	}, nil
}

// forwardProxy puts in t the proxy of the listener: the old table's when
// its settings did not change (with its idle target connections and open
// tunnels), otherwise a new one.
func (b *tableBuilder) forwardProxy(t *routeTable) error {
	cfg := *b.lc.Forward
	cfg.Limits, cfg.Intercept = nil, nil // the limits and the interceptor are kept on their own
	if old := b.old; old != nil && old.forward != nil && reflect.DeepEqual(old.forward.cfg, cfg) {
		t.forward.cfg, t.forward.proxy, t.forward.stats = cfg, old.forward.proxy, old.forward.stats
		return nil
	}
	policy, err := forwardPolicy(&cfg)
	if err != nil {
		return fmt.Errorf("proxy: listener %s: destinations: %w", b.lc.Name, err)
	}
	p, err := forward.New(forward.Config{
		Policy:                policy,
		DialTimeout:           cfg.DialTimeout,
		UpstreamTimeout:       cfg.UpstreamTimeout,
		TunnelIdleTimeout:     cfg.TunnelIdleTimeout,
		TunnelLifetime:        cfg.TunnelLifetime,
		MaxIdleConnsPerTarget: cfg.MaxIdleConnsPerTarget,
		MaxIdleConns:          cfg.MaxIdleConns,
		IdleConnTimeout:       cfg.IdleConnTimeout,
		Via:                   cfg.Via,
		Logger:                b.deps.log.With("listener", b.lc.Name),
		OnRefuse:              exchange.ForwardRefused,
		OnTargetError:         exchange.CountTargetError(b.routeMetrics("")),
	})
	if err != nil {
		return fmt.Errorf("proxy: listener %s: %w", b.lc.Name, err)
	}
	t.forward.cfg, t.forward.proxy = cfg, p
	t.forward.stats = forward.NewCollector(p, prometheus.Labels{"listener": b.lc.Name})
	return nil
}

// authenticate wraps *h in the listener's authentication, if it has any,
// and records it in t. An Authenticator whose settings did not change is
// kept, with its cache and failure counts: its htpasswd file is read now,
// and put in effect only when the table is installed, so that a file that
// does not load fails the reload and changes nothing.
func (b *tableBuilder) authenticate(t *routeTable, h *http.Handler) error {
	ac := b.lc.Auth
	if ac == nil {
		return nil
	}
	challenge := proxyauth.ChallengeOrigin
	if b.lc.IsForward() {
		challenge = proxyauth.ChallengeProxy
	}
	if old := b.old; old != nil && old.auth != nil && old.auth.sameAs(ac, b.id) && b.lc.IsForward() == (old.forward != nil) {
		commit, err := old.auth.a.PrepareReload()
		if err != nil {
			return fmt.Errorf("proxy: listener %s: auth: %w", b.lc.Name, err)
		}
		t.auth = &authState{cfg: old.auth.cfg, id: old.auth.id, a: old.auth.a, commit: commit, stats: old.auth.stats}
		*h = exchange.Gated("auth", exchange.AuthRefusal, t.auth.a.Wrap, *h)
		return nil
	}
	failures, err := proxyauth.NewFailureLimiter(proxyauth.FailureConfig{Burst: ac.Failures.Burst, Interval: ac.Failures.Interval})
	if err != nil {
		return fmt.Errorf("proxy: listener %s: auth: %w", b.lc.Name, err)
	}
	a, err := proxyauth.New(proxyauth.Config{
		File:                ac.Htpasswd,
		Realm:               ac.Realm,
		Challenge:           challenge,
		CacheSize:           ac.CacheSize,
		MaxConcurrentChecks: ac.MaxConcurrentChecks,
		CheckTimeout:        ac.CheckTimeout,
		Failures:            failures,
		Resolver:            b.id.resolver,
		Logger:              b.deps.log.With("listener", b.lc.Name),
	})
	if err != nil {
		return fmt.Errorf("proxy: listener %s: auth: %w", b.lc.Name, err)
	}
	t.auth = &authState{cfg: *ac, id: b.id, a: a, stats: proxyauth.NewCollector(a, prometheus.Labels{"listener": b.lc.Name})}
	*h = exchange.Gated("auth", exchange.AuthRefusal, a.Wrap, *h)
	return nil
}

// sameAs reports whether s was built from cfg for a listener with identity
// id, so that a reload can keep its Authenticator.
func (s *authState) sameAs(cfg *config.Auth, id identity) bool {
	return reflect.DeepEqual(&s.cfg, cfg) && sameIdentity(s.id, id)
}

// commitAuth puts in effect the htpasswd file a reload read for t's kept
// Authenticator.
func (t *routeTable) commitAuth() {
	if t.auth != nil && t.auth.commit != nil {
		t.auth.commit()
		t.auth.commit = nil
	}
}

// retireExtras retires what old holds and t does not: an Authenticator
// closes once no request is being checked, a forward proxy once its last
// tunnel has closed (both at the latest when the server stops). t may be
// nil (the listener is gone).
func (s *Server) retireExtras(old, t *routeTable) {
	if a := old.authenticator(); a != nil && a != t.authenticator() {
		s.retired.Add(1)
		idle := a.Idle()
		go func() {
			defer s.retired.Done()
			defer a.Close()
			select {
			case <-idle:
			case <-s.base.Done():
			}
		}()
	}
	if p := old.forwardProxy(); p != nil && p != t.forwardProxy() {
		s.retired.Add(1)
		go func() {
			defer s.retired.Done()
			// Its tunnels run on under the settings they opened with; the
			// server's stop cuts them.
			_ = p.Shutdown(s.base)
		}()
	}
	s.retireIntercept(old, t)
}

// closeExtras closes t's Authenticator and forward proxy, cutting its
// tunnels.
func (t *routeTable) closeExtras() {
	if a := t.authenticator(); a != nil {
		_ = a.Close()
	}
	if p := t.forwardProxy(); p != nil {
		_ = p.Close()
	}
	t.closeIntercept()
}

// extraCollectors returns the metrics of t's authentication and forward
// proxy.
func (t *routeTable) extraCollectors() []prometheus.Collector {
	var out []prometheus.Collector
	if t.auth != nil {
		out = append(out, t.auth.stats)
	}
	if t.forward != nil {
		out = append(out, t.forward.stats)
	}
	if st := t.interceptState(); st != nil {
		out = append(out, st.stats)
	}
	return out
}

// forwardPolicy returns the destination policy of f (its destinations and connect_ports),
// as the forward proxy applies it. It fails for what config refuses, and for what
// forward.NewPolicy refuses.
func forwardPolicy(f *config.Forward) (*forward.Policy, error) {
	d := f.Destinations
	pc := forward.PolicyConfig{Allow: d.Allow, Deny: d.Deny}
	var err error
	if pc.Ports, err = portRanges("destinations.ports", d.Ports); err != nil {
		return nil, err
	}
	if pc.ConnectPorts, err = portRanges("connect_ports", f.ConnectPorts); err != nil {
		return nil, err
	}
	return forward.NewPolicy(pc)
}

// portRanges parses a list of ports and ranges; nil stays nil (forward's default).
func portRanges(field string, list []string) ([]forward.PortRange, error) {
	parsed, err := config.PortRanges(field, list)
	if parsed == nil {
		return nil, err
	}
	out := make([]forward.PortRange, len(parsed))
	for i, r := range parsed {
		out[i] = forward.PortRange{From: r.From, To: r.To}
	}
	return out, nil
}
