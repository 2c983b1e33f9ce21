package daemon

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/connlimit"
	"github.com/seed-a07d1050/portcullis/internal/route"
	"github.com/seed-a07d1050/portcullis/promlimit"
	"github.com/seed-a07d1050/portcullis/rate"
)

// The accept-time rate slots of a listener, as the `limit` label of their
// metrics and in the names of their cluster keys.
const (
	kindConnRate      = "conn_rate"      // listeners[].conn_rate
	kindHandshakeRate = "handshake_rate" // listeners[].handshake_rate
)

// connRateStore gives cc, the connection caps of f's listener, the cluster
// Store of its conn_rate, if it has one and the cluster counts accept-time
// limits.
func (f *front) connRateStore(cc *connlimit.Config, cl *cluster) error {
	if f.cfg.ConnRate == nil {
		return nil
	}
	rs, err := cl.connRateStore(f.cfg.Name, kindConnRate)
	if err != nil {
		return fmt.Errorf("daemon: listener %s: conn_rate: %w", f.cfg.Name, err)
	}
	if rs != nil { // a nil *clusterRateStore must not become a non-nil Store
		cc.ConnRateStore, f.rates = rs, rs
	}
	return nil
}

// withConnRateStats adds the metrics of f's conn_rate, and of its cluster
// Store (store, nil without), to stats.
func (f *front) withConnRateStats(stats prometheus.Collector, store rate.Store[clientkey.Key]) prometheus.Collector {
	if f.cfg.ConnRate == nil {
		return stats
	}
	labels := prometheus.Labels{"listener": f.cfg.Name, "route": "", "limit": kindConnRate}
	out := collectorList{stats, promlimit.NewRateCollector(connRateTotals{f.conns}, promlimit.Opts{Subsystem: "rate", ConstLabels: labels})}
	if cs, ok := store.(*clusterRateStore[clientkey.Key]); ok {
		out = append(out, cs.metrics)
	}
	return out
}

// connRateTotals reads the totals of a listener's conn_rate.
type connRateTotals struct{ l *connlimit.Listener }

func (c connRateTotals) Totals() rate.Totals { return c.l.RateTotals() }

// h3Rates is the handshake_rate of an http3 listener: a limiter that
// quicadmit asks once a client's address is proven, and its cluster Store.
type h3Rates struct {
	handshake *rate.Limiter[clientkey.Key] // nil without handshake_rate
	store     *clusterRateStore[clientkey.Key]
	total     prometheus.Collector
}

// build makes the handshake_rate of f's listener, if it has one. On error
// nothing is left open.
func (r *h3Rates) build(f *front, cl *cluster) error {
	lc := &f.cfg
	if lc.HandshakeRate == nil {
		return nil
	}
	store, err := cl.connRateStore(lc.Name, kindHandshakeRate)
	if err != nil {
		return err
	}
	rc := rate.Config[clientkey.Key]{
		Rate:  route.RateOf(lc.HandshakeRate.Rate),
		Burst: lc.HandshakeRate.Burst,
		Delay: rate.NoDelay, // a handshake is admitted or refused, never delayed
		Hash:  clientkey.Key.Hash,
		Name:  lc.Name + "/" + kindHandshakeRate, // as a route table names a listener's limits
	}
	if store != nil { // a nil *clusterRateStore must not become a non-nil Store
		rc.Store = store
	}
	lim, err := rate.New(rc)
	if err != nil {
		if store != nil {
			_ = store.Close()
		}
		return err
	}
	r.handshake, r.store = lim, store
	labels := prometheus.Labels{"listener": lc.Name, "route": "", "limit": kindHandshakeRate}
	r.total = promlimit.NewRateCollector(lim, promlimit.Opts{Subsystem: "rate", ConstLabels: labels})
	return nil
}

// withStats adds the metrics of the handshake_rate, if any, to stats.
func (r *h3Rates) withStats(stats prometheus.Collector) prometheus.Collector {
	if r.handshake == nil {
		return stats
	}
	out := collectorList{stats, r.total}
	if r.store != nil {
		out = append(out, r.store.metrics)
	}
	return out
}

// close stops the limiter, then its Store.
func (r *h3Rates) close() {
	if r.handshake != nil {
		_ = r.handshake.Close()
	}
	if r.store != nil {
		_ = r.store.Close()
	}
}

// collectorList is several collectors as one.
type collectorList []prometheus.Collector

func (l collectorList) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range l {
		c.Describe(ch)
	}
}

func (l collectorList) Collect(ch chan<- prometheus.Metric) {
	for _, c := range l {
		c.Collect(ch)
	}
}
