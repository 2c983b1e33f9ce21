package route

import (
	"net/http"

	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/exchange"
	"github.com/seed-a07d1050/portcullis/internal/httppath"
)

// pathPolicy is what a reverse-proxy listener does with the spellings of a
// request path: how httppath cleans an escaped slash, and whether a path
// holding one is answered with a redirect to its unescaped form instead
// of being served.
type pathPolicy struct {
	slashes  httppath.Slashes
	redirect bool
}

// pathPolicyOf returns the policy of an effective escaped_slashes (empty:
// the default, reject).
func pathPolicyOf(e config.EscapedSlashes) pathPolicy {
	switch e {
	case config.EscapedSlashesKeep:
		return pathPolicy{slashes: httppath.KeepSlashes}
	case config.EscapedSlashesUnescapeAndForward:
		return pathPolicy{slashes: httppath.UnescapeSlashes}
	case config.EscapedSlashesUnescapeAndRedirect:
		return pathPolicy{slashes: httppath.UnescapeSlashes, redirect: true}
	}
	return pathPolicy{slashes: httppath.RejectSlashes}
}

// reverseRequests is the first handler of a reverse-proxy listener's chain,
// before any limit: it refuses what no reverse route may serve, and puts the
// request path in the canonical form that the routes decide on and the
// upstream receives (see package httppath), so that no other spelling of a
// path can walk around a route's limit. An escaped slash is refused with
// 400, decoded, or answered with a 307 to the decoded path, as pp says.
//
// CONNECT is refused with 405: a reverse route forwards exchanges to its
// own upstreams, and a CONNECT routed there by its path would open a tunnel
// the route's limits count as an ordinary exchange.
func reverseRequests(next http.Handler, pp pathPolicy) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodConnect {
			w.Header().Set("Allow", "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS")
			exchange.WriteShort(w, http.StatusMethodNotAllowed, "method not allowed: CONNECT is not proxied by a reverse-proxy listener\n")
			return
		}
		if pp.redirect && r.URL.Opaque == "" && httppath.HasEscapedSlash(r.URL.EscapedPath()) {
			redirectUnescaped(w, r)
			return
		}
		if err := httppath.CleanURL(r.URL, pp.slashes); err != nil {
			exchange.WriteShort(w, http.StatusBadRequest, "bad request: "+err.Error()+"\n")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// redirectUnescaped answers r, whose path holds an escaped slash, with 307
// Temporary Redirect to its path with every escaped slash decoded and
// cleaned, query kept (Envoy's UNESCAPE_AND_REDIRECT): the client sends
// the request again with a path every party reads alike. A path that
// cleaning refuses gets 400.
func redirectUnescaped(w http.ResponseWriter, r *http.Request) {
	to, err := httppath.Clean(r.URL.EscapedPath(), httppath.UnescapeSlashes)
	if err != nil {
		exchange.WriteShort(w, http.StatusBadRequest, "bad request: "+err.Error()+"\n")
		return
	}
	if r.URL.RawQuery != "" || r.URL.ForceQuery {
		to += "?" + r.URL.RawQuery
	}
	w.Header().Set("Location", to)
	exchange.WriteShort(w, http.StatusTemporaryRedirect, "temporary redirect: the path's escaped slashes decoded\n")
}
