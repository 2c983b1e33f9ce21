package promlimit

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a07d1050/portcullis/rate"
)

// RateTotalsSource is what a [RateCollector] reads at every scrape.
// *rate.Limiter[K] implements it for any K, and so does
// httplimit.RateLimiter. Totals must be safe for concurrent use.
type RateTotalsSource interface {
	Totals() rate.Totals
}

type rateMetric struct {
	name  string
	help  string
	kind  prometheus.ValueType
	value func(t *rate.Totals) float64
}

var rateMetrics = [...]rateMetric{
	{"admitted_total", "Requests admitted at once.", prometheus.CounterValue,
		func(t *rate.Totals) float64 { return float64(t.Admitted) }},
	{"delayed_total", "Requests admitted after a delay that spaced them out at the rate.", prometheus.CounterValue,
		func(t *rate.Totals) float64 { return float64(t.Delayed) }},
	{"refused_total", "Requests refused because their key was over its rate and burst.", prometheus.CounterValue,
		func(t *rate.Totals) float64 { return float64(t.Refused) }},
	{"shadow_delayed_total", "Requests let through at once in shadow mode that the rate would have delayed.", prometheus.CounterValue,
		func(t *rate.Totals) float64 { return float64(t.ShadowDelayed) }},
	{"shadow_refused_total", "Requests let through in shadow mode that the rate would have refused.", prometheus.CounterValue,
		func(t *rate.Totals) float64 { return float64(t.ShadowRefused) }},
	{"cancelled_total", "Delayed requests given back because their client left before they proceeded.", prometheus.CounterValue,
		func(t *rate.Totals) float64 { return float64(t.Cancelled) }},
	{"store_failed_total", "Requests refused because the shared store failed.", prometheus.CounterValue,
		func(t *rate.Totals) float64 { return float64(t.StoreFailed) }},
	{"keys", "Keys whose rate state is not fresh now.", prometheus.GaugeValue,
		func(t *rate.Totals) float64 { return float64(t.Keys) }},
	{"delaying", "Requests being delayed now, waiting for their turn at the rate.", prometheus.GaugeValue,
		func(t *rate.Totals) float64 { return float64(t.Delaying) }},
}

// RateCollector is a prometheus.Collector that reports one rate limiter's
// totals. It keeps no state of its own: every scrape calls the source's
// Totals once.
type RateCollector struct {
	src   RateTotalsSource
	descs [len(rateMetrics)]*prometheus.Desc
}

var _ prometheus.Collector = (*RateCollector)(nil)

// NewRateCollector returns a RateCollector reporting src under the names
// of opts (whose empty Subsystem means "limit", as for [NewCollector]; a
// rate limiter usually gets "rate"): <namespace>_<subsystem>_admitted_total,
// _delayed_total, _refused_total, _shadow_delayed_total,
// _shadow_refused_total, _cancelled_total and _store_failed_total as
// counters, _keys and _delaying as gauges. It panics if src is nil.
func NewRateCollector(src RateTotalsSource, opts Opts) *RateCollector {
	if src == nil {
		panic("promlimit: NewRateCollector with a nil source")
	}
	opts = opts.withDefaults()
	c := &RateCollector{src: src}
	for i, m := range rateMetrics {
		c.descs[i] = prometheus.NewDesc(prometheus.BuildFQName(opts.Namespace, opts.Subsystem, m.name), m.help, nil, opts.ConstLabels)
	}
	return c
}

// Describe sends the descriptors of every metric of c.
func (c *RateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

// Collect reads the source's totals once and sends every metric of c.
func (c *RateCollector) Collect(ch chan<- prometheus.Metric) {
	t := c.src.Totals()
	for i, m := range rateMetrics {
		ch <- prometheus.MustNewConstMetric(c.descs[i], m.kind, m.value(&t))
	}
}
