package proxy

import (
	"net/http"

	"github.com/seed-a07d1050/portcullis/internal/httppath"
)

// reverseRequests is the first handler of a reverse-proxy listener's chain,
// before any limit: it refuses what no reverse route may serve, and puts the
// request path in the canonical form that the routes decide on and the
// upstream receives (see package httppath), so that no other spelling of a
// path can walk around a route's limit.
//
// CONNECT is refused with 405: a reverse route forwards exchanges to its
// own upstreams, and a CONNECT routed there by its path would open a tunnel
// the route's limits count as an ordinary exchange.
func reverseRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodConnect {
			w.Header().Set("Allow", "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS")
			writeShort(w, http.StatusMethodNotAllowed, "method not allowed: CONNECT is not proxied by a reverse-proxy listener\n")
			return
		}
		if err := httppath.CleanURL(r.URL); err != nil {
			writeShort(w, http.StatusBadRequest, "bad request: "+err.Error()+"\n")
			return
		}
		next.ServeHTTP(w, r)
	})
}
