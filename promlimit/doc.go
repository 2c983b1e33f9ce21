// Package promlimit exports the state of any Portcullis limiter as Prometheus
// metrics.
//
// A [Collector] reads a limiter's [limit.Totals] at scrape time and reports the
// counters (granted, refused, shadow-refused, queue full, queue timeouts,
// abandoned, reclaimed, store failures) as Prometheus counters and the state
// now (permits in use, waiters, busy keys) as gauges. A [WaitHistogram] is fed
// through a [limit.Observer] (see [ObserverFor]) and records how long requests
// waited in a limiter's queue. A [RateCollector] does the same for a
// rate.Limiter's [rate.Totals] (admitted, delayed, refused, shadow verdicts,
// cancellations, store failures, busy keys).
//
// Metrics carry the constant labels the caller chooses (a listener or route
// name, say) and never a per-client label: the number of clients is unbounded,
// and a label per client would make the metric series unbounded too. Per-key
// figures are in the limiter's Snapshot instead.
//
// Typical use, one limiter with its queue histogram:
//
//	wait := promlimit.NewWaitHistogram(promlimit.Opts{ConstLabels: prometheus.Labels{"route": "api"}}, nil)
//	lim, _ := limit.New(limit.Config[string]{Observer: promlimit.ObserverFor[string](wait), Policy: limit.Policy[string]{QueueSize: 16}})
//	reg.MustRegister(promlimit.NewCollector(lim, promlimit.Opts{ConstLabels: prometheus.Labels{"route": "api"}}), wait)
package promlimit
