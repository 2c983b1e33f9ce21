package daemon

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a07d1050/portcullis/internal/forward"
	"github.com/seed-a07d1050/portcullis/internal/proxyauth"
)

// forwardCollector exports a forward proxy's tunnels and refusals.
type forwardCollector struct {
	p                      *forward.Proxy
	open, opened, refusals *prometheus.Desc
}

func newForwardCollector(p *forward.Proxy, listener string) *forwardCollector {
	labels := prometheus.Labels{"listener": listener}
	return &forwardCollector{
		p:        p,
		open:     prometheus.NewDesc("portcullis_forward_tunnels_open", "CONNECT tunnels open now.", nil, labels),
		opened:   prometheus.NewDesc("portcullis_forward_tunnels_total", "CONNECT tunnels opened.", nil, labels),
		refusals: prometheus.NewDesc("portcullis_forward_refused_total", "Requests the forward proxy did not carry out, by reason: denied (403, the destination policy), bad_request (400, 503 or 508: a bad target, an origin-form request, a loop, the proxy stopping), target_failed (502 or 504).", []string{"reason"}, labels),
	}
}

func (c *forwardCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.open
	ch <- c.opened
	ch <- c.refusals
}

func (c *forwardCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.p.Stats()
	ch <- prometheus.MustNewConstMetric(c.open, prometheus.GaugeValue, float64(s.TunnelsOpen))
	ch <- prometheus.MustNewConstMetric(c.opened, prometheus.CounterValue, float64(s.TunnelsOpened))
	ch <- prometheus.MustNewConstMetric(c.refusals, prometheus.CounterValue, float64(s.Denied), "denied")
	ch <- prometheus.MustNewConstMetric(c.refusals, prometheus.CounterValue, float64(s.Refused), "bad_request")
	ch <- prometheus.MustNewConstMetric(c.refusals, prometheus.CounterValue, float64(s.TargetFailures), "target_failed")
}

// authCollector exports an Authenticator's outcomes.
type authCollector struct {
	a                                        *proxyauth.Authenticator
	requests, checks, users, cached, reloads *prometheus.Desc
}

func newAuthCollector(a *proxyauth.Authenticator, listener string) *authCollector {
	labels := prometheus.Labels{"listener": listener}
	return &authCollector{
		a:        a,
		requests: prometheus.NewDesc("portcullis_auth_requests_total", "Requests by authentication outcome: ok (checked by bcrypt), cached (credentials verified before), no_credentials (407 or 401), failed (wrong or malformed credentials: 407 or 401, counted against the client), over_budget (429: too many failures), busy (503: no check slot in time).", []string{"outcome"}, labels),
		checks:   prometheus.NewDesc("portcullis_auth_bcrypt_checks_total", "bcrypt comparisons run.", nil, labels),
		users:    prometheus.NewDesc("portcullis_auth_users", "Users in the htpasswd file in effect.", nil, labels),
		cached:   prometheus.NewDesc("portcullis_auth_cached_credentials", "Verified credentials remembered.", nil, labels),
		reloads:  prometheus.NewDesc("portcullis_auth_reloads_total", "Readings of the htpasswd file on reload, by result: ok, or error (the users before were kept and the reload failed).", []string{"result"}, labels),
	}
}

func (c *authCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.requests, c.checks, c.users, c.cached, c.reloads} {
		ch <- d
	}
}

func (c *authCollector) Collect(ch chan<- prometheus.Metric) {
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
