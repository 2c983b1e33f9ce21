package proxy

import (
	"github.com/prometheus/client_golang/prometheus"

	uptransport "github.com/seed-a07d1050/portcullis/internal/upstream"
)

// upstreamCollector exports the counts of the transport every route shares:
// how its connections to upstreams were opened, reused and dropped. A
// backend that writes on idle connections shows in
// portcullis_upstream_unsolicited_total.
type upstreamCollector struct{ t *uptransport.Transport }

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
	s := c.t.Stats()
	ch <- prometheus.MustNewConstMetric(upstreamDialsDesc, prometheus.CounterValue, float64(s.Dials))
	ch <- prometheus.MustNewConstMetric(upstreamRetriesDesc, prometheus.CounterValue, float64(s.Retries))
	ch <- prometheus.MustNewConstMetric(upstreamIdleClosedDesc, prometheus.CounterValue, float64(s.IdleClosed))
	ch <- prometheus.MustNewConstMetric(upstreamUnsolicitedDesc, prometheus.CounterValue, float64(s.Unsolicited))
	ch <- prometheus.MustNewConstMetric(upstreamIdleDesc, prometheus.GaugeValue, float64(s.Idle))
}
