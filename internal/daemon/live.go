package daemon

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/livepage"
	"github.com/seed-a07d1050/portcullis/limit"
)

// liveTop is how many busy keys the live page lists, in all and asked of
// each limiter.
const liveTop = 10

// livePingTimeout bounds the PING of the cluster's Redis the live page
// makes once a second, so that a Redis that does not answer delays a
// sample by at most this.
const livePingTimeout = 500 * time.Millisecond

// liveSource is the daemon as the live page sees it.
type liveSource struct{ s *Server }

var _ livepage.Source = liveSource{}

// LiveState returns every listener with its limits, the busiest keys, the
// QUIC admission of the http3 listeners and the health of the cluster's
// Redis.
func (l liveSource) LiveState(ctx context.Context) livepage.State {
	st := livepage.State{Time: time.Now(), Listeners: []livepage.Listener{}, Keys: []livepage.Key{}, QUIC: []livepage.QUIC{}, Shadow: []livepage.Shadow{}}
	counts := liveCountsOf(l.s.metrics)
	st.Upstream = counts.upstream
	paths := l.s.paths.Load()
	for _, f := range l.s.frontList() {
		ll, keys := liveListener(f)
		ll.Paths = livePaths(f, paths)
		ll.Requests = counts.listenerRequests(f.cfg.Name)
		st.Shadow = append(st.Shadow, liveShadows(f)...)
		st.Listeners = append(st.Listeners, ll)
		st.Keys = append(st.Keys, keys...)
		if f.h3 != nil {
			st.QUIC = append(st.QUIC, liveQUIC(f))
		}
	}
	st.Keys = busiest(st.Keys, liveTop)
	st.Redis = l.s.cluster.liveRedis(ctx)
	return st
}

// liveListener returns f's connections and limits, and its busy keys.
func liveListener(f *front) (livepage.Listener, []livepage.Key) {
	name := f.cfg.Name
	cs := f.connStats()
	ll := livepage.Listener{
		Row: livepage.Row{
			ID: name, Name: name, Limit: connBound(&f.cfg),
			InUse: int(cs.Open), Waiting: int(cs.Pending),
			// A connection cut by shutdown is not a client over its cap.
			Refused: cs.Refused.Total() - cs.Refused.Shutdown,
		},
		Protocol: string(f.cfg.Protocol),
		Addr:     f.addr().String(),
		Limits:   []livepage.Row{},
	}
	for _, w := range f.cfg.Warnings() {
		ll.Warnings = append(ll.Warnings, w.Setting+": "+w.Message)
	}
	var keys []livepage.Key
	for _, k := range f.busyClients(liveTop) {
		keys = append(keys, livepage.Key{Where: name + " connections", Key: k.Key, InUse: k.InUse, Waiting: k.Waiting, Refused: k.Refused})
	}
	if f.table == nil || f.cfg.RoutesFrom != "" {
		return ll, keys
	}
	t := f.table.Load()
	add := func(id, what string, lim *limiter, r *rateLimiter) {
		if lim != nil {
			row, k := liveLimit(name+"/"+id, what, lim)
			ll.Limits = append(ll.Limits, row)
			keys = append(keys, k...)
		}
		if r != nil {
			ll.Limits = append(ll.Limits, liveRate(name+"/"+id+"/rate", what+" rate", r))
		}
	}
	add("client", "client limit", t.client, nil)
	add("listener", "listener", nil, t.rate)
	for _, r := range t.routes {
		add("route/"+r.name, "route "+r.name, r.limit, r.rate)
	}
	if t.forward != nil {
		for _, lim := range t.forward.limits {
			k := string(forwardKind(lim.cfg.Key))
			add("forward/"+k, "forward "+k, lim, nil)
		}
	}
	return ll, keys
}

// livePaths says how each route of f is served, as the daemon logged it
// at start or at its last reload.
func livePaths(f *front, paths *map[string]config.RoutePath) []string {
	if f.table == nil || f.cfg.RoutesFrom != "" || paths == nil {
		return nil
	}
	var out []string
	for _, r := range f.table.Load().routes {
		if p, ok := (*paths)[f.cfg.Name+"/"+r.name]; ok {
			s := "route " + r.name + ": " + string(p.Path)
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
func liveLimit(id, what string, l *limiter) (livepage.Row, []livepage.Key) {
	snap := l.lim.Snapshot(liveTop)
	t := l.lim.Totals()
	row := livepage.Row{
		ID: id, Name: what, Limit: limitBound(&l.cfg),
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
func liveRate(id, what string, r *rateLimiter) livepage.Row {
	t := r.lim.Totals()
	bound := r.cfg.Limit().String() + " per " + keyName(r.cfg.Key)
	if r.cfg.DryRun {
		bound += " (dry run)"
	}
	return livepage.Row{ID: id, Name: what, Limit: bound, Waiting: t.Delaying, Refused: t.Refused + t.StoreFailed}
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

func keyName(k config.LimitKey) string {
	return string(cmp.Or(k, config.KeyClientIP))
}

// liveQUIC returns the handshake admission of an http3 listener.
func liveQUIC(f *front) livepage.QUIC {
	s := f.h3.ctrl.Snapshot()
	return livepage.QUIC{
		Listener: f.cfg.Name, InProgress: s.InProgress, Threshold: s.Threshold,
		MaxInProgress: s.MaxInProgress, RetryOn: s.RetryOn, CompletionRate: s.CompletionRate,
	}
}

// liveRedis returns the health of the cluster's Redis: whether it answers a
// PING now, and how many of the daemon's stores have their circuit breaker
// open. Nil without a cluster.
func (c *cluster) liveRedis(ctx context.Context) *livepage.Redis {
	if c == nil {
		return nil
	}
	r := &livepage.Redis{Addrs: c.cfg.Redis.Addrs, OnError: string(c.cfg.OnError)}
	r.OpenBreakers, r.OutageSince = c.outages.Current()
	r.Degraded = c.degraded()
	ctx, cancel := context.WithTimeout(ctx, livePingTimeout)
	defer cancel()
	start := time.Now()
	if err := c.client.Ping(ctx).Err(); err != nil {
		r.Error = err.Error()
		return r
	}
	r.Reachable = true
	r.PingMillis = float64(time.Since(start).Microseconds()) / 1000
	return r
}

// busiest sorts keys busiest first (in use, then waiting, then refused)
// and keeps the first top.
func busiest(keys []livepage.Key, top int) []livepage.Key {
	slices.SortStableFunc(keys, func(a, b livepage.Key) int {
		return cmp.Or(cmp.Compare(b.InUse, a.InUse), cmp.Compare(b.Waiting, a.Waiting), cmp.Compare(b.Refused, a.Refused))
	})
	return keys[:min(len(keys), top)]
}
