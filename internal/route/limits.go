package route

import (
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"reflect"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/httplimit"
	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/exchange"
	"github.com/seed-a07d1050/portcullis/internal/forward"
	"github.com/seed-a07d1050/portcullis/internal/proxyauth"
	"github.com/seed-a07d1050/portcullis/promlimit"
)

// limitKind says which slot of a listener a limiter fills, for its metric
// labels and its place in /debug/limits.
type limitKind string

const (
	kindRoute  limitKind = "limit"
	kindShadow limitKind = "shadow_limit"
	kindClient limitKind = "client_limit"
)

// label is how metrics and access lines name the slot: "route_limit" for
// a route's limit, which is "limit" in the configuration and in the
// limiter's name (and so in cluster keys, which must not change).
func (k limitKind) label() string {
	if k == kindRoute {
		return "route_limit"
	}
	return string(k)
}

// forwardKind is the slot of a forward listener's limit: its key, one limit
// per key (proxy_user, target_host, client_ip, header:Name).
func forwardKind(k config.LimitKey) limitKind {
	if k == "" {
		k = config.KeyClientIP
	}
	return limitKind(k)
}

// Identity is what a listener knows about who its clients are: how a
// client's address becomes its key, and which proxies' forwarding headers
// are believed. It shapes client_ip keys, so a limiter is only reused
// across a reload when its identity is the same. The zero Identity is not
// usable; build one with [NewIdentity].
type Identity struct {
	Keyer    clientkey.Keyer
	Resolver *clientkey.Resolver // its Keyer is Keyer
}

// NewIdentity returns the identity of the listener lc (effective): its
// ipv4_prefix and ipv6_prefix, trusted_proxies and forwarded_header. It
// fails, saying which listener, for a prefix length or a proxy the
// clientkey package refuses.
func NewIdentity(lc *config.Listener) (Identity, error) {
	keyer, err := clientkey.NewKeyer(lc.IPv4Prefix, lc.IPv6Prefix)
	if err != nil {
		return Identity{}, fmt.Errorf("route: listener %s: client keys: %w", lc.Name, err)
	}
	trusted, err := proxySet(lc.TrustedProxies)
	if err != nil {
		return Identity{}, fmt.Errorf("route: listener %s: trusted_proxies: %w", lc.Name, err)
	}
	res := &clientkey.Resolver{Trusted: trusted, Keyer: keyer}
	switch lc.ForwardedHeader {
	case config.ForwardedXFF, "":
		res.Header = clientkey.HeaderXForwardedFor
	case config.ForwardedRFC7239:
		res.Header = clientkey.HeaderForwarded
	}
	return Identity{Keyer: keyer, Resolver: res}, nil
}

func proxySet(prefixes []netip.Prefix) (*clientkey.ProxySet, error) {
	entries := make([]string, len(prefixes))
	for i, p := range prefixes {
		entries[i] = p.String()
	}
	return clientkey.ParseProxySet(entries)
}

// limiter is one httplimit.Limiter of a table with what exports it.
type limiter struct {
	cfg    config.Limit // effective
	kind   limitKind
	id     Identity
	policy httplimit.Policy // what lim allows each key
	lim    *httplimit.Limiter
	store  io.Closer            // the limiter's cluster Store; nil without a cluster
	redis  prometheus.Collector // the Store's Redis metrics; nil without a cluster
	total  *promlimit.Collector
	wait   *promlimit.WaitHistogram
}

// sameAs reports whether l was built from cfg for a listener with identity
// id, so that a reload can keep it, with its counts and its waiters.
func (l *limiter) sameAs(cfg *config.Limit, id Identity) bool {
	return reflect.DeepEqual(&l.cfg, cfg) && sameIdentity(l.id, id)
}

// sameIdentity reports whether a and b key clients alike.
func sameIdentity(a, b Identity) bool {
	return a.Keyer == b.Keyer &&
		a.Resolver.Header == b.Resolver.Header &&
		reflect.DeepEqual(a.Resolver.Trusted.Prefixes(), b.Resolver.Trusted.Prefixes())
}

// close stops the limiter and its cluster Store. Permits held stay valid.
func (l *limiter) close() {
	_ = l.lim.Close()
	if l.store != nil {
		_ = l.store.Close()
	}
}

func (l *limiter) collectors() []prometheus.Collector {
	if l.redis != nil {
		return []prometheus.Collector{l.total, l.wait, l.redis}
	}
	return []prometheus.Collector{l.total, l.wait}
}

// newLimiter builds the limiter of cfg (effective) for listener ln, route
// route ("" for the listener's client limit) in slot kind, logging to log,
// counting in a Store of stores when it is set. On error nothing is left
// open.
func newLimiter(cfg *config.Limit, id Identity, ln, route string, kind limitKind, log *slog.Logger, stores Stores) (*limiter, error) {
	labels := prometheus.Labels{"listener": ln, "route": route, "limit": kind.label()}
	opts := promlimit.Opts{Subsystem: "exchanges", ConstLabels: labels}
	wait := promlimit.NewWaitHistogram(opts, nil)
	key, err := keyFunc(cfg.Key, id)
	if err != nil {
		return nil, err
	}
	name := limiterName(ln, route, kind)
	policy, err := limitPolicy(cfg, kind)
	if err != nil {
		return nil, fmt.Errorf("route: limit %s: %w", name, err)
	}
	var cs LimitStore
	if stores != nil {
		if cs, err = stores.LimitStore(name, labels); err != nil {
			return nil, err // it names the store
		}
	}
	hc := httplimit.Config{
		Policy:         policy,
		Key:            key,
		Status:         cfg.Status,
		RetryAfter:     cfg.RetryAfter, // NoRetryAfter is negative: no header
		TunnelPermits:  cfg.TunnelPermits,
		ReleaseTunnels: cfg.ReleaseTunnels,
		Observer:       promlimit.ObserverFor[string](wait),
		Logger:         log,
		Name:           name,
	}
	if !cfg.IsCountingTunnels() {
		// CONNECTs are neither counted nor refused; an upgrade holds its
		// permit only until its 101.
		hc.Key, hc.ReleaseTunnels = forward.ExceptConnect(key), true
	}
	hc.OnAdmit, hc.Reject = exchange.AdmissionHooks(kind.label(), cfg.Queue.Timeout, refusalResponse(cfg))
	var closer io.Closer
	var redisMetrics prometheus.Collector
	if cs != nil {
		hc.Store, closer, redisMetrics = cs, cs, cs.Collector()
	}
	lim, err := httplimit.New(hc)
	if err != nil {
		if closer != nil {
			_ = closer.Close()
		}
		return nil, fmt.Errorf("route: limit %s: %w", hc.Name, err)
	}
	return &limiter{
		cfg:    *cfg,
		kind:   kind,
		id:     id,
		policy: policy,
		lim:    lim,
		store:  closer,
		redis:  redisMetrics,
		total:  promlimit.NewCollector(lim, opts),
		wait:   wait,
	}, nil
}

// limitPolicy is the policy of a limit block (effective) in slot kind: the
// config's numbers mean what the Policy's do (zero the default, -1
// unlimited, a negative reclaim_after never), so they are copied as they
// are; only overrides are read by key, since client_ip, target_addr and
// target_host overrides name networks or patterns rather than single keys.
func limitPolicy(cfg *config.Limit, kind limitKind) (httplimit.Policy, error) {
	p := httplimit.Policy{
		Permits:      cfg.Permits,
		QueueSize:    cfg.Queue.Size,
		QueueTimeout: cfg.Queue.Timeout,
		Shadow:       cfg.Shadow || kind == kindShadow,
		ReclaimAfter: cfg.ReclaimAfter, // NoReclaim is negative: never
	}
	switch cfg.Key {
	case config.KeyClientIP, "":
		p.PermitsFor = cidrPermits(cfg.Overrides)
	case config.KeyTargetAddr:
		p.PermitsFor = addrPermits(cfg.Overrides)
	case config.KeyTargetHost:
		var err error
		if p.PermitsFor, err = forward.TargetPermits(cfg.Overrides); err != nil {
			return p, err
		}
	default:
		p.Overrides = cfg.Overrides
	}
	return p, nil
}

func limiterName(ln, route string, kind limitKind) string {
	if route == "" {
		return ln + "/" + string(kind)
	}
	return ln + "/" + route + "/" + string(kind)
}

// keyFunc returns the httplimit key function of a config key.
func keyFunc(k config.LimitKey, id Identity) (httplimit.KeyFunc, error) {
	switch k {
	case config.KeyClientIP, "":
		return httplimit.ByClientIP(id.Resolver), nil
	case config.KeyUser, config.KeyProxyUser:
		// Only the name the listener's authentication verified: Validate
		// refuses these keys on a listener without auth.
		return httplimit.ByUser(proxyauth.UserOf)
	case config.KeyTargetHost:
		return forward.ByTargetHost(), nil
	case config.KeyTargetAddr:
		return forward.ByTargetAddr(), nil
	case config.KeyHost:
		return httplimit.ByHost(), nil
	}
	if name, ok := k.Header(); ok {
		return httplimit.ByHeader(name)
	}
	return nil, fmt.Errorf("route: unknown limit key %q", k)
}

// cidrPermits turns client_ip overrides, written as addresses or CIDRs, into
// a permits function over client keys: the longest override prefix holding
// the whole key wins (see cidrLookup). Nil when there is no override.
func cidrPermits(overrides map[string]int) func(string) int {
	lookup := cidrLookup(overrides)
	if lookup == nil {
		return nil
	}
	return func(key string) int {
		n, _ := lookup(key)
		return n
	}
}
