package route

import (
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/httplimit"
	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/exchange"
	"github.com/seed-a07d1050/portcullis/internal/forward"
	"github.com/seed-a07d1050/portcullis/promlimit"
	"github.com/seed-a07d1050/portcullis/rate"
)

// The rate slot of a listener or a route, as the `limit` label of its
// metrics and in the names of its cluster keys. (conn_rate and
// handshake_rate are the listener's accept-time rates, outside the table.)
const kindRate limitKind = exchange.ByRate // listeners[].rate, routes[].rate

// rateLimiter is one request rate of a table (a listener's or a route's
// `rate` block) with what exports it. Like a limiter, it is kept across a
// reload that does not change its settings, so that its keys' state carries
// over; a replaced one is closed once the exchanges that went through it
// have ended.
type rateLimiter struct {
	cfg   config.Rate // effective
	id    Identity
	lim   *httplimit.RateLimiter
	key   httplimit.KeyFunc    // the rate's, to name a refused request's key
	store io.Closer            // the cluster RateStore; nil without a cluster
	redis prometheus.Collector // its Redis metrics; nil without a cluster
	total *promlimit.RateCollector

	active   atomic.Int64 // exchanges inside the rate's handler
	retiring atomic.Bool
	idle     chan struct{} // closed once retiring with no exchange inside
	idleOnce sync.Once
}

// newRateLimiter builds the rate of cfg (effective) for listener ln, route
// route ("" for the listener's own rate), logging to log, counting in a
// Store of stores when it is set. On error nothing is left open.
func newRateLimiter(cfg *config.Rate, id Identity, ln, route string, log *slog.Logger, stores Stores) (*rateLimiter, error) {
	labels := prometheus.Labels{"listener": ln, "route": route, "limit": string(kindRate)}
	key, err := keyFunc(cfg.Key, id)
	if err != nil {
		return nil, err
	}
	name := limiterName(ln, route, kindRate)
	rc := httplimit.RateConfig{
		Key:     key,
		Rate:    RateOf(cfg.Rate),
		Burst:   cfg.Burst,
		Delay:   cfg.Limit().Delay, // config.RateNoDelay is rate.NoDelay
		Shadow:  cfg.DryRun,
		Status:  cfg.Status,
		Headers: rateHeaders(cfg.Headers),
		Logger:  log,
		Name:    name,
		OnAdmit: rateAdmitted,
	}
	overrides := rateOverrides(cfg.Overrides)
	switch cfg.Key {
	case config.KeyClientIP, "":
		rc.LimitFor = cidrLookup(overrides)
	case config.KeyTargetAddr:
		rc.LimitFor = addrLookup(overrides)
	case config.KeyTargetHost:
		if rc.LimitFor, err = targetLookup(overrides); err != nil {
			return nil, fmt.Errorf("route: rate %s: %w", name, err)
		}
	default:
		rc.Overrides = overrides
	}
	r := &rateLimiter{cfg: *cfg, id: id, key: key, idle: make(chan struct{})}
	if stores != nil {
		cs, err := stores.RateStore(name, labels)
		if err != nil {
			return nil, err // it names the store
		}
		if cs != nil {
			rc.Store, r.store, r.redis = cs, cs, cs.Collector()
		}
	}
	if r.lim, err = httplimit.NewRate(rc); err != nil {
		r.closeStore()
		return nil, fmt.Errorf("route: rate %s: %w", name, err)
	}
	r.total = promlimit.NewRateCollector(r.lim, promlimit.Opts{Subsystem: "rate", ConstLabels: labels})
	return r, nil
}

func rateHeaders(h config.RateHeaders) httplimit.RateHeaders {
	switch h {
	case config.RateHeadersAlways:
		return httplimit.RateHeadersAlways
	case config.RateHeadersNever:
		return httplimit.RateHeadersNever
	}
	return httplimit.RateHeadersOnRefusal
}

// sameAs reports whether r was built from cfg for a listener with identity
// id, so that a reload can keep it with its keys' state.
func (r *rateLimiter) sameAs(cfg *config.Rate, id Identity) bool {
	return reflect.DeepEqual(&r.cfg, cfg) && sameIdentity(r.id, id)
}

// wrap returns next behind the rate. The exchange is counted as inside the
// rate until it ends, so that a retired rate's Store stays open for the
// requests still delayed by it.
//
// It also tells the exchange's access line when the rate refused the
// request (see gated).
func (r *rateLimiter) wrap(next http.Handler) http.Handler {
	refusal := func(st *exchange.State, req *http.Request) (string, string) {
		if req.Context().Err() != nil {
			// The delay ended with the request's context: the client left
			// (or the daemon is stopping), as a limit's queue says.
			st.Left = exchange.ClientLeft(req)
			return r.key(req), exchange.ReasonAbandoned
		}
		return r.key(req), exchange.ReasonRate
	}
	inner := exchange.Gated(string(kindRate), refusal, r.lim.Wrap, next)
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.active.Add(1)
		defer r.leave()
		inner.ServeHTTP(w, req)
	})
}

func (r *rateLimiter) leave() {
	if r.active.Add(-1) == 0 && r.retiring.Load() {
		r.idleOnce.Do(func() { close(r.idle) })
	}
}

// retire returns a channel closed once no exchange is inside the rate any
// more; exchanges that start after it are still counted.
func (r *rateLimiter) retire() <-chan struct{} {
	r.retiring.Store(true)
	if r.active.Load() == 0 {
		r.idleOnce.Do(func() { close(r.idle) })
	}
	return r.idle
}

// close stops the rate, then its cluster Store (after one last flush).
func (r *rateLimiter) close() {
	_ = r.lim.Close()
	r.closeStore()
}

func (r *rateLimiter) closeStore() {
	if r.store != nil {
		_ = r.store.Close()
	}
}

func (r *rateLimiter) collectors() []prometheus.Collector {
	if r.redis != nil {
		return []prometheus.Collector{r.total, r.redis}
	}
	return []prometheus.Collector{r.total}
}

// rateLimiter returns the old table's rate in the same place (route "" for
// the listener's) when it was built from the same settings, so its keys'
// state carries over a reload; otherwise a new one.
func (b *tableBuilder) rateLimiter(cfg *config.Rate, route string) (*rateLimiter, error) {
	if old := b.old.findRate(route); old != nil && old.sameAs(cfg, b.id) {
		return old, nil
	}
	return newRateLimiter(cfg, b.id, b.lc.Name, route, b.log, b.Stores)
}

// findRate returns t's rate for route ("" for the listener's), or nil.
func (t *Table) findRate(route string) *rateLimiter {
	if t == nil {
		return nil
	}
	if route == "" {
		return t.rate
	}
	for _, r := range t.routes {
		if r.name == route {
			return r.rate
		}
	}
	return nil
}

// rates returns every rate of t.
func (t *Table) rates() []*rateLimiter {
	if t == nil {
		return nil
	}
	var out []*rateLimiter
	if t.rate != nil {
		out = append(out, t.rate)
	}
	for _, r := range t.routes {
		if r.rate != nil {
			out = append(out, r.rate)
		}
	}
	return out
}

// ownsRate reports whether r is one of t's rates.
func (t *Table) ownsRate(r *rateLimiter) bool {
	for _, x := range t.rates() {
		if x == r {
			return true
		}
	}
	return false
}

// closeNewRates closes the rates of a table that failed to build or was
// discarded, and that are not borrowed from old.
func (t *Table) closeNewRates(old *Table) {
	for _, r := range t.rates() {
		if !old.ownsRate(r) {
			r.close()
		}
	}
}

// cidrLookup turns client_ip overrides, written as addresses or CIDRs, into
// a lookup over client keys: the longest override prefix holding the whole
// key wins. Nil when there is no override.
func cidrLookup[V any](overrides map[string]V) func(string) (V, bool) {
	if len(overrides) == 0 {
		return nil
	}
	type entry struct {
		pfx netip.Prefix
		v   V
	}
	var entries []entry
	for s, v := range overrides {
		pfx, err := netip.ParsePrefix(s)
		if err != nil {
			addr, err := netip.ParseAddr(s)
			if err != nil {
				continue // Validate refuses these
			}
			pfx = netip.PrefixFrom(addr, addr.BitLen())
		}
		if pfx.Addr().Is4In6() {
			pfx = netip.PrefixFrom(pfx.Addr().Unmap(), pfx.Bits()-96)
		}
		entries = append(entries, entry{pfx.Masked(), v})
	}
	return func(key string) (V, bool) {
		var best V
		k, err := clientkey.ParseKey(key)
		if err != nil {
			return best, false
		}
		kp := k.Prefix()
		bestBits := -1
		for _, e := range entries {
			if e.pfx.Bits() <= kp.Bits() && e.pfx.Contains(kp.Addr()) && e.pfx.Bits() > bestBits {
				best, bestBits = e.v, e.pfx.Bits()
			}
		}
		return best, bestBits >= 0
	}
}

// config.RateNoDelay is rate.NoDelay, so that a Delay is copied as it is.
var _ [0]struct{} = [config.RateNoDelay - rate.NoDelay]struct{}{}

// RateOf returns the rate.Rate of a configured rate; config reads the text form itself, so
// that it imports no runtime package, and its values are rate's, field for field.
func RateOf(r config.RateValue) rate.Rate {
	return rate.Rate{Events: r.Events, Per: r.Per}
}

// RateLimitOf returns the rate.Limit of a configured limit (config.RateNoDelay is
// rate.NoDelay).
func RateLimitOf(l config.RateLimit) rate.Limit {
	return rate.Limit{Rate: RateOf(l.Rate), Burst: l.Burst, Delay: l.Delay}
}

// rateOverrides returns the per-key limits of a rate block as package rate takes them; nil
// stays nil.
func rateOverrides(in map[string]config.RateLimit) map[string]rate.Limit {
	if in == nil {
		return nil
	}
	out := make(map[string]rate.Limit, len(in))
	for k, l := range in {
		out[k] = RateLimitOf(l)
	}
	return out
}

// targetLookup turns target_host overrides, written as "host:port" or
// "host" (every port), into a lookup over forward.ByTargetHost keys, with
// the forward limits' rules (forward.TargetPermits): names normalised,
// host:port winning over host. Nil when there is no override.
func targetLookup(overrides map[string]rate.Limit) (func(string) (rate.Limit, bool), error) {
	keys := slices.Sorted(maps.Keys(overrides))
	index := make(map[string]int, len(keys))
	for i, k := range keys {
		index[k] = i + 1 // 0 is "no override"
	}
	which, err := forward.TargetPermits(index)
	if err != nil || which == nil {
		return nil, err
	}
	return func(key string) (rate.Limit, bool) {
		if i := which(key); i > 0 {
			return overrides[keys[i-1]], true
		}
		return rate.Limit{}, false
	}, nil
}

// rateAdmitted is a request rate's OnAdmit: a request the rate delayed
// (nginx's limit_req delay) is queued for as long, one let through over the
// rate in shadow mode (dry_run) is shadow_over.
//
// A shadow_over request also records whether the rate would have delayed
// or refused it (the access log's rate_dry_run); the harsher of the two
// when more than one rate is in dry-run mode.
func rateAdmitted(w http.ResponseWriter, _ *http.Request, key string, d rate.Decision) {
	if st := exchange.StateOf(w); st != nil {
		st.Admit(string(kindRate), key, d.Delay, d.Shadowed())
		switch d.Verdict {
		case rate.ShadowDelayed:
			st.RateDry = max(st.RateDry, exchange.RateDryDelayed)
		case rate.ShadowRefused:
			st.RateDry = exchange.RateDryRejected
		}
	}
}
