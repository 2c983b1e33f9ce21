package daemon

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/internal/route"
	"github.com/seed-a07d1050/portcullis/limit/redisstore"
	"github.com/seed-a07d1050/portcullis/limit/redisstore/redisprom"
)

// routeStores returns the Stores the route tables' limits and rates count
// in through c; nil (no Stores: counts stay in each process) when c is nil.
func (c *cluster) routeStores() route.Stores {
	if c == nil {
		return nil
	}
	return clusterStores{c}
}

// clusterStores are the cluster's Stores as a route table takes them.
type clusterStores struct{ c *cluster }

func (s clusterStores) LimitStore(name string, labels prometheus.Labels) (route.LimitStore, error) {
	cs, err := s.c.store(name, labels)
	if cs == nil || err != nil { // a nil *clusterStore must not become a non-nil Store
		return nil, err
	}
	return cs, nil
}

func (s clusterStores) RateStore(name string, labels prometheus.Labels) (route.RateStore, error) {
	cs, err := rateStore(s.c, name, func(k string) string { return k }, labels)
	if cs == nil || err != nil { // a nil *clusterRateStore must not become a non-nil Store
		return nil, err
	}
	return cs, nil
}

// Collector returns the collector of s's Redis metrics (route.LimitStore).
func (s *clusterStore[K]) Collector() prometheus.Collector { return s.metrics }

// Collector returns the collector of s's Redis metrics (route.RateStore).
func (s *clusterRateStore[K]) Collector() prometheus.Collector { return s.metrics }

// A clusterRateStore is a rate's Store with the collector of its Redis
// metrics.
type clusterRateStore[K comparable] struct {
	*redisstore.RateStore[K]
	metrics prometheus.Collector
}

// rateStore returns a new RateStore for the rate named name, whose Redis
// keys start with the cluster prefix, "rate:" and that name, so that equal
// rates of every node count together and different rates apart. Nil c
// means no store (a nil result).
func rateStore[K comparable](c *cluster, name string, keyString func(K) string, labels prometheus.Labels) (*clusterRateStore[K], error) {
	if c == nil {
		return nil, nil
	}
	policy, err := redisstore.ParsePolicy(string(c.cfg.OnError))
	if err != nil {
		return nil, err
	}
	s, err := redisstore.NewRate(redisstore.RateConfig{
		Client:        c.client,
		Prefix:        c.cfg.Prefix + "rate:" + name + ":",
		Timeout:       c.cfg.Timeout,
		OnError:       policy,
		NodeShare:     c.cfg.NodeShare,
		LocalShare:    c.cfg.LocalShare,
		LeaseTokens:   c.cfg.RateLease,
		FlushInterval: c.cfg.FlushInterval,
		Logger:        c.log,
		Name:          "rate/" + name,
		Outages:       c.outages,
	}, keyString)
	if err != nil {
		return nil, fmt.Errorf("daemon: cluster rate store %s: %w", name, err)
	}
	return &clusterRateStore[K]{RateStore: s, metrics: newRateStoreCollector(s, labels)}, nil
}

// connRateStore returns the Store of the accept-time rate kind (conn_rate or
// handshake_rate) of the listener named name, or nil when there is no
// cluster or the accept-time limits stay local.
func (c *cluster) connRateStore(name, kind string) (*clusterRateStore[clientkey.Key], error) {
	if c == nil || c.cfg.LocalConnectionCaps {
		return nil, nil
	}
	labels := prometheus.Labels{"listener": name, "route": "", "limit": kind}
	return rateStore(c, kind+"/"+name, clientkey.Key.String, labels)
}

// rateStoreCollector exports a RateStore's Redis figures under the names
// of the concurrency stores' (calls, errors, latency, fallbacks, breaker),
// a decision on Redis being an "acquire" and a flush a "sync", the fast
// path's admissions as portcullis_redisstore_local_decisions_total and
// those from leased tokens as portcullis_redisstore_leased_decisions_total.
type rateStoreCollector struct {
	common *redisprom.Collector
	local  *prometheus.Desc
	leased *prometheus.Desc
	src    interface{ Stats() redisstore.RateStats }
}

func newRateStoreCollector(s interface{ Stats() redisstore.RateStats }, labels prometheus.Labels) *rateStoreCollector {
	return &rateStoreCollector{
		common: redisprom.NewCollector(rateStats{s}, "", labels),
		local: prometheus.NewDesc("portcullis_redisstore_local_decisions_total",
			"Rate admissions made on the node's local fast path (cluster.local_share), without a round trip.", nil, labels),
		leased: prometheus.NewDesc("portcullis_redisstore_leased_decisions_total",
			"Rate admissions made from tokens the node leased for a busy key (cluster.rate_lease), without a round trip.", nil, labels),
		src: s,
	}
}

func (c *rateStoreCollector) Describe(ch chan<- *prometheus.Desc) {
	c.common.Describe(ch)
	ch <- c.local
	ch <- c.leased
}

func (c *rateStoreCollector) Collect(ch chan<- prometheus.Metric) {
	c.common.Collect(ch)
	st := c.src.Stats()
	ch <- prometheus.MustNewConstMetric(c.local, prometheus.CounterValue, float64(st.Local))
	ch <- prometheus.MustNewConstMetric(c.leased, prometheus.CounterValue, float64(st.Leased))
}

// rateStats shows a RateStore's figures as a concurrency Store's.
type rateStats struct {
	s interface{ Stats() redisstore.RateStats }
}

func (r rateStats) Stats() redisstore.Stats {
	st := r.s.Stats()
	return redisstore.Stats{
		Acquire: st.Reserve, Sync: st.Flush, Latency: st.Latency,
		Fallbacks: st.Fallbacks, FallbackRefusals: st.FallbackRefusals, Unavailable: st.Unavailable,
		Cached: st.Cached, Breaker: st.Breaker, BreakerOpens: st.BreakerOpens, Keys: st.Keys,
	}
}
