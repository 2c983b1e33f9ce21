package promlimit

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a07d1050/portcullis/connlimit"
)

// ConnStatsSource is what a [ConnCollector] reads at every scrape:
// *connlimit.Listener implements it. Stats must be safe for concurrent use.
type ConnStatsSource interface {
	Stats() connlimit.Stats
}

// ConnStatsFunc adapts a function to a [ConnStatsSource].
type ConnStatsFunc func() connlimit.Stats

// Stats calls f.
func (f ConnStatsFunc) Stats() connlimit.Stats { return f() }

// ConnCollector is a prometheus.Collector that reports the connection counts
// of one connlimit listener. It keeps no state: every scrape calls Stats once.
type ConnCollector struct {
	src                                     ConnStatsSource
	accepted, exempt, refused, acceptErrors *prometheus.Desc
	open, pending, synFiltered              *prometheus.Desc
}

var _ prometheus.Collector = (*ConnCollector)(nil)

// NewConnCollector returns a ConnCollector for src. With Opts.Subsystem
// empty the names start with "portcullis_connections_": accepted_total,
// exempt_total, refused_total (with a "reason" label: client_cap, level,
// client_rate, proxy_header_bad, proxy_header_slow, proxy_header_missing,
// store, shutdown, filtered), accept_errors_total as counters; open,
// pending and syn_filtered_keys as gauges.
// It panics if src is nil.
func NewConnCollector(src ConnStatsSource, opts Opts) *ConnCollector {
	if src == nil {
		panic("promlimit: NewConnCollector with a nil source")
	}
	if opts.Subsystem == "" {
		opts.Subsystem = "connections"
	}
	opts = opts.withDefaults()
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(opts.Namespace, opts.Subsystem, name), help, labels, opts.ConstLabels)
	}
	return &ConnCollector{
		src:          src,
		accepted:     desc("accepted_total", "Connections admitted and handed to the server, exempt ones included."),
		exempt:       desc("exempt_total", "Admitted connections that took no per-client slot (trusted peers, no address)."),
		refused:      desc("refused_total", "Connections closed at accept instead of admitted, by reason.", "reason"),
		acceptErrors: desc("accept_errors_total", "Temporary errors of the listening socket's accept."),
		open:         desc("open", "Admitted connections not yet closed."),
		pending:      desc("pending", "Connections being admitted (reading a PROXY header or waiting for the store)."),
		synFiltered:  desc("syn_filtered_keys", "Client keys at their cap whose connection attempts the kernel now drops (SYN filter)."),
	}
}

// Describe sends the descriptors of every metric of c.
func (c *ConnCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.accepted, c.exempt, c.refused, c.acceptErrors, c.open, c.pending, c.synFiltered} {
		ch <- d
	}
}

// Collect reads the source's stats once and sends every metric of c.
func (c *ConnCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(c.accepted, s.Accepted)
	counter(c.exempt, s.Exempt)
	counter(c.acceptErrors, s.AcceptErrors)
	r := s.Refused
	for _, x := range []struct {
		reason string
		n      uint64
	}{
		{"client_cap", r.ClientCap}, {"level", r.Level}, {"client_rate", r.ClientRate},
		{"proxy_header_bad", r.ProxyHeaderBad}, {"proxy_header_slow", r.ProxyHeaderSlow},
		{"proxy_header_missing", r.ProxyHeaderMissing}, {"store", r.Store}, {"shutdown", r.Shutdown}, {"filtered", r.Filtered},
	} {
		counter(c.refused, x.n, x.reason)
	}
	ch <- prometheus.MustNewConstMetric(c.open, prometheus.GaugeValue, float64(s.Open))
	ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(s.Pending))
	ch <- prometheus.MustNewConstMetric(c.synFiltered, prometheus.GaugeValue, float64(s.SYNFiltered))
}
