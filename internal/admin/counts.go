package admin

import (
	"cmp"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/seed-a07d1050/portcullis/internal/exchange"
	"github.com/seed-a07d1050/portcullis/internal/livepage"
)

// liveCounts are the request counters of every HTTP listener as /metrics
// shows them at one moment: read from the same vectors, so that the live
// page and a scrape cannot disagree.
type liveCounts struct {
	// requests is portcullis_http_requests_total summed over the routes of
	// each listener, by listener and code.
	requests map[string]map[string]uint64
	// upstream is each series of portcullis_upstream_errors_total above
	// zero, by listener, route and kind.
	upstream []livepage.UpstreamErrors
}

// liveCountsOf reads the request and upstream error counters of m; a nil m
// has none.
func liveCountsOf(m *exchange.Metrics) liveCounts {
	lc := liveCounts{requests: map[string]map[string]uint64{}, upstream: []livepage.UpstreamErrors{}}
	if m == nil {
		return lc
	}
	eachCounter(m.Requests, func(labels map[string]string, v uint64) {
		ln := labels["listener"]
		if lc.requests[ln] == nil {
			lc.requests[ln] = map[string]uint64{}
		}
		lc.requests[ln][labels["code"]] += v
	})
	eachCounter(m.UpErrors, func(labels map[string]string, v uint64) {
		if v == 0 {
			return
		}
		ln, route, kind := labels["listener"], labels["route"], labels["kind"]
		lc.upstream = append(lc.upstream, livepage.UpstreamErrors{
			ID: ln + "/" + route + "/" + kind, Listener: ln, Route: route, Kind: kind, Count: v,
		})
	})
	slices.SortFunc(lc.upstream, func(a, b livepage.UpstreamErrors) int {
		return cmp.Or(cmp.Compare(a.Listener, b.Listener), cmp.Compare(a.Route, b.Route), cmp.Compare(a.Kind, b.Kind))
	})
	return lc
}

// listenerRequests returns the exchanges listener ended, or nil when it
// has no series (a tcp listener).
func (lc liveCounts) listenerRequests(listener string) *livepage.Requests {
	codes, ok := lc.requests[listener]
	if !ok {
		return nil
	}
	r := &livepage.Requests{Classes: make([]livepage.Count, 0, len(livepage.StatusClasses))}
	for _, c := range livepage.StatusClasses {
		r.Classes = append(r.Classes, livepage.Count{Name: c, Count: codes[c]})
		r.Total += codes[c]
	}
	return r
}

// eachCounter calls f with the labels and value of every series of c, as a
// scrape of /metrics would read them.
func eachCounter(c prometheus.Collector, f func(labels map[string]string, v uint64)) {
	ch := make(chan prometheus.Metric, 64)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil || pb.GetCounter() == nil {
			continue
		}
		labels := make(map[string]string, len(pb.GetLabel()))
		for _, l := range pb.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		f(labels, uint64(pb.GetCounter().GetValue()))
	}
}
