package proxyauth

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/seed-a07d1050/portcullis/clientkey"
)

// userKey is the context key of the verified user name.
type userKey struct{}

// User returns the user name an [Authenticator] verified for the request
// whose context is ctx, and whether there is one. A name is there only if
// its password was checked: nothing a client writes in a header can put one
// there.
func User(ctx context.Context) (string, bool) {
	u, ok := ctx.Value(userKey{}).(string)
	return u, ok
}

// UserOf returns the verified user name of r, or "" when r was not
// authenticated. It has the shape of a key function: use it as
// httplimit.ByUser(proxyauth.UserOf) in a limiter placed after
// [Authenticator.Wrap], so that a proxy_user limit counts only
// authenticated names.
func UserOf(r *http.Request) string {
	u, _ := User(r.Context())
	return u
}

// WithUser returns ctx carrying user as a verified name. It is for code
// that verified the name itself (an intercepted session inheriting its
// CONNECT's user, a test); never call it with a name a client sent.
func WithUser(ctx context.Context, user string) context.Context {
	return context.WithValue(ctx, userKey{}, user)
}

// Wrap returns a handler that lets a request through to next only with
// right credentials, before any other work:
//
//   - no credentials: 407 Proxy Authentication Required with
//     Proxy-Authenticate: Basic realm="...", charset="UTF-8" (with
//     ChallengeOrigin, 401 and WWW-Authenticate); not counted as a failure,
//     since it is how every client starts;
//   - malformed, unknown user or wrong password: the same answer, and one
//     failure counted against the client (see [Authenticator.Verify]);
//   - a client over its failure budget: 429 Too Many Requests with
//     Retry-After, without any check;
//   - no check slot in time: 503 Service Unavailable with Retry-After: 1.
//
// A request let through has the credentials header removed (the target
// never sees the proxy's credentials) and the verified user name in its
// context ([User], [UserOf]). Place limiters after Wrap: a refused request
// never reaches them, so it is never counted.
func (a *Authenticator) Wrap(next http.Handler) http.Handler {
	if next == nil {
		next = http.NotFoundHandler()
	}
	return &handler{a: a, next: next, header: a.credentialsHeader()}
}

type handler struct {
	a      *Authenticator
	next   http.Handler
	header string // canonical name of the credentials header
}

var _ http.Handler = (*handler)(nil)

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a := h.a
	vals := r.Header[h.header]
	if len(vals) == 0 {
		a.stats.noCredentials.Add(1)
		a.stats.challenged.Add(1)
		a.writeChallenge(w)
		return
	}
	client := a.res.Key(r)
	user, pass, ok := parseBasic(vals[0])
	var err error
	switch {
	case !ok || len(vals) > 1:
		err = a.allow(client)
		if err == nil {
			a.failures.Fail(client)
			a.stats.failed.Add(1)
			err = errMalformed
		}
	default:
		err = a.Verify(r.Context(), client, user, pass)
	}
	if err != nil {
		a.refuse(w, r, client, user, err)
		return
	}
	a.stats.accepted.Add(1)
	delete(r.Header, h.header)
	h.next.ServeHTTP(w, r.WithContext(WithUser(r.Context(), user)))
}

// errMalformed is why a request whose credentials header cannot be read
// was refused. It matches ErrBadCredentials.
var errMalformed = &malformedError{}

type malformedError struct{}

func (*malformedError) Error() string        { return "proxyauth: malformed Basic credentials" }
func (*malformedError) Is(target error) bool { return target == ErrBadCredentials }

func (a *Authenticator) credentialsHeader() string {
	if a.challenge == ChallengeOrigin {
		return "Authorization"
	}
	return "Proxy-Authorization"
}

// refuse answers a request whose credentials were not accepted.
func (a *Authenticator) refuse(w http.ResponseWriter, r *http.Request, client clientkey.Key, user string, err error) {
	var tooMany *TooManyFailuresError
	switch {
	case errors.As(err, &tooMany):
		a.logRefusal(r, client, user, err)
		writePlain(w, http.StatusTooManyRequests, retryAfter(tooMany.RetryAfter),
			"too many failed authentication attempts from this address\n")
	case errors.Is(err, ErrBusy):
		a.logRefusal(r, client, user, err)
		writePlain(w, http.StatusServiceUnavailable, "1", "authentication is busy, retry shortly\n")
	default:
		a.stats.challenged.Add(1)
		a.logRefusal(r, client, user, err)
		a.writeChallenge(w)
	}
}

func (a *Authenticator) logRefusal(r *http.Request, client clientkey.Key, user string, err error) {
	if !a.log.Enabled(r.Context(), slog.LevelInfo) {
		return
	}
	ok, held := a.gate.allow()
	if !ok {
		return
	}
	reason := err.Error()
	if errors.Is(err, ErrBadCredentials) && !errors.Is(err, errMalformed) && !a.set.Load().users.Has(user) {
		reason = "unknown user"
	}
	a.log.LogAttrs(r.Context(), slog.LevelInfo, "authentication refused",
		slog.String("client", client.String()),
		slog.String("user", describe(user)),
		slog.String("reason", reason),
		slog.Int64("suppressed", held))
}

// writeChallenge writes the 407 (or 401) answer.
func (a *Authenticator) writeChallenge(w http.ResponseWriter) {
	status, header, body := http.StatusProxyAuthRequired, "Proxy-Authenticate", "proxy authentication required\n"
	if a.challenge == ChallengeOrigin {
		status, header, body = http.StatusUnauthorized, "Www-Authenticate", "authentication required\n"
	}
	w.Header()[header] = []string{a.realm}
	writePlain(w, status, "", body)
}

func writePlain(w http.ResponseWriter, status int, retryAfter, body string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	if retryAfter != "" {
		h.Set("Retry-After", retryAfter)
	}
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}

// retryAfter is d in whole seconds, rounded up, at least 1.
func retryAfter(d time.Duration) string {
	return strconv.FormatInt(max(1, int64((d+time.Second-1)/time.Second)), 10)
}
