package admin

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"

	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/exchange"
	"github.com/seed-a07d1050/portcullis/internal/livepage"
)

// cookieName is the cookie the live page's token form sets. A browser
// cannot send a bearer token when it navigates, so an operator types the
// admin token once into the form and the browser sends this cookie with
// the page and its event stream.
const cookieName = "admin_session"

// maxLoginBody bounds the token form's body: a token is at most a few
// hundred bytes.
const maxLoginBody = 4 << 10

// Auth is the admin listener's bearer token, kept as its SHA-256 so that
// comparing it takes the same time whatever the length of what a client
// sends, and the live page's cookie derived from it. A nil *Auth means no
// token: every endpoint is open. Make it with [LoadAuth].
type Auth struct {
	sum    [sha256.Size]byte
	cookie cookie
}

// LoadAuth reads the admin token of cfg (its token_file). It returns nil
// and no error without one, and an error when the file cannot be used. A
// reload calls it in its first phase, before anything changes.
func LoadAuth(cfg config.Admin) (*Auth, error) {
	tok, err := cfg.Token()
	if err != nil {
		return nil, fmt.Errorf("admin: token: %w", err)
	}
	if tok == "" {
		return nil, nil
	}
	return &Auth{sum: sha256.Sum256([]byte(tok)), cookie: newCookie(tok)}, nil
}

// allows reports whether r carries the token: "Authorization: Bearer
// <token>", the scheme in any case (RFC 9110 §11.1).
func (a *Auth) allows(r *http.Request) bool {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	return a.matches(tok)
}

// matches reports whether tok, spaces around it ignored, is the token.
func (a *Auth) matches(tok string) bool {
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	return subtle.ConstantTimeCompare(sum[:], a.sum[:]) == 1
}

// Same reports whether a and b are the same token, or both none.
func (a *Auth) Same(b *Auth) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.sum == b.sum
}

// cookie is the value of the live page's cookie for one admin token, and
// its SHA-256 for a comparison in constant time. The value is derived from
// the token (an HMAC), not the token itself: cookies are not scoped by
// port (RFC 6265 §8.5), so a site proxied on another port of the same host
// may see it, and it opens the live page only, never /metrics or
// /debug/limits. A new token makes a new value, so rotating the token logs
// every browser out.
type cookie struct {
	value string
	sum   [sha256.Size]byte
}

func newCookie(token string) cookie {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("portcullis admin live page cookie v1"))
	v := base64.RawURLEncoding.EncodeToString(m.Sum(nil))
	return cookie{value: v, sum: sha256.Sum256([]byte(v))}
}

// allowsCookie reports whether r asks for the live page (under
// [livepage.PagePath]) with the cookie of the token in force.
func (a *Auth) allowsCookie(r *http.Request) bool {
	if !strings.HasPrefix(r.URL.Path, livepage.PagePath) {
		return false
	}
	c, err := r.Cookie(cookieName)
	if err != nil {
		return false
	}
	sum := sha256.Sum256([]byte(c.Value))
	return subtle.ConstantTimeCompare(sum[:], a.cookie.sum[:]) == 1
}

// wantsLivePage reports whether r is a browser navigating to the live page,
// which is answered with the token form rather than a line of text.
func wantsLivePage(r *http.Request) bool {
	return r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, livepage.PagePath) &&
		strings.Contains(r.Header.Get("Accept"), "text/html")
}

// requireToken answers 401 to a request without the admin token, when one
// is configured: neither the bearer token nor, for the live page, the
// cookie its token form sets. A browser asking for the live page gets the
// form. The token in force is read per request, so a reload changes it at
// once on every admin listener.
func (s *Server) requireToken(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a := s.auth(); a != nil && !a.allows(r) && !a.allowsCookie(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="portcullis admin"`)
			if wantsLivePage(r) {
				livepage.WriteLogin(w, http.StatusUnauthorized, false, s.log)
				return
			}
			exchange.WriteShort(w, http.StatusUnauthorized, "unauthorized: this endpoint needs the admin token (Authorization: Bearer)\n")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// login serves the token form's POST: with the admin token it sets the
// live page's cookie (HttpOnly, SameSite=Strict, for the page's path only,
// until the browser closes) and sends the browser to the page; with another
// token it shows the form again with a 401. Without an admin token there
// is nothing to log in to: it sends the browser to the page.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	a := s.auth()
	if a == nil {
		http.Redirect(w, r, livepage.PagePath, http.StatusSeeOther)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginBody)
	if !a.matches(r.PostFormValue("token")) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="portcullis admin"`)
		livepage.WriteLogin(w, http.StatusUnauthorized, true, s.log)
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name:     cookieName,
		Value:    a.cookie.value,
		Path:     livepage.PagePath,
		HttpOnly: true,
		SameSite: http.SameSiteStrictMode,
	})
	http.Redirect(w, r, livepage.PagePath, http.StatusSeeOther)
}

// Change is what a start or a reload did to the admin listener, for
// [LogChange].
type Change struct {
	// Auth and PrevAuth are the tokens in force now and before (nil: none).
	Auth, PrevAuth *Auth
	// Addr and PrevAddr are the admin listener's address now and before;
	// nil without one.
	Addr, PrevAddr net.Addr
	// Starting is true at start, false at a reload.
	Starting bool
}

// LogChange logs what a start or a reload changed for the admin listener,
// once the new token (if any) is in force: a new token, and a warning when
// the listener is reachable beyond loopback without one, at start and
// whenever a reload moved the listener or took its token away.
func LogChange(log *slog.Logger, c Change) {
	changed := !c.Auth.Same(c.PrevAuth)
	if changed && !c.Starting {
		log.Info("admin token changed", "token_required", c.Auth != nil)
	}
	if c.Addr == nil || c.Auth != nil || isLoopback(c.Addr) {
		return
	}
	moved := c.PrevAddr == nil || c.Addr.String() != c.PrevAddr.String()
	if c.Starting || changed || moved {
		log.Warn("admin listener reachable beyond loopback without admin.token_file: "+
			"/metrics and /debug/limits (which lists client addresses) are open to whoever reaches it",
			"admin", c.Addr.String())
	}
}

// isLoopback reports whether a is a loopback address; an unspecified one
// (every interface) is not.
func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}
