package intercept

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Stats are the counts of an [Interceptor] since it was made, and of its
// leaves.
type Stats struct {
	Leaves LeafStats

	Connects          uint64 // CONNECTs taken over for interception (answered 200)
	Tunnelled         uint64 // CONNECTs left as plain tunnels by the rules or the CA's name constraints
	Sessions          uint64 // handshakes completed: sessions whose requests are served
	HandshakeFailures uint64 // clients that failed or abandoned their handshake (a client rejecting the certificate among them)
	NotTLS            uint64 // clients that sent something other than a TLS ClientHello
	Requests          uint64 // requests served inside sessions, misdirected ones included
	Misdirected       uint64 // requests answered 421: their host was not the session's
	Open              int    // sessions open now, handshakes under way included
}

// Stats returns the counts of i.
func (i *Interceptor) Stats() Stats {
	c := &i.stats
	return Stats{
		Leaves:            i.leaves.Stats(),
		Connects:          c.connects.Load(),
		Tunnelled:         c.tunnelled.Load(),
		Sessions:          c.sessions.Load(),
		HandshakeFailures: c.handshakeFailures.Load(),
		NotTLS:            c.notTLS.Load(),
		Requests:          c.requests.Load(),
		Misdirected:       c.misdirected.Load(),
		Open:              int(i.open.Load()),
	}
}

// statMetric is one figure of the stats and how it is exported.
type statMetric struct {
	name, help string
	kind       prometheus.ValueType
	value      func(s *Stats, u *UpstreamStats) float64
}

var statMetrics = [...]statMetric{
	{"leaves_minted_total", "Leaf certificates minted and signed by the interception CA.", prometheus.CounterValue,
		func(s *Stats, _ *UpstreamStats) float64 { return float64(s.Leaves.Minted) }},
	{"leaves_cache_hits_total", "Handshakes served a leaf from the cache.", prometheus.CounterValue,
		func(s *Stats, _ *UpstreamStats) float64 { return float64(s.Leaves.Hits) }},
	{"leaves_shared_total", "Handshakes that waited for another handshake's minting of the same name.", prometheus.CounterValue,
		func(s *Stats, _ *UpstreamStats) float64 { return float64(s.Leaves.Shared) }},
	{"leaves_errors_total", "Handshakes that got no leaf: a bad name, a name outside the CA's constraints, an expired CA.", prometheus.CounterValue,
		func(s *Stats, _ *UpstreamStats) float64 { return float64(s.Leaves.Errors) }},
	{"leaves_evicted_total", "Leaves dropped from the full cache.", prometheus.CounterValue,
		func(s *Stats, _ *UpstreamStats) float64 { return float64(s.Leaves.Evicted) }},
	{"leaves_cached", "Leaves in the cache now.", prometheus.GaugeValue,
		func(s *Stats, _ *UpstreamStats) float64 { return float64(s.Leaves.Cached) }},
	{"connects_total", "CONNECTs taken over for interception.", prometheus.CounterValue,
		func(s *Stats, _ *UpstreamStats) float64 { return float64(s.Connects) }},
	{"tunnelled_total", "CONNECTs left as plain tunnels by the bypass rules or the CA's name constraints.", prometheus.CounterValue,
		func(s *Stats, _ *UpstreamStats) float64 { return float64(s.Tunnelled) }},
	{"sessions_total", "Intercepted TLS sessions whose handshake completed.", prometheus.CounterValue,
		func(s *Stats, _ *UpstreamStats) float64 { return float64(s.Sessions) }},
	{"sessions_open", "Intercepted sessions open now, handshakes under way included.", prometheus.GaugeValue,
		func(s *Stats, _ *UpstreamStats) float64 { return float64(s.Open) }},
	{"handshake_failures_total", "Clients that failed or abandoned the TLS handshake, those refusing the certificate among them.", prometheus.CounterValue,
		func(s *Stats, _ *UpstreamStats) float64 { return float64(s.HandshakeFailures) }},
	{"not_tls_total", "Clients that sent something other than TLS into an intercepted tunnel.", prometheus.CounterValue,
		func(s *Stats, _ *UpstreamStats) float64 { return float64(s.NotTLS) }},
	{"requests_total", "Requests served inside intercepted sessions.", prometheus.CounterValue,
		func(s *Stats, _ *UpstreamStats) float64 { return float64(s.Requests) }},
	{"misdirected_total", "Requests answered 421 because they named another host than their session's.", prometheus.CounterValue,
		func(s *Stats, _ *UpstreamStats) float64 { return float64(s.Misdirected) }},
	{"upstream_failures_total", "Requests answered 502 or 504 because of their target.", prometheus.CounterValue,
		func(_ *Stats, u *UpstreamStats) float64 { return float64(u.Failures) }},
	{"upstream_bad_certificates_total", "Requests answered 502 because the target's certificate was refused.", prometheus.CounterValue,
		func(_ *Stats, u *UpstreamStats) float64 { return float64(u.BadCertificates) }},
	{"upstream_unverified_sessions_total", "TLS sessions opened with targets whose certificate was not verified (insecure_skip_verify_upstream).", prometheus.CounterValue,
		func(_ *Stats, u *UpstreamStats) float64 { return float64(u.Unverified) }},
}

// A Collector is a prometheus.Collector reporting an [Interceptor] and its
// [Upstream] as portcullis_intercept_* metrics: leaves minted, cache hits,
// shared mintings, errors, evictions and the cache's size; CONNECTs
// intercepted and tunnelled, sessions, handshake failures, clients not
// speaking TLS, requests and misdirected requests; target failures and
// refused target certificates. It keeps no state: every scrape reads the
// counts once.
type Collector struct {
	i     *Interceptor
	u     *Upstream
	descs [len(statMetrics)]*prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns the Collector of i and u (nil: the upstream
// metrics are reported as zero), with constLabels on every metric (nil:
// none), to tell several interceptors apart (listener="egress"). It
// panics if i is nil.
func NewCollector(i *Interceptor, u *Upstream, constLabels prometheus.Labels) *Collector {
	if i == nil {
		panic("intercept: NewCollector with a nil Interceptor")
	}
	c := &Collector{i: i, u: u}
	for k, m := range statMetrics {
		c.descs[k] = prometheus.NewDesc(prometheus.BuildFQName("portcullis", "intercept", m.name), m.help, nil, constLabels)
	}
	return c
}

// Describe sends the descriptors of every metric of c.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

// Collect reads the counts once and sends every metric of c.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.i.Stats()
	var us UpstreamStats
	if c.u != nil {
		us = c.u.Stats()
	}
	for k, m := range statMetrics {
		ch <- prometheus.MustNewConstMetric(c.descs[k], m.kind, m.value(&s, &us))
	}
}
