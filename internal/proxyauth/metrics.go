package proxyauth

import "github.com/prometheus/client_golang/prometheus"

// Collector exports an Authenticator's outcomes to Prometheus:
// portcullis_auth_requests_total{outcome}, portcullis_auth_bcrypt_checks_total,
// portcullis_auth_users, portcullis_auth_cached_credentials and
// portcullis_auth_reloads_total{result}. It reads [Authenticator.Stats] at
// each scrape and holds no state of its own.
type Collector struct {
	a                                        *Authenticator
	requests, checks, users, cached, reloads *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns the Collector of a, each metric carrying
// constLabels (the daemon gives the listener's name). a must not be nil.
func NewCollector(a *Authenticator, constLabels prometheus.Labels) *Collector {
	if a == nil {
		panic("proxyauth: NewCollector with a nil Authenticator")
	}
	return &Collector{
		a:        a,
		requests: prometheus.NewDesc("portcullis_auth_requests_total", "Requests by authentication outcome: ok (checked by bcrypt), cached (credentials verified before), no_credentials (407 or 401), failed (wrong or malformed credentials: 407 or 401, counted against the client), over_budget (429: too many failures), busy (503: no check slot in time).", []string{"outcome"}, constLabels),
		checks:   prometheus.NewDesc("portcullis_auth_bcrypt_checks_total", "bcrypt comparisons run.", nil, constLabels),
		users:    prometheus.NewDesc("portcullis_auth_users", "Users in the htpasswd file in effect.", nil, constLabels),
		cached:   prometheus.NewDesc("portcullis_auth_cached_credentials", "Verified credentials remembered.", nil, constLabels),
		reloads:  prometheus.NewDesc("portcullis_auth_reloads_total", "Readings of the htpasswd file on reload, by result: ok, or error (the users before were kept and the reload failed).", []string{"result"}, constLabels),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.requests, c.checks, c.users, c.cached, c.reloads} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.a.Stats()
	for _, x := range []struct {
		outcome string
		n       uint64
	}{
		{"ok", s.Verified}, {"cached", s.CacheHits},
		{"no_credentials", s.NoCredentials}, {"failed", s.Failed},
		{"over_budget", s.OverBudget}, {"busy", s.Busy},
	} {
		ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(x.n), x.outcome)
	}
	ch <- prometheus.MustNewConstMetric(c.checks, prometheus.CounterValue, float64(s.Checks))
	ch <- prometheus.MustNewConstMetric(c.users, prometheus.GaugeValue, float64(s.Users))
	ch <- prometheus.MustNewConstMetric(c.cached, prometheus.GaugeValue, float64(s.Cached))
	ch <- prometheus.MustNewConstMetric(c.reloads, prometheus.CounterValue, float64(s.Reloads), "ok")
	ch <- prometheus.MustNewConstMetric(c.reloads, prometheus.CounterValue, float64(s.ReloadErrors), "error")
}
