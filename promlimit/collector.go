package promlimit

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a07d1050/portcullis/limit"
)

// Default metric name parts used where [Opts] leaves them empty.
const (
	DefaultNamespace = "portcullis"
	DefaultSubsystem = "limit"
)

// TotalsSource is what a [Collector] reads at every scrape. *limit.Limiter[K]
// implements it for any K, and so do the limiters built on it (httplimit's).
// Totals is called from the scraping goroutine and must be safe for concurrent
// use.
type TotalsSource interface {
	Totals() limit.Totals
}

// TotalsFunc adapts a function to a [TotalsSource].
type TotalsFunc func() limit.Totals

// Totals calls f.
func (f TotalsFunc) Totals() limit.Totals { return f() }

// Opts names the metrics of a [Collector] or [WaitHistogram]. The zero Opts
// is valid: names start with "portcullis_limit_" and carry no label.
type Opts struct {
	// Namespace is the first part of every metric name. Empty means
	// DefaultNamespace ("portcullis").
	Namespace string

	// Subsystem is the second part of every metric name, typically what the
	// limiter counts ("connections", "exchanges"). Empty means
	// DefaultSubsystem ("limit").
	Subsystem string

	// ConstLabels are attached to every metric, to tell apart limiters whose
	// metrics share a registry (listener="web", route="api"). Collectors
	// registered in one registry under the same names must differ in the
	// value of at least one of these labels. Nil means no label. The map is
	// copied.
	ConstLabels prometheus.Labels
}

func (o Opts) withDefaults() Opts {
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.Subsystem == "" {
		o.Subsystem = DefaultSubsystem
	}
	labels := make(prometheus.Labels, len(o.ConstLabels))
	for k, v := range o.ConstLabels {
		labels[k] = v
	}
	o.ConstLabels = labels
	return o
}

// metric is one figure of limit.Totals and how it is exported.
type metric struct {
	name  string
	help  string
	kind  prometheus.ValueType
	value func(t *limit.Totals) float64
}

var metrics = [...]metric{
	{"granted_total", "Permits granted, after waiting or not.", prometheus.CounterValue,
		func(t *limit.Totals) float64 { return float64(t.Granted) }},
	{"refused_total", "Requests refused because the key or the whole limiter was at its limit and could not wait.", prometheus.CounterValue,
		func(t *limit.Totals) float64 { return float64(t.Refused) }},
	{"shadow_refused_total", "Requests granted in shadow mode that the limit would have refused.", prometheus.CounterValue,
		func(t *limit.Totals) float64 { return float64(t.ShadowRefused) }},
	{"queue_full_total", "Requests refused because the key's wait queue was full.", prometheus.CounterValue,
		func(t *limit.Totals) float64 { return float64(t.QueueFull) }},
	{"queue_timeouts_total", "Requests refused after waiting the queue timeout.", prometheus.CounterValue,
		func(t *limit.Totals) float64 { return float64(t.QueueTimeouts) }},
	{"abandoned_total", "Waiters whose client went away before they got a permit.", prometheus.CounterValue,
		func(t *limit.Totals) float64 { return float64(t.Abandoned) }},
	{"reclaimed_total", "Permits taken back because they were held too long.", prometheus.CounterValue,
		func(t *limit.Totals) float64 { return float64(t.Reclaimed) }},
	{"store_failed_total", "Requests refused because the shared store failed.", prometheus.CounterValue,
		func(t *limit.Totals) float64 { return float64(t.StoreFailed) }},
	{"in_use", "Permits held now.", prometheus.GaugeValue,
		func(t *limit.Totals) float64 { return float64(t.InUse) }},
	{"waiting", "Requests waiting in a queue now.", prometheus.GaugeValue,
		func(t *limit.Totals) float64 { return float64(t.Waiting) }},
	{"keys", "Keys holding or waiting for a permit now.", prometheus.GaugeValue,
		func(t *limit.Totals) float64 { return float64(t.Keys) }},
}

// Collector is a prometheus.Collector that reports one limiter's totals.
// It keeps no state of its own: every scrape calls the source's Totals once.
type Collector struct {
	src   TotalsSource
	descs [len(metrics)]*prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a Collector reporting src under the names of opts:
// <namespace>_<subsystem>_granted_total, _refused_total,
// _shadow_refused_total, _queue_full_total, _queue_timeouts_total,
// _abandoned_total, _reclaimed_total and _store_failed_total as counters;
// _in_use, _waiting and _keys as gauges. It panics if src is nil.
func NewCollector(src TotalsSource, opts Opts) *Collector {
	if src == nil {
		panic("promlimit: NewCollector with a nil source")
	}
	opts = opts.withDefaults()
	c := &Collector{src: src}
	for i, m := range metrics {
		c.descs[i] = prometheus.NewDesc(
			prometheus.BuildFQName(opts.Namespace, opts.Subsystem, m.name),
			m.help, nil, opts.ConstLabels)
	}
	return c
}

// Describe sends the descriptors of every metric of c.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

// Collect reads the source's totals once and sends every metric of c.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	t := c.src.Totals()
	for i, m := range metrics {
		ch <- prometheus.MustNewConstMetric(c.descs[i], m.kind, m.value(&t))
	}
}
