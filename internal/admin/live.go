package admin

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/exchange"
	"github.com/seed-a07d1050/portcullis/internal/livepage"
	"github.com/seed-a07d1050/portcullis/limit"
)

// liveTop is how many busy keys the live page lists, in all and asked of
// each limiter.
const liveTop = 10

// liveSource is the daemon as the live page sees it.
type liveSource struct {
	src     Source
	metrics *exchange.Metrics // nil: no request counts
}

var _ livepage.Source = liveSource{}

// LiveState returns every listener with its limits, the busiest keys, the
// QUIC admission of the http3 listeners and the health of the cluster's
// Redis.
func (l liveSource) LiveState(ctx context.Context) livepage.State {
	st := livepage.State{Time: time.Now(), Listeners: []livepage.Listener{}, Keys: []livepage.Key{}, QUIC: []livepage.QUIC{}, Shadow: []livepage.Shadow{}}
	counts := liveCountsOf(l.metrics)
	st.Upstream = counts.upstream
	for _, x := range l.src.Listeners() {
		ll, keys := liveListener(x)
		ll.Requests = counts.listenerRequests(x.Config.Name)
		st.Shadow = append(st.Shadow, liveShadows(x)...)
		st.Listeners = append(st.Listeners, ll)
		st.Keys = append(st.Keys, keys...)
		if x.QUIC != nil {
			st.QUIC = append(st.QUIC, liveQUIC(x))
		}
	}
	st.Keys = busiest(st.Keys, liveTop)
	st.Redis = l.src.Redis(ctx)
	return st
}

// liveListener returns x's connections and limits, and its busy keys.
func liveListener(x Listener) (livepage.Listener, []livepage.Key) {
	name := x.Config.Name
	cs := x.Conns.Stats()
	ll := livepage.Listener{
		Row: livepage.Row{
			ID: name, Name: name, Limit: connBound(x.Config),
			InUse: int(cs.Open), Waiting: int(cs.Pending),
			// A connection cut by shutdown is not a client over its cap.
			Refused: cs.Refused.Total() - cs.Refused.Shutdown,
		},
		Protocol: string(x.Config.Protocol),
		Addr:     x.Addr,
		Limits:   []livepage.Row{},
		Paths:    livePaths(x.Table),
	}
	for _, w := range x.Config.Warnings() {
		ll.Warnings = append(ll.Warnings, w.Setting+": "+w.Message)
	}
	var keys []livepage.Key
	for _, k := range connKeys(x.Conns, liveTop) {
		keys = append(keys, livepage.Key{Where: name + " connections", Key: k.Key, InUse: k.InUse, Waiting: k.Waiting, Refused: k.Refused})
	}
	t := x.Table
	if t == nil {
		return ll, keys
	}
	add := func(id, what string, lim *Limit, r *Rate) {
		if lim != nil {
			row, k := liveLimit(name+"/"+id, what, lim)
			ll.Limits = append(ll.Limits, row)
			keys = append(keys, k...)
		}
		if r != nil {
			ll.Limits = append(ll.Limits, liveRate(name+"/"+id+"/rate", what+" rate", r))
		}
	}
	add("client", "client limit", t.Client, nil)
	add("listener", "listener", nil, t.Rate)
	for _, r := range t.Routes {
		add("route/"+r.Name, "route "+r.Name, r.Limit, r.Rate)
	}
	if t.Forward != nil {
		for i := range t.Forward.Limits {
			lim := &t.Forward.Limits[i]
			k := keyName(lim.Config.Key)
			add("forward/"+k, "forward "+k, lim, nil)
		}
	}
	return ll, keys
}

// livePaths says how each route of t is served, as the daemon logged it
// at start or at its last reload.
func livePaths(t *Table) []string {
	if t == nil {
		return nil
	}
	var out []string
	for _, r := range t.Routes {
		if p := r.Planned; p != nil {
			s := "route " + r.Name + ": " + string(p.Path)
			if p.Why != "" {
				s += " (" + p.Why + ")"
			}
			out = append(out, s)
		}
	}
	return out
}

// liveLimit returns the row of one limiter, named what, and its busy keys.
// Its refusals are what its clients were answered with a refusal status
// for: over the limit, queue full, queue timeout, and the cluster's Redis
// failing under on_error: closed.
func liveLimit(id, what string, l *Limit) (livepage.Row, []livepage.Key) {
	snap := l.Limiter.Snapshot(liveTop)
	t := l.Limiter.Totals()
	row := livepage.Row{
		ID: id, Name: what, Limit: limitBound(&l.Config),
		InUse: t.InUse, Waiting: t.Waiting,
		Refused: t.Refused + t.QueueFull + t.QueueTimeouts + t.StoreFailed,
	}
	var keys []livepage.Key
	for _, ks := range [][]limit.KeyStats[string]{snap.Exchanges.Keys, snap.Tunnels.Keys} {
		for _, k := range ks {
			keys = append(keys, livepage.Key{Where: id, Key: k.Key, InUse: k.InUse, Waiting: k.Waiting, Refused: k.Refused})
		}
	}
	return row, keys
}

// liveRate returns the row of one rate: rates hold no permits; its waiting
// are the requests it is delaying now.
func liveRate(id, what string, r *Rate) livepage.Row {
	t := r.Limiter.Totals()
	return livepage.Row{ID: id, Name: what, Limit: rateBound(&r.Config), Waiting: t.Delaying, Refused: t.Refused + t.StoreFailed}
}

// rateBound says what a rate allows.
func rateBound(c *config.Rate) string {
	bound := c.Limit().String() + " per " + keyName(c.Key)
	if c.DryRun {
		bound += " (dry run)"
	}
	return bound
}

// connBound says what caps the connections of a listener.
func connBound(lc *config.Listener) string {
	var parts []string
	switch n := lc.MaxConnsPerClient; n {
	case config.Unlimited:
		parts = append(parts, "no per-client cap")
	case 1:
		parts = append(parts, "1 connection per client")
	default:
		parts = append(parts, fmt.Sprintf("%d connections per client", n))
	}
	if lc.MaxConns > 0 {
		parts = append(parts, fmt.Sprintf("%d in all", lc.MaxConns))
	}
	if lc.RoutesFrom != "" {
		parts = append(parts, "routes of "+lc.RoutesFrom)
	}
	return strings.Join(parts, ", ")
}

// limitBound says what a limit allows.
func limitBound(c *config.Limit) string {
	permits := "unlimited"
	if c.Permits != config.Unlimited {
		permits = fmt.Sprint(c.Permits)
	}
	s := permits + " per " + keyName(c.Key)
	if c.Queue.Size > 0 {
		s += fmt.Sprintf(", queue %d for %v", c.Queue.Size, c.Queue.Timeout)
	}
	if c.Shadow {
		s += " (shadow)"
	}
	return s
}

// keyName names what a limit or rate counts by; empty is the client's
// address.
func keyName(k config.LimitKey) string {
	return string(cmp.Or(k, config.KeyClientIP))
}

// liveQUIC returns the handshake admission of an http3 listener.
func liveQUIC(x Listener) livepage.QUIC {
	s := x.QUIC.Snapshot()
	return livepage.QUIC{
		Listener: x.Config.Name, InProgress: s.InProgress, Threshold: s.Threshold,
		MaxInProgress: s.MaxInProgress, RetryOn: s.RetryOn, CompletionRate: s.CompletionRate,
	}
}

// busiest sorts keys busiest first (in use, then waiting, then refused)
// and keeps the first top.
func busiest(keys []livepage.Key, top int) []livepage.Key {
	slices.SortStableFunc(keys, func(a, b livepage.Key) int {
		return cmp.Or(cmp.Compare(b.InUse, a.InUse), cmp.Compare(b.Waiting, a.Waiting), cmp.Compare(b.Refused, a.Refused))
	})
	return keys[:min(len(keys), top)]
}

// liveShadows returns the limits and rates of x that only count (a limit's
// shadow, a route's shadow_limit, a rate's dry_run), with the requests
// each would have refused: the shadow_refused_total of its collector.
func liveShadows(x Listener) []livepage.Shadow {
	t := x.Table
	if t == nil {
		return nil
	}
	name := x.Config.Name
	var out []livepage.Shadow
	lim := func(id, what string, l *Limit, always bool) {
		if l != nil && (always || l.Config.Shadow) {
			out = append(out, livepage.Shadow{ID: name + "/" + id, Name: what, Limit: limitBound(&l.Config), WouldRefuse: l.Limiter.Totals().ShadowRefused})
		}
	}
	rate := func(id, what string, r *Rate) {
		if r != nil && r.Config.DryRun {
			row := liveRate(name+"/"+id+"/rate", what+" rate", r)
			out = append(out, livepage.Shadow{ID: row.ID, Name: row.Name, Limit: row.Limit, WouldRefuse: r.Limiter.Totals().ShadowRefused})
		}
	}
	lim("client", "client limit", t.Client, false)
	rate("listener", "listener", t.Rate)
	for _, r := range t.Routes {
		lim("route/"+r.Name, "route "+r.Name, r.Limit, false)
		lim("route/"+r.Name+"/shadow", "route "+r.Name+" shadow_limit", r.Shadow, true)
		rate("route/"+r.Name, "route "+r.Name, r.Rate)
	}
	if t.Forward != nil {
		for i := range t.Forward.Limits {
			l := &t.Forward.Limits[i]
			k := keyName(l.Config.Key)
			lim("forward/"+k, "forward "+k, l, false)
		}
	}
	return out
}
