package route

import (
	"net"
	"net/http"
	"strings"

	"github.com/seed-a07d1050/portcullis/internal/bytepath"
	"github.com/seed-a07d1050/portcullis/internal/exchange"
)

// hostRank says how specifically a route names a host; a more specific match
// wins over a longer path prefix.
type hostRank uint8

const (
	hostNoMatch  hostRank = iota
	hostAny               // the route lists no host
	hostWildcard          // "*.example.com"
	hostExact             // "www.example.com" or an IP address
)

// hostPattern is one entry of a route's host list, lower-cased.
type hostPattern struct {
	exact  string // set for an exact name or address
	suffix string // ".example.com" for "*.example.com"
}

func parseHostPattern(s string) hostPattern {
	s = strings.ToLower(strings.TrimSuffix(s, "."))
	if rest, ok := strings.CutPrefix(s, "*"); ok {
		return hostPattern{suffix: rest}
	}
	return hostPattern{exact: s}
}

// route is one entry of a Table: what it matches and the handler chain
// that serves what it matched.
type route struct {
	name    string
	hosts   []hostPattern // nil: any host
	prefix  string        // clean absolute path; "/" matches every path
	handler http.Handler
	metrics *exchange.RouteMetrics // nil: none
	lean    *bytepath.Route        // nil: the lean path declines the route's requests
}

// matchHost returns how specifically r's hosts match host (lower-cased, no
// port). A wildcard matches names strictly below its suffix, never the
// suffix itself.
func (r *route) matchHost(host string) hostRank {
	if len(r.hosts) == 0 {
		return hostAny
	}
	best := hostNoMatch
	for _, h := range r.hosts {
		switch {
		case h.exact != "" && h.exact == host:
			return hostExact
		case h.suffix != "" && len(host) > len(h.suffix) && strings.HasSuffix(host, h.suffix):
			best = hostWildcard
		}
	}
	return best
}

// matchPath reports whether path is r's prefix or below it, by whole segments:
// "/api" takes "/api" and "/api/x" but not "/apix"; "/ws/", written as
// nginx's "location /ws/", takes "/ws/" and "/ws/x" but not "/ws".
func (r *route) matchPath(path string) bool {
	if r.prefix == "/" {
		return true
	}
	if !strings.HasPrefix(path, r.prefix) {
		return false
	}
	return len(path) == len(r.prefix) || r.prefix[len(r.prefix)-1] == '/' || path[len(r.prefix)] == '/'
}

// pick returns the route that serves a request for host and path, or nil.
// The most specific host match wins (exact, then wildcard, then any host);
// among those, the longest path prefix; among equals, the earliest route.
func pick(routes []*route, host, path string) *route {
	var best *route
	var bestRank hostRank
	for _, r := range routes {
		rank := r.matchHost(host)
		if rank == hostNoMatch || !r.matchPath(path) {
			continue
		}
		if best == nil || rank > bestRank || (rank == bestRank && len(r.prefix) > len(best.prefix)) {
			best, bestRank = r, rank
		}
	}
	return best
}

// pickRequest returns the route that serves r, or nil, as pick chooses
// it for r's host and path ("/" when it has none).
func pickRequest(routes []*route, r *http.Request) *route {
	path := r.URL.Path
	if path == "" {
		path = "/"
	}
	return pick(routes, requestHost(r), path)
}

// requestHost returns the host a request is for, lower-cased, without port
// or trailing dot: from Host (HTTP/1.1) or :authority (HTTP/2, which Go puts
// in Host too).
func requestHost(r *http.Request) string {
	h := r.Host
	if host, ok := hostOfHostPort(h); ok {
		h = host
	} else if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	h = strings.TrimSuffix(h, ".")
	if hasUpper(h) {
		h = strings.ToLower(h)
	}
	return h
}

// hostOfHostPort returns the host of hostport as net.SplitHostPort splits
// it, and whether it did. Without a colon there is no port to split, and
// SplitHostPort's error would cost an allocation for every request whose
// Host is a plain name, which is most.
func hostOfHostPort(hostport string) (string, bool) {
	if strings.IndexByte(hostport, ':') < 0 {
		return "", false
	}
	host, _, err := net.SplitHostPort(hostport)
	return host, err == nil
}

func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return true
		}
	}
	return false
}

// router serves a request by the route pick chooses, or 404.
type router struct {
	routes []*route
}

func (rt *router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	route := pickRequest(rt.routes, r)
	if route == nil {
		exchange.WriteShort(w, http.StatusNotFound, "no route\n")
		return
	}
	if st := exchange.StateOf(w); st != nil {
		st.Route = route.name
		if route.metrics != nil {
			st.Metrics = route.metrics
		}
	}
	route.handler.ServeHTTP(w, r)
}
