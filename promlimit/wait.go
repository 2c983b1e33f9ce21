package promlimit

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a07d1050/portcullis/limit"
)

// DefaultWaitBuckets are the upper bounds, in seconds, of the queue wait
// histogram when none are given: 1 ms to 30 s.
var DefaultWaitBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// The values of the "outcome" label of a [WaitHistogram].
const (
	OutcomeGranted   = "granted"   // the waiter got a permit
	OutcomeTimeout   = "timeout"   // the waiter reached the queue timeout
	OutcomeAbandoned = "abandoned" // the waiter's client went away first
)

// WaitHistogram records how long requests waited in a limiter's queue, in
// seconds, with an "outcome" label: granted, timeout or abandoned. Requests
// that never waited are not recorded, so its count is the number of requests
// that queued. Feed it through [ObserverFor]; it is a prometheus.Collector to
// register. It is safe for concurrent use.
type WaitHistogram struct {
	vec       *prometheus.HistogramVec
	granted   prometheus.Observer
	timeout   prometheus.Observer
	abandoned prometheus.Observer
}

var _ prometheus.Collector = (*WaitHistogram)(nil)

// NewWaitHistogram returns a WaitHistogram named
// <namespace>_<subsystem>_queue_wait_seconds with the buckets given (upper
// bounds in seconds, increasing); nil or empty buckets means
// DefaultWaitBuckets. It panics if buckets are not increasing, as
// prometheus.NewHistogramVec does.
func NewWaitHistogram(opts Opts, buckets []float64) *WaitHistogram {
	opts = opts.withDefaults()
	if len(buckets) == 0 {
		buckets = DefaultWaitBuckets
	}
	vec := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace:   opts.Namespace,
		Subsystem:   opts.Subsystem,
		Name:        "queue_wait_seconds",
		Help:        "How long requests waited in the queue for a permit, by outcome.",
		ConstLabels: opts.ConstLabels,
		Buckets:     buckets,
	}, []string{"outcome"})
	return &WaitHistogram{
		vec:       vec,
		granted:   vec.WithLabelValues(OutcomeGranted),
		timeout:   vec.WithLabelValues(OutcomeTimeout),
		abandoned: vec.WithLabelValues(OutcomeAbandoned),
	}
}

// Describe sends the histogram's descriptor.
func (w *WaitHistogram) Describe(ch chan<- *prometheus.Desc) { w.vec.Describe(ch) }

// Collect sends the histogram's series.
func (w *WaitHistogram) Collect(ch chan<- prometheus.Metric) { w.vec.Collect(ch) }

// record files one limiter event: a grant that waited, a queue timeout or an
// abandoned wait. Other events carry no queue wait and are ignored.
func (w *WaitHistogram) record(kind limit.EventKind, seconds float64, waited bool) {
	switch kind {
	case limit.Granted:
		if waited {
			w.granted.Observe(seconds)
		}
	case limit.QueueTimeout:
		w.timeout.Observe(seconds)
	case limit.Abandoned:
		w.abandoned.Observe(seconds)
	}
}

// ObserverFor returns a [limit.Observer] for a limiter with keys of type K
// that records its queue waits in w. The key is never looked at, so the
// histogram has no per-client series. Observe does not allocate or block.
func ObserverFor[K comparable](w *WaitHistogram) limit.Observer[K] {
	return limit.ObserverFunc[K](func(e limit.Event[K]) {
		w.record(e.Kind, e.Wait.Seconds(), e.Wait > 0)
	})
}

// Observers returns an Observer that tells each non-nil observer of list, in
// order, of every event. It returns nil when list holds no non-nil observer,
// and the observer itself when it holds one.
func Observers[K comparable](list ...limit.Observer[K]) limit.Observer[K] {
	var kept []limit.Observer[K]
	for _, o := range list {
		if o != nil {
			kept = append(kept, o)
		}
	}
	switch len(kept) {
	case 0:
		return nil
	case 1:
		return kept[0]
	}
	return limit.ObserverFunc[K](func(e limit.Event[K]) {
		for _, o := range kept {
			o.Observe(e)
		}
	})
}
