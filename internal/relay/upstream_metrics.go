package relay

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a07d1050/portcullis/internal/evloop"
	uptransport "github.com/seed-a07d1050/portcullis/internal/upstream"
)

// upstreamCollector exports the counts of the transport every route shares:
// how its connections to upstreams were opened, reused and dropped. A
// backend that writes on idle connections shows in
// portcullis_upstream_unsolicited_total.
type upstreamCollector struct {
	t     *uptransport.Transport
	loops *evloop.Counts // the event loops' upstream connections, counted in the same series
}

// newUpstreamCollector returns the collector of t's connection counts,
// with those of the event loops' upstream connections (loops; nil: none)
// added to the same series.
func NewCollector(t *uptransport.Transport, loops *evloop.Counts) prometheus.Collector {
	return upstreamCollector{t: t, loops: loops}
}

var (
	upstreamDialsDesc = prometheus.NewDesc("portcullis_upstream_dials_total",
		"Connections opened to upstreams by the daemon's HTTP/1.1 client.", nil, nil)
	upstreamRetriesDesc = prometheus.NewDesc("portcullis_upstream_retries_total",
		"Requests sent again on a new connection after a reused one turned out closed.", nil, nil)
	upstreamIdleClosedDesc = prometheus.NewDesc("portcullis_upstream_idle_closed_total",
		"Idle upstream connections found closed, reset or timed out (408) when a request took them.", nil, nil)
	upstreamUnsolicitedDesc = prometheus.NewDesc("portcullis_upstream_unsolicited_total",
		"Upstream connections dropped because bytes arrived that no request asked for.", nil, nil)
	upstreamIdleDesc = prometheus.NewDesc("portcullis_upstream_idle_connections",
		"Idle upstream connections kept for reuse now.", nil, nil)
)

func (c upstreamCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{upstreamDialsDesc, upstreamRetriesDesc, upstreamIdleClosedDesc, upstreamUnsolicitedDesc, upstreamIdleDesc} {
		ch <- d
	}
}

func (c upstreamCollector) Collect(ch chan<- prometheus.Metric) {
	s, l := c.t.Stats(), c.loops
	ch <- prometheus.MustNewConstMetric(upstreamDialsDesc, prometheus.CounterValue, float64(s.Dials+l.Dials.Load()))
	ch <- prometheus.MustNewConstMetric(upstreamRetriesDesc, prometheus.CounterValue, float64(s.Retries+l.Retries.Load()))
	ch <- prometheus.MustNewConstMetric(upstreamIdleClosedDesc, prometheus.CounterValue, float64(s.IdleClosed+l.IdleClosed.Load()))
	ch <- prometheus.MustNewConstMetric(upstreamUnsolicitedDesc, prometheus.CounterValue, float64(s.Unsolicited+l.Unsolicited.Load()))
	ch <- prometheus.MustNewConstMetric(upstreamIdleDesc, prometheus.GaugeValue, float64(int64(s.Idle)+l.Idle.Load()))
}
