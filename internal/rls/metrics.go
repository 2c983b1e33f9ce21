package rls

import (
	"sync"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The verdicts of a descriptor, the values of the verdict label.
const (
	verdictOK        = "ok"
	verdictDelayed   = "delayed"
	verdictOverLimit = "over_limit"
	verdictShadow    = "shadow_over_limit"
	verdictUnlimited = "unlimited"
	verdictGivenBack = "given_back"
)

var verdicts = [...]string{verdictOK, verdictDelayed, verdictOverLimit, verdictShadow, verdictUnlimited, verdictGivenBack}

// maxDetailed bounds the values one detailed_metric rule gets series for;
// the values beyond it count under the rule's "_other" series.
const maxDetailed = 100

// Metrics are the service's Prometheus metrics: one set for the process's
// life, labelled by domain and rule (never by a value a client chose,
// except for a detailed_metric rule, bounded to maxDetailed values). Each
// rule takes its series when its Config is bound, so that a decision
// counts without a label lookup.
type Metrics struct {
	requests    *prometheus.CounterVec // domain, code
	descriptors *prometheus.CounterVec // rule, verdict
	hits        *prometheus.CounterVec // rule, verdict
	unknownVec  *prometheus.CounterVec // domain
	invalid     prometheus.Counter
	replaced    prometheus.Counter
	duration    prometheus.Histogram
	delays      prometheus.Histogram
	loads       *prometheus.CounterVec // result
	rules       prometheus.Gauge
	loaded      prometheus.Gauge

	mu        sync.Mutex
	unknown   map[string]prometheus.Counter // domain -> series, for the bound Configs' domains
	overrides map[string]*ruleMetrics       // domain -> its limit overrides' series
}

// overrideSeries returns the series of the limit overrides of a
// configured domain: rule "<domain>._override".
func (m *Metrics) overrideSeries(domain string) *ruleMetrics {
	m.mu.Lock()
	defer m.mu.Unlock()
	if rm := m.overrides[domain]; rm != nil {
		return rm
	}
	if m.overrides == nil {
		m.overrides = make(map[string]*ruleMetrics)
	}
	rm := m.ruleSeries(domain + "._override")
	m.overrides[domain] = rm
	return rm
}

// ruleMetrics are one rule's series.
type ruleMetrics struct {
	m     *Metrics
	descs [len(verdicts)]prometheus.Counter
	hits  [len(verdicts)]prometheus.Counter

	mu       sync.Mutex
	detailed map[string]*ruleMetrics // value -> its series (detailed_metric)
}

// NewMetrics returns the service's metrics; register them with
// [Metrics.Register].
func NewMetrics() *Metrics {
	return &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portcullis_rls_requests_total",
			Help: "ShouldRateLimit calls answered, by domain (empty: not configured) and code: ok, over_limit, invalid (InvalidArgument), unavailable (the store could not decide), cancelled (Envoy gave up first).",
		}, []string{"domain", "code"}),
		descriptors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portcullis_rls_descriptors_total",
			Help: "Descriptors decided, by rule (its ID: the domain and each level's key_value, joined by dots; a detailed_metric rule adds _value) and verdict: ok, delayed, over_limit, shadow_over_limit (over, let through by shadow_mode), unlimited, given_back (negative hits).",
		}, []string{"rule", "verdict"}),
		hits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portcullis_rls_hits_total",
			Help: "The weight (hits_addend) of the descriptors decided, by rule and verdict, as portcullis_rls_descriptors_total.",
		}, []string{"rule", "verdict"}),
		unknownVec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portcullis_rls_unknown_descriptors_total",
			Help: "Descriptors that matched no rule, answered OK, by domain (empty: a domain that is not configured).",
		}, []string{"domain"}),
		invalid: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "portcullis_rls_invalid_requests_total",
			Help: "ShouldRateLimit calls refused as InvalidArgument: an empty domain, no descriptor, or too many.",
		}),
		replaced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "portcullis_rls_replaced_descriptors_total",
			Help: "Descriptors whose rule another matched rule of the same request replaced (rate_limit.replaces), answered OK.",
		}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:                            "portcullis_rls_request_duration_seconds",
			Help:                            "Time to answer a ShouldRateLimit call, from its decoding to its answer (a delay included).",
			Buckets:                         []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
			NativeHistogramBucketFactor:     1.1,
			NativeHistogramMaxBucketNumber:  160,
			NativeHistogramMinResetDuration: time.Hour,
		}),
		delays: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "portcullis_rls_delay_seconds",
			Help:    "Delays imposed by rules with a delay (the answer held back), in seconds.",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		loads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portcullis_rls_config_loads_total",
			Help: "Loads of the rule directory, at start and on SIGHUP, by result: ok, or error (the previous rules stay).",
		}, []string{"result"}),
		rules: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "portcullis_rls_rules",
			Help: "Rules (descriptors with a rate_limit) in the rules in use.",
		}),
		loaded: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "portcullis_rls_config_last_load_success_timestamp_seconds",
			Help: "When the rules in use were loaded, in Unix seconds.",
		}),
		unknown: make(map[string]prometheus.Counter),
	}
}

// Register registers every metric with reg.
func (m *Metrics) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.requests, m.descriptors, m.hits, m.unknownVec, m.invalid, m.replaced, m.duration, m.delays, m.loads, m.rules, m.loaded} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// LoadFailed counts a load of the rules that failed.
func (m *Metrics) LoadFailed() { m.loads.WithLabelValues("error").Inc() }

// bind gives every rule of cfg its series.
func (m *Metrics) bind(cfg *Config) {
	for _, r := range cfg.rules {
		r.metrics = m.ruleSeries(r.ID)
	}
	m.mu.Lock()
	for d := range cfg.domains {
		if m.unknown[d] == nil {
			m.unknown[d] = m.unknownVec.WithLabelValues(d)
		}
	}
	if m.unknown[""] == nil {
		m.unknown[""] = m.unknownVec.WithLabelValues("")
	}
	m.mu.Unlock()
	m.loads.WithLabelValues("ok").Inc()
	m.rules.Set(float64(len(cfg.rules)))
	m.loaded.SetToCurrentTime()
}

func (m *Metrics) ruleSeries(id string) *ruleMetrics {
	rm := &ruleMetrics{m: m}
	for i, v := range verdicts {
		rm.descs[i] = m.descriptors.WithLabelValues(id, v)
		rm.hits[i] = m.hits.WithLabelValues(id, v)
	}
	return rm
}

// count counts one descriptor of weight n decided under r.
func (rm *ruleMetrics) count(r *Rule, value, verdict string, n int) {
	if rm == nil {
		return
	}
	if r.Detailed {
		rm = rm.detail(r, value)
	}
	for i, v := range verdicts {
		if v == verdict {
			rm.descs[i].Inc()
			rm.hits[i].Add(float64(n))
			return
		}
	}
}

// detail returns the series of one value of a detailed_metric rule.
func (rm *ruleMetrics) detail(r *Rule, value string) *ruleMetrics {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	if d := rm.detailed[value]; d != nil {
		return d
	}
	if rm.detailed == nil {
		rm.detailed = make(map[string]*ruleMetrics)
	}
	if len(rm.detailed) >= maxDetailed {
		value = "_other"
		if d := rm.detailed[value]; d != nil {
			return d
		}
	}
	d := rm.m.ruleSeries(r.ID + "_" + value)
	rm.detailed[value] = d
	return d
}

// unknown counts a descriptor that matched no rule in domain.
func (m *Metrics) countUnknown(cfg *Config, domain string) {
	if !cfg.hasDomain(domain) {
		domain = ""
	}
	m.mu.Lock()
	c := m.unknown[domain]
	m.mu.Unlock()
	if c != nil {
		c.Inc()
	}
}

// observe counts one answered call.
func (m *Metrics) observe(cfg *Config, domain string, resp *pb.RateLimitResponse, err error, d time.Duration) {
	if !cfg.hasDomain(domain) {
		domain = ""
	}
	code := "ok"
	switch {
	case err != nil:
		switch status.Code(err) {
		case codes.InvalidArgument:
			code = "invalid"
		case codes.Canceled, codes.DeadlineExceeded:
			code = "cancelled"
		default:
			code = "unavailable"
		}
	case resp.GetOverallCode() == pb.RateLimitResponse_OVER_LIMIT:
		code = "over_limit"
	}
	m.requests.WithLabelValues(domain, code).Inc()
	m.duration.Observe(d.Seconds())
}
