package exchange

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/seed-a07d1050/portcullis/internal/buildinfo"
	uptransport "github.com/seed-a07d1050/portcullis/internal/upstream"
)

// durationBuckets are the classic buckets of the request and upstream
// duration histograms, in seconds, for scrapers without native
// histograms: 1 ms to 60 s.
var durationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// Metrics are the request metrics of every HTTP listener of a Server:
// one set of vectors for the Server's life, labelled by listener and
// route (never by client), and read by every admin listener's registry.
// A route table takes its routes' series once, when it is built
// (RouteMetrics), so that an exchange counts without a label lookup.
type Metrics struct {
	Requests *prometheus.CounterVec   // listener, route, code (status class)
	duration *prometheus.HistogramVec // listener, route
	Upstream *prometheus.HistogramVec // listener, route
	UpErrors *prometheus.CounterVec   // listener, route, kind
	lean     *prometheus.CounterVec   // listener, outcome
	build    prometheus.Collector

	mu     sync.Mutex
	issued map[SeriesKey]bool // the listener and route labels route handed out
}

// SeriesKey is the listener and route labels of one route's series.
type SeriesKey struct{ Listener, Route string }

func NewMetrics() *Metrics {
	hist := func(name, help string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:                            name,
			Help:                            help,
			Buckets:                         durationBuckets,
			NativeHistogramBucketFactor:     1.1,
			NativeHistogramMaxBucketNumber:  160,
			NativeHistogramMinResetDuration: time.Hour,
		}, []string{"listener", "route"})
	}
	bi := buildinfo.Read()
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "portcullis_build_info",
		Help: "Always 1, labelled with the build of the running daemon (as portcullis version prints it).",
		ConstLabels: prometheus.Labels{
			"version": bi.Version, "revision": bi.Revision, "goversion": bi.GoVersion,
		},
	})
	build.Set(1)
	return &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portcullis_http_requests_total",
			Help: "HTTP exchanges ended, by listener, route (empty: none matched, or refused before routing) and status class (code: 1xx to 5xx, and 499 apart from 4xx: the client left while its request waited).",
		}, []string{"listener", "route", "code"}),
		duration: hist("portcullis_http_request_duration_seconds",
			"Time from an HTTP request's head read to its exchange's end (response written, tunnel closed), by listener and route."),
		Upstream: hist("portcullis_upstream_response_duration_seconds",
			"Time from sending a request upstream to its response head, by listener and route."),
		UpErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portcullis_upstream_errors_total",
			Help: "Requests that got no response from their upstream, by listener, route and kind: refused (connection refused), connect (other dial failures), timeout, reset (the connection closed or reset before a response), bad_response, other.",
		}, []string{"listener", "route", "kind"}),
		lean: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portcullis_http_lean_exchanges_total",
			Help: "HTTP/1.1 exchanges offered to the lean path (http1_server: eventloop, the default), by listener and outcome: relayed (served as bytes to the end), handed_over (sent upstream as bytes, then answered through the relay's own code: an upstream failure, or an answer the lean path does not write itself), declined (served by the fast path from the start).",
		}, []string{"listener", "outcome"}),
		build:  build,
		issued: make(map[SeriesKey]bool),
	}
}

// RegisterOn adds the request metrics, portcullis_build_info and the Go
// and process collectors to reg.
func (m *Metrics) RegisterOn(reg *prometheus.Registry) {
	reg.MustRegister(m.Requests, m.duration, m.Upstream, m.UpErrors, m.lean, m.build,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
}

// UpstreamErrKind is a kind of upstream failure, as the kind label of
// portcullis_upstream_errors_total names it.
type UpstreamErrKind uint8

const (
	upErrRefused UpstreamErrKind = iota
	upErrConnect
	upErrTimeout
	upErrReset
	UpErrBadResponse
	upErrOther
	numUpErrKinds
)

var upErrNames = [numUpErrKinds]string{"refused", "connect", "timeout", "reset", "bad_response", "other"}

// ClassifyUpstreamErr returns the kind of an error of sending a request
// upstream.
func ClassifyUpstreamErr(err error) UpstreamErrKind {
	var ne net.Error
	var op *net.OpError
	var dnsErr *net.DNSError
	switch {
	case IsRefused(err):
		return upErrRefused
	case errors.As(err, &dnsErr) && !dnsErr.IsTimeout:
		return upErrConnect
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, uptransport.ErrHeadTimeout),
		errors.As(err, &ne) && ne.Timeout():
		return upErrTimeout
	case errors.As(err, &op) && op.Op == "dial":
		return upErrConnect
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return upErrReset
	case errors.Is(err, uptransport.ErrHeadTooLarge), errors.Is(err, uptransport.ErrUnexpectedSwitch),
		errors.Is(err, uptransport.ErrMalformedResponse):
		return UpErrBadResponse
	}
	return upErrOther
}

// RouteMetrics are the series of one route (or of a listener's requests
// that no route took), resolved when its table is built.
type RouteMetrics struct {
	classes  [6]prometheus.Counter // by status / 100; [0] unused
	closed   prometheus.Counter    // code "499": the client left while its request waited (statusClientClosed)
	duration prometheus.Observer
	Upstream prometheus.Observer
	Errors   [numUpErrKinds]prometheus.Counter
}

// Route returns the series of route on listener.
func (m *Metrics) Route(listener, route string) *RouteMetrics {
	m.mu.Lock()
	m.issued[SeriesKey{listener, route}] = true
	m.mu.Unlock()
	rm := &RouteMetrics{
		duration: m.duration.WithLabelValues(listener, route),
		Upstream: m.Upstream.WithLabelValues(listener, route),
	}
	for c := 1; c <= 5; c++ {
		rm.classes[c] = m.Requests.WithLabelValues(listener, route, string(rune('0'+c))+"xx")
	}
	rm.closed = m.Requests.WithLabelValues(listener, route, "499")
	for k, name := range upErrNames {
		rm.Errors[k] = m.UpErrors.WithLabelValues(listener, route, name)
	}
	return rm
}

// LeanOutcome is what became of an exchange offered to the lean path, as
// the outcome label of portcullis_http_lean_exchanges_total names it.
type LeanOutcome uint8

const (
	LeanRelayed LeanOutcome = iota
	LeanHandedOver
	LeanDeclined
	numLeanOutcomes
)

var leanOutcomeNames = [numLeanOutcomes]string{"relayed", "handed_over", "declined"}

// LeanCounts are the series of one listener's lean exchanges; a nil
// *leanCounts counts nothing.
type LeanCounts [numLeanOutcomes]prometheus.Counter

func (lc *LeanCounts) Add(o LeanOutcome) {
	if lc != nil {
		lc[o].Inc()
	}
}

// LeanCounts returns the lean path's series of listener.
func (m *Metrics) LeanCounts(listener string) *LeanCounts {
	var lc LeanCounts
	for o, name := range leanOutcomeNames {
		lc[o] = m.lean.WithLabelValues(listener, name)
	}
	return &lc
}

// CountTargetError returns the forward proxy's OnTargetError for a
// listener whose series are rm: it counts the failure by kind.
func CountTargetError(rm *RouteMetrics) func(*http.Request, error) {
	if rm == nil {
		return nil
	}
	return func(_ *http.Request, err error) { rm.Errors[ClassifyUpstreamErr(err)].Inc() }
}

// Prune deletes the series of every listener and route it handed out that
// keep does not hold.
func (m *Metrics) Prune(keep map[SeriesKey]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.issued {
		if keep[k] {
			continue
		}
		match := prometheus.Labels{"listener": k.Listener, "route": k.Route}
		m.Requests.DeletePartialMatch(match)
		m.duration.DeletePartialMatch(match)
		m.Upstream.DeletePartialMatch(match)
		m.UpErrors.DeletePartialMatch(match)
		if k.Route == "" { // the listener's own: it is gone
			m.lean.DeletePartialMatch(prometheus.Labels{"listener": k.Listener})
		}
		delete(m.issued, k)
	}
}

// ended counts an exchange that ended with status after d.
func (rm *RouteMetrics) ended(status int, d time.Duration) {
	if status == StatusClientClosed {
		rm.closed.Inc()
	} else if c := status / 100; c >= 1 && c <= 5 {
		rm.classes[c].Inc()
	}
	rm.duration.Observe(d.Seconds())
}

// IsRefused reports whether err is an upstream refusing the connection.
func IsRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }
