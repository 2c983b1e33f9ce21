package proxy

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/connlimit"
	"github.com/seed-a07d1050/portcullis/httplimit"
	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/forward"
	"github.com/seed-a07d1050/portcullis/limit/redisstore"
	"github.com/seed-a07d1050/portcullis/limit/redisstore/redisprom"
	"github.com/seed-a07d1050/portcullis/promlimit"
	"github.com/seed-a07d1050/portcullis/rate"
)

// The rate slots of a listener, as the `limit` label of their metrics and in
// the names of their cluster keys.
const (
	kindRate          limitKind = "rate"           // listeners[].rate, routes[].rate
	kindConnRate      limitKind = "conn_rate"      // listeners[].conn_rate
	kindHandshakeRate limitKind = "handshake_rate" // listeners[].handshake_rate
)

// rateLimiter is one request rate of the daemon (a listener's or a route's
// `rate` block) with what exports it. Like a limiter, it is kept across a
// reload that does not change its settings, so that its keys' state carries
// over; a replaced one is closed once the exchanges that went through it
// have ended.
type rateLimiter struct {
	cfg   config.Rate // effective
	id    identity
	lim   *httplimit.RateLimiter
	store io.Closer            // the cluster RateStore; nil without a cluster
	redis prometheus.Collector // its Redis metrics; nil without a cluster
	total *promlimit.RateCollector

	active   atomic.Int64 // exchanges inside the rate's handler
	retiring atomic.Bool
	idle     chan struct{} // closed once retiring with no exchange inside
	idleOnce sync.Once
}

// newRateLimiter builds the rate of cfg (effective) for listener ln, route
// route ("" for the listener's own rate). On error nothing is left open.
func newRateLimiter(cfg *config.Rate, id identity, ln, route string, deps limiterDeps) (*rateLimiter, error) {
	labels := prometheus.Labels{"listener": ln, "route": route, "limit": string(kindRate)}
	key, err := keyFunc(cfg.Key, id)
	if err != nil {
		return nil, err
	}
	name := limiterName(ln, route, kindRate)
	rc := httplimit.RateConfig{
		Key:     key,
		Rate:    cfg.Rate,
		Burst:   cfg.Burst,
		Delay:   cfg.Limit().Delay,
		Shadow:  cfg.DryRun,
		Status:  cfg.Status,
		Headers: rateHeaders(cfg.Headers),
		Logger:  deps.log,
		Name:    name,
	}
	switch cfg.Key {
	case config.KeyClientIP, "":
		rc.LimitFor = cidrLookup(cfg.Overrides)
	case config.KeyTargetHost:
		if rc.LimitFor, err = targetLookup(cfg.Overrides); err != nil {
			return nil, fmt.Errorf("proxy: %s: %w", name, err)
		}
	default:
		rc.Overrides = cfg.Overrides
	}
	r := &rateLimiter{cfg: *cfg, id: id, idle: make(chan struct{})}
	cs, err := rateStore(deps.cluster, name, func(k string) string { return k }, labels)
	if err != nil {
		return nil, err
	}
	if cs != nil { // a nil *clusterRateStore must not become a non-nil Store
		rc.Store, r.store, r.redis = cs, cs, cs.metrics
	}
	if r.lim, err = httplimit.NewRate(rc); err != nil {
		r.closeStore()
		return nil, fmt.Errorf("proxy: %s: %w", name, err)
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
func (r *rateLimiter) sameAs(cfg *config.Rate, id identity) bool {
	return reflect.DeepEqual(&r.cfg, cfg) && sameIdentity(r.id, id)
}

// wrap returns next behind the rate. The exchange is counted as inside the
// rate until it ends, so that a retired rate's Store stays open for the
// requests still delayed by it.
func (r *rateLimiter) wrap(next http.Handler) http.Handler {
	inner := r.lim.Wrap(next)
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
	return newRateLimiter(cfg, b.id, b.lc.Name, route, b.deps)
}

// findRate returns t's rate for route ("" for the listener's), or nil.
func (t *routeTable) findRate(route string) *rateLimiter {
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
func (t *routeTable) rates() []*rateLimiter {
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
func (t *routeTable) ownsRate(r *rateLimiter) bool {
	for _, x := range t.rates() {
		if x == r {
			return true
		}
	}
	return false
}

// closeNewRates closes the rates of a table that failed to build or was
// discarded, and that are not borrowed from old.
func (t *routeTable) closeNewRates(old *routeTable) {
	for _, r := range t.rates() {
		if !old.ownsRate(r) {
			r.close()
		}
	}
}

// retireRates retires the rates of old that t (nil: none) no longer uses.
func (s *Server) retireRates(t, old *routeTable) {
	for _, r := range old.rates() {
		if !t.ownsRate(r) {
			s.retireRate(r)
		}
	}
}

// retireRate closes a rate a reload replaced once the exchanges that went
// through it have ended, or the server stops.
func (s *Server) retireRate(r *rateLimiter) {
	s.retired.Add(1)
	idle := r.retire()
	go func() {
		defer s.retired.Done()
		defer r.close()
		select {
		case <-idle:
		case <-s.base.Done():
		}
	}()
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

// A clusterRateStore is a rate's Store with the collector of its Redis
// metrics.
type clusterRateStore[K comparable] struct {
	*redisstore.RateStore[K]
	metrics prometheus.Collector
}

// rateStore returns a new RateStore for the rate named name, whose Redis
// keys start with the cluster prefix, "rate:" and that name, so that equal
// rates of every node count together and different rates apart. Nil c
// means no store (a nil result).
func rateStore[K comparable](c *cluster, name string, keyString func(K) string, labels prometheus.Labels) (*clusterRateStore[K], error) {
	if c == nil {
		return nil, nil
	}
	policy, err := redisstore.ParsePolicy(string(c.cfg.OnError))
	if err != nil {
		return nil, err
	}
	s, err := redisstore.NewRate(redisstore.RateConfig{
		Client:        c.client,
		Prefix:        c.cfg.Prefix + "rate:" + name + ":",
		Timeout:       c.cfg.Timeout,
		OnError:       policy,
		NodeShare:     c.cfg.NodeShare,
		LocalShare:    c.cfg.LocalShare,
		FlushInterval: c.cfg.FlushInterval,
		Logger:        c.log,
	}, keyString)
	if err != nil {
		return nil, fmt.Errorf("proxy: cluster rate store %s: %w", name, err)
	}
	return &clusterRateStore[K]{RateStore: s, metrics: newRateStoreCollector(s, labels)}, nil
}

// connRateStore returns the Store of the accept-time rate kind (conn_rate or
// handshake_rate) of the listener named name, or nil when there is no
// cluster or the accept-time limits stay local.
func (c *cluster) connRateStore(name string, kind limitKind) (*clusterRateStore[clientkey.Key], error) {
	if c == nil || c.cfg.LocalConnectionCaps {
		return nil, nil
	}
	labels := prometheus.Labels{"listener": name, "route": "", "limit": string(kind)}
	return rateStore(c, string(kind)+"/"+name, clientkey.Key.String, labels)
}

// rateStoreCollector exports a RateStore's Redis figures under the names
// of the concurrency stores' (calls, errors, latency, fallbacks, breaker),
// a decision on Redis being an "acquire" and a flush a "sync", and the fast
// path's admissions as portcullis_redisstore_local_decisions_total.
type rateStoreCollector struct {
	common *redisprom.Collector
	local  *prometheus.Desc
	src    interface{ Stats() redisstore.RateStats }
}

func newRateStoreCollector(s interface{ Stats() redisstore.RateStats }, labels prometheus.Labels) *rateStoreCollector {
	return &rateStoreCollector{
		common: redisprom.NewCollector(rateStats{s}, "", labels),
		local: prometheus.NewDesc("portcullis_redisstore_local_decisions_total",
			"Rate admissions made on the node's local fast path (cluster.local_share), without a round trip.", nil, labels),
		src: s,
	}
}

func (c *rateStoreCollector) Describe(ch chan<- *prometheus.Desc) {
	c.common.Describe(ch)
	ch <- c.local
}

func (c *rateStoreCollector) Collect(ch chan<- prometheus.Metric) {
	c.common.Collect(ch)
	ch <- prometheus.MustNewConstMetric(c.local, prometheus.CounterValue, float64(c.src.Stats().Local))
}

// rateStats shows a RateStore's figures as a concurrency Store's.
type rateStats struct {
	s interface{ Stats() redisstore.RateStats }
}

func (r rateStats) Stats() redisstore.Stats {
	st := r.s.Stats()
	return redisstore.Stats{
		Acquire: st.Reserve, Sync: st.Flush, Latency: st.Latency,
		Fallbacks: st.Fallbacks, FallbackRefusals: st.FallbackRefusals, Unavailable: st.Unavailable,
		Cached: st.Cached, Breaker: st.Breaker, BreakerOpens: st.BreakerOpens, Keys: st.Keys,
	}
}

// collectorList is several collectors as one.
type collectorList []prometheus.Collector

func (l collectorList) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range l {
		c.Describe(ch)
	}
}

func (l collectorList) Collect(ch chan<- prometheus.Metric) {
	for _, c := range l {
		c.Collect(ch)
	}
}

// RateSnapshot is one rate's state, as /debug/limits serves it: its limit,
// its totals and its busiest keys, the furthest ahead of their rate first.
type RateSnapshot struct {
	// Limit is the rate as nginx writes it ("10r/s burst=20 delay=5").
	Limit  string `json:"limit"`
	Key    string `json:"key,omitempty"`
	DryRun bool   `json:"dry_run,omitempty"`
	// Totals count the decisions since the rate was built (a reload that
	// keeps it keeps them).
	Totals rate.Totals       `json:"totals"`
	Busy   []RateKeySnapshot `json:"busy"`
}

// RateKeySnapshot is one key whose rate state is not fresh.
type RateKeySnapshot struct {
	Key string `json:"key"`
	// AheadSeconds is how far the key is ahead of its rate: the time until
	// its whole burst is available again.
	AheadSeconds float64 `json:"ahead_seconds"`
	// Remaining is how many more requests of the key would be admitted now.
	Remaining int `json:"remaining"`
}

func rateSnapshotOf(r *rateLimiter) *RateSnapshot {
	if r == nil {
		return nil
	}
	s := r.lim.Snapshot(snapshotTop)
	return &RateSnapshot{
		Limit:  r.cfg.Limit().String(),
		Key:    string(r.cfg.Key),
		DryRun: r.cfg.DryRun,
		Totals: s.Totals,
		Busy:   rateKeys(s.Keys, func(k string) string { return k }),
	}
}

func rateKeys[K comparable](keys []rate.KeyStats[K], name func(K) string) []RateKeySnapshot {
	out := make([]RateKeySnapshot, 0, len(keys))
	for _, k := range keys {
		out = append(out, RateKeySnapshot{Key: name(k.Key), AheadSeconds: k.Ahead.Seconds(), Remaining: k.Remaining})
	}
	return out
}

func clientRateSnapshot(lim rate.Limit, s rate.Snapshot[clientkey.Key]) *RateSnapshot {
	return &RateSnapshot{Limit: lim.String(), Totals: s.Totals, Busy: rateKeys(s.Keys, clientkey.Key.String)}
}

// connRateStore gives cc, the connection caps of f's listener, the cluster
// Store of its conn_rate, if it has one and the cluster counts accept-time
// limits.
func (f *front) connRateStore(cc *connlimit.Config, cl *cluster) error {
	if f.cfg.ConnRate == nil {
		return nil
	}
	rs, err := cl.connRateStore(f.cfg.Name, kindConnRate)
	if err != nil {
		return fmt.Errorf("proxy: listener %s: %w", f.cfg.Name, err)
	}
	if rs != nil { // a nil *clusterRateStore must not become a non-nil Store
		cc.ConnRateStore, f.rates = rs, rs
	}
	return nil
}

// withConnRateStats adds the metrics of f's conn_rate, and of its cluster
// Store (store, nil without), to stats.
func (f *front) withConnRateStats(stats prometheus.Collector, store rate.Store[clientkey.Key]) prometheus.Collector {
	if f.cfg.ConnRate == nil {
		return stats
	}
	labels := prometheus.Labels{"listener": f.cfg.Name, "route": "", "limit": string(kindConnRate)}
	out := collectorList{stats, promlimit.NewRateCollector(connRateTotals{f.conns}, promlimit.Opts{Subsystem: "rate", ConstLabels: labels})}
	if cs, ok := store.(*clusterRateStore[clientkey.Key]); ok {
		out = append(out, cs.metrics)
	}
	return out
}

// connRateTotals reads the totals of a listener's conn_rate.
type connRateTotals struct{ l *connlimit.Listener }

func (c connRateTotals) Totals() rate.Totals { return c.l.RateTotals() }

// rateSnapshots adds to ls the state of f's accept-time rate (conn_rate or
// handshake_rate), if it has one.
func (f *front) rateSnapshots(ls *ListenerSnapshot) {
	switch {
	case f.h3 != nil && f.h3.rates.handshake != nil:
		ls.HandshakeRate = clientRateSnapshot(f.cfg.HandshakeRate.Limit(), f.h3.rates.handshake.Snapshot(snapshotTop))
	case f.conns != nil && f.cfg.ConnRate != nil:
		ls.ConnRate = clientRateSnapshot(f.cfg.ConnRate.Limit(), f.conns.RateSnapshot(snapshotTop))
	}
}

// h3Rates is the handshake_rate of an http3 listener: a limiter that
// quicadmit asks once a client's address is proven, and its cluster Store.
type h3Rates struct {
	handshake *rate.Limiter[clientkey.Key] // nil without handshake_rate
	store     *clusterRateStore[clientkey.Key]
	total     prometheus.Collector
}

// build makes the handshake_rate of f's listener, if it has one. On error
// nothing is left open.
func (r *h3Rates) build(f *front, cl *cluster) error {
	lc := &f.cfg
	if lc.HandshakeRate == nil {
		return nil
	}
	store, err := cl.connRateStore(lc.Name, kindHandshakeRate)
	if err != nil {
		return err
	}
	rc := rate.Config[clientkey.Key]{
		Rate:  lc.HandshakeRate.Rate,
		Burst: lc.HandshakeRate.Burst,
		Delay: rate.NoDelay, // a handshake is admitted or refused, never delayed
		Hash:  clientkey.Key.Hash,
		Name:  limiterName(lc.Name, "", kindHandshakeRate),
	}
	if store != nil { // a nil *clusterRateStore must not become a non-nil Store
		rc.Store = store
	}
	lim, err := rate.New(rc)
	if err != nil {
		if store != nil {
			_ = store.Close()
		}
		return err
	}
	r.handshake, r.store = lim, store
	labels := prometheus.Labels{"listener": lc.Name, "route": "", "limit": string(kindHandshakeRate)}
	r.total = promlimit.NewRateCollector(lim, promlimit.Opts{Subsystem: "rate", ConstLabels: labels})
	return nil
}

// withStats adds the metrics of the handshake_rate, if any, to stats.
func (r *h3Rates) withStats(stats prometheus.Collector) prometheus.Collector {
	if r.handshake == nil {
		return stats
	}
	out := collectorList{stats, r.total}
	if r.store != nil {
		out = append(out, r.store.metrics)
	}
	return out
}

// close stops the limiter, then its Store.
func (r *h3Rates) close() {
	if r.handshake != nil {
		_ = r.handshake.Close()
	}
	if r.store != nil {
		_ = r.store.Close()
	}
}
