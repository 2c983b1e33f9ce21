package route

import (
	"net/http"

	"github.com/seed-a07d1050/portcullis/internal/bytepath"
	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/exchange"
	"github.com/seed-a07d1050/portcullis/internal/relay"
	"github.com/seed-a07d1050/portcullis/limit"
)

// The byte path (internal/bytepath) sees a table and its routes only
// through the views this file fills in; a listener hands it the table it
// serves now through [Table.Byte].

// byteRoutes are a table's routes as the byte path picks them: the
// route the router would pick, when the byte path serves its requests.
type byteRoutes []*route

func (rs byteRoutes) Route(r *http.Request) *bytepath.Route {
	if rt := pickRequest(rs, r); rt != nil {
		return rt.lean
	}
	return nil
}

// byteRouteOf returns the byte path's view of the route name, served by
// rl through the limits given (nil ones skipped), in the chain's order;
// nil when the route's chain has more than those: a rate, a limit shared
// through a cluster Store that cannot grant from what it holds (every
// Redis store can), an https upstream, or routes sent through
// httputil.ReverseProxy (Config.ReverseProxy).
func (b *tableBuilder) byteRouteOf(name string, metrics *exchange.RouteMetrics, rl *relay.Relay, hasRate bool, limits ...*limiter) (*bytepath.Route, error) {
	if hasRate || b.ReverseProxy {
		return nil, nil
	}
	var ls []bytepath.Limit
	for _, l := range limits {
		if l == nil {
			continue
		}
		if _, held := l.store.(limit.HeldStore[string]); l.store != nil && !held {
			return nil, nil
		}
		byPeer := l.cfg.Key == config.KeyClientIP || l.cfg.Key == ""
		ls = append(ls, bytepath.Limit{By: l.kind.label(), Limiter: l.lim, ByPeer: byPeer, Resolver: l.id.Resolver})
	}
	return bytepath.NewRoute(name, metrics, rl, ls)
}

// byteTableOf returns the byte path's part of a table whose routes are
// routes and whose exchanges have the options opts.
func byteTableOf(routes []*route, opts exchange.Opts, pp pathPolicy, counts *exchange.LeanCounts) *bytepath.Table {
	t := &bytepath.Table{Routes: byteRoutes(routes), Opts: opts, Counts: counts, Slashes: pp.slashes}
	for _, r := range routes {
		t.OnLoop = t.OnLoop || r.lean.OnLoop()
	}
	return t
}
