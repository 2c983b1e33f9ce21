package daemon

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

// liveShadows returns the limits and rates of f that only count (a limit's
// shadow, a route's shadow_limit, a rate's dry_run), with the requests
// each would have refused: the shadow_refused_total of its collector.
func liveShadows(f *front) []livepage.Shadow {
	if f.table == nil || f.cfg.RoutesFrom != "" {
		return nil
	}
	name := f.cfg.Name
	var out []livepage.Shadow
	lim := func(id, what string, l *limiter, always bool) {
		if l != nil && (always || l.cfg.Shadow) {
			out = append(out, livepage.Shadow{ID: name + "/" + id, Name: what, Limit: limitBound(&l.cfg), WouldRefuse: l.lim.Totals().ShadowRefused})
		}
	}
	rate := func(id, what string, r *rateLimiter) {
		if r != nil && r.cfg.DryRun {
			row := liveRate(name+"/"+id+"/rate", what+" rate", r)
			out = append(out, livepage.Shadow{ID: row.ID, Name: row.Name, Limit: row.Limit, WouldRefuse: r.lim.Totals().ShadowRefused})
		}
	}
	t := f.table.Load()
	lim("client", "client limit", t.client, false)
	rate("listener", "listener", t.rate)
	for _, r := range t.routes {
		lim("route/"+r.name, "route "+r.name, r.limit, false)
		lim("route/"+r.name+"/shadow", "route "+r.name+" shadow_limit", r.shadow, true)
		rate("route/"+r.name, "route "+r.name, r.rate)
	}
	if t.forward != nil {
		for _, l := range t.forward.limits {
			k := string(forwardKind(l.cfg.Key))
			lim("forward/"+k, "forward "+k, l, false)
		}
	}
	return out
}
