package intercept

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"slices"

	"github.com/seed-a07d1050/portcullis/internal/forward"
	"github.com/seed-a07d1050/portcullis/internal/proxyauth"
)

// sessionKey is the context key of a request's session on the inner
// server.
type sessionKey struct{}

// withSession is the inner server's ConnContext: each connection's
// requests carry its session.
func withSession(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		if s, ok := tc.NetConn().(*session); ok {
			return context.WithValue(ctx, sessionKey{}, s)
		}
	}
	return ctx
}

// serveInner serves one request inside an intercepted session: it checks
// that the request names the session's target, makes it a forward-proxy
// exchange to https://target carrying what the CONNECT established, and
// passes it to the Handler.
func (i *Interceptor) serveInner(w http.ResponseWriter, r *http.Request) {
	s, _ := r.Context().Value(sessionKey{}).(*session)
	if s == nil {
		writePlain(w, http.StatusInternalServerError, "internal server error: request outside any intercepted session\n")
		return
	}
	i.stats.requests.Add(1)
	s.requests.Add(1)
	if !s.matchesHost(r.Host) {
		// The certificate was made for the session's target only; a
		// request for another host (domain fronting, or connection
		// coalescing) must open its own session (RFC 9110 §15.5.20).
		i.stats.misdirected.Add(1)
		writePlain(w, http.StatusMisdirectedRequest, "misdirected request: this TLS session is for "+s.target.String()+
			", not "+truncate(r.Host, 100)+"; open a new connection for that host\n")
		return
	}
	ctx := forward.WithInterceptedTarget(r.Context(), s.target)
	if s.hasUser {
		ctx = proxyauth.WithUser(ctx, s.user)
	}
	in := r.WithContext(ctx)
	u := *r.URL
	u.Scheme, u.Host, u.User = "https", s.target.String(), nil
	in.URL = &u
	in.RemoteAddr = s.client
	delete(in.Header, "Forwarded")
	delete(in.Header, "X-Forwarded-For")
	for k, v := range s.fwd {
		in.Header[k] = slices.Clone(v) // the session's, shared by its requests
	}
	i.handler.ServeHTTP(w, in)
}
