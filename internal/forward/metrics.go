package forward

import "github.com/prometheus/client_golang/prometheus"

// Collector exports a Proxy's tunnels and refusals to Prometheus:
// portcullis_forward_tunnels_open, portcullis_forward_tunnels_total and
// portcullis_forward_refused_total{reason}. It reads [Proxy.Stats] at each
// scrape and holds no state of its own.
type Collector struct {
	p                      *Proxy
	open, opened, refusals *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns the Collector of p, each metric carrying
// constLabels (the daemon gives the listener's name). p must not be nil.
func NewCollector(p *Proxy, constLabels prometheus.Labels) *Collector {
	if p == nil {
		panic("forward: NewCollector with a nil Proxy")
	}
	return &Collector{
		p:        p,
		open:     prometheus.NewDesc("portcullis_forward_tunnels_open", "CONNECT tunnels open now.", nil, constLabels),
		opened:   prometheus.NewDesc("portcullis_forward_tunnels_total", "CONNECT tunnels opened.", nil, constLabels),
		refusals: prometheus.NewDesc("portcullis_forward_refused_total", "Requests the forward proxy did not carry out, by reason: denied (403, the destination policy), bad_request (400, 503 or 508: a bad target, an origin-form request, a loop, the proxy stopping), target_failed (502 or 504).", []string{"reason"}, constLabels),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.open
	ch <- c.opened
	ch <- c.refusals
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.p.Stats()
	ch <- prometheus.MustNewConstMetric(c.open, prometheus.GaugeValue, float64(s.TunnelsOpen))
	ch <- prometheus.MustNewConstMetric(c.opened, prometheus.CounterValue, float64(s.TunnelsOpened))
	ch <- prometheus.MustNewConstMetric(c.refusals, prometheus.CounterValue, float64(s.Denied), "denied")
	ch <- prometheus.MustNewConstMetric(c.refusals, prometheus.CounterValue, float64(s.Refused), "bad_request")
	ch <- prometheus.MustNewConstMetric(c.refusals, prometheus.CounterValue, float64(s.TargetFailures), "target_failed")
}
