// Package redisprom exports a redisstore.Store's counters as Prometheus
// metrics. It is a package of its own so that redisstore itself does not
// depend on the Prometheus client.
package redisprom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a07d1050/portcullis/limit/redisstore"
)

// A StatsSource is anything with the Stats method of a
// [redisstore.Store]; every *redisstore.Store[K] is one.
type StatsSource interface {
	Stats() redisstore.Stats
}

// Collector is a prometheus.Collector reading a Store's [redisstore.Stats]
// at each scrape. Its metrics, all prefixed "<namespace>_redisstore_":
//
//	calls_total{kind}          counter: round trips (kind acquire, sync, heartbeat)
//	errors_total{kind}         counter: of which failed
//	call_duration_seconds      histogram: round-trip latency
//	fallbacks_total{result}    counter: node-cap decisions without Redis (granted, refused)
//	unavailable_total          counter: refusals under the closed policy
//	cached_decisions_total     counter: TryAcquire answers from the cached count
//	notifications_total        counter: release notifications that woke waiters
//	reused_total               counter: acquires that took back an unsent release, no round trip
//	prefetches_total{result}   counter: spares asked in another Store's pipeline (granted, not_granted)
//	breaker_state              gauge: 0 closed, 1 half-open, 2 open
//	breaker_opens_total        counter: times the breaker opened
//	keys                       gauge: keys with state on this node
//	held_permits               gauge: permits this node holds through the Store
type Collector struct {
	src StatsSource

	calls, errors, latency, fallbacks, unavailable, cached *prometheus.Desc
	notifications, breaker, opens, keys, held              *prometheus.Desc
	reused, prefetches                                     *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a Collector for src. An empty namespace means
// "portcullis"; constLabels (nil for none) are added to every metric, for
// example to tell two Stores apart. Register it once per Store.
func NewCollector(src StatsSource, namespace string, constLabels prometheus.Labels) *Collector {
	if namespace == "" {
		namespace = "portcullis"
	}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, "redisstore", name), help, labels, constLabels)
	}
	return &Collector{
		src:           src,
		calls:         d("calls_total", "Redis round trips (a pipeline is one), by kind.", "kind"),
		errors:        d("errors_total", "Redis round trips that failed (error, timeout, connection lost), by kind.", "kind"),
		latency:       d("call_duration_seconds", "Latency of Redis round trips."),
		fallbacks:     d("fallbacks_total", "Decisions made by the node-local cap because Redis could not answer (policy open).", "result"),
		unavailable:   d("unavailable_total", "Requests refused because Redis could not answer (policy closed)."),
		cached:        d("cached_decisions_total", "TryAcquire decisions made from the last cluster count of the key."),
		notifications: d("notifications_total", "Release notifications from other nodes that woke local waiters."),
		reused:        d("reused_total", "Acquires granted without a round trip by taking back a permit this node released and had not yet sent to Redis."),
		prefetches:    d("prefetches_total", "Spare permits asked for in another store's pipeline (a new connection's cap) for a request to come, by whether Redis granted them (not_granted: refused, or the call failed).", "result"),
		breaker:       d("breaker_state", "Circuit breaker state: 0 closed, 1 half-open, 2 open."),
		opens:         d("breaker_opens_total", "Times the circuit breaker opened."),
		keys:          d("keys", "Keys this node keeps state for."),
		held:          d("held_permits", "Permits this node holds through the store."),
	}
}

// Describe sends the descriptors of every metric.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.calls, c.errors, c.latency, c.fallbacks, c.unavailable,
		c.cached, c.notifications, c.reused, c.prefetches, c.breaker, c.opens, c.keys, c.held} {
		ch <- d
	}
}

// Collect reads the Store's Stats once and sends every metric.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st := c.src.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	for _, k := range []struct {
		kind string
		cs   redisstore.CallStats
	}{{"acquire", st.Acquire}, {"sync", st.Sync}, {"heartbeat", st.Heartbeat}} {
		counter(c.calls, k.cs.Calls, k.kind)
		counter(c.errors, k.cs.Errors, k.kind)
	}
	ch <- prometheus.MustNewConstHistogram(c.latency, st.Latency.Count, st.Latency.Sum, cumulative(st.Latency))
	counter(c.fallbacks, st.Fallbacks, "granted")
	counter(c.fallbacks, st.FallbackRefusals, "refused")
	counter(c.unavailable, st.Unavailable)
	counter(c.cached, st.Cached)
	counter(c.notifications, st.Notifications)
	counter(c.reused, st.Reused)
	counter(c.prefetches, st.PrefetchGrants, "granted")
	counter(c.prefetches, st.Prefetches-st.PrefetchGrants, "not_granted")
	gauge(c.breaker, float64(st.Breaker))
	counter(c.opens, st.BreakerOpens)
	gauge(c.keys, float64(st.Keys))
	gauge(c.held, float64(st.Held))
}

// cumulative turns the Store's per-bucket counts into Prometheus's
// cumulative buckets keyed by upper bound (the +Inf bucket is implied by
// the total count).
func cumulative(h redisstore.Histogram) map[float64]uint64 {
	bounds := redisstore.LatencyBounds()
	out := make(map[float64]uint64, len(bounds))
	var sum uint64
	for i, b := range bounds {
		if i < len(h.Counts) {
			sum += h.Counts[i]
		}
		out[b] = sum
	}
	return out
}
