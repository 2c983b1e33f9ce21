package daemon

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strings"

	"github.com/seed-a07d1050/portcullis/internal/livepage"
)

// liveCookieName is the cookie the live page's token form sets. A browser
// cannot send a bearer token when it navigates, so an operator types the
// admin token once into the form and the browser sends this cookie with
// the page and its event stream.
const liveCookieName = "admin_session"

// maxLoginBody bounds the token form's body: a token is at most a few
// hundred bytes.
const maxLoginBody = 4 << 10

// liveCookie is the value of the live page's cookie for one admin token,
// and its SHA-256 for a comparison in constant time. The value is derived
// from the token (an HMAC), not the token itself: cookies are not scoped by
// port (RFC 6265 §8.5), so a site proxied on another port of the same host
// may see it, and it opens the live page only, never /metrics or
// /debug/limits. A new token makes a new value, so rotating the token logs
// every browser out.
type liveCookie struct {
	value string
	sum   [sha256.Size]byte
}

func newLiveCookie(token string) liveCookie {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("portcullis admin live page cookie v1"))
	v := base64.RawURLEncoding.EncodeToString(m.Sum(nil))
	return liveCookie{value: v, sum: sha256.Sum256([]byte(v))}
}

// allowsCookie reports whether r asks for the live page (under
// [livepage.PagePath]) with the cookie of the token in force.
func (a *adminAuth) allowsCookie(r *http.Request) bool {
	if !strings.HasPrefix(r.URL.Path, livepage.PagePath) {
		return false
	}
	c, err := r.Cookie(liveCookieName)
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

// adminLogin serves the token form's POST: with the admin token it sets the
// live page's cookie (HttpOnly, SameSite=Strict, for the page's path only,
// until the browser closes) and sends the browser to the page; with another
// token it shows the form again with a 401. Without an admin token there
// is nothing to log in to: it sends the browser to the page.
func (s *Server) adminLogin(w http.ResponseWriter, r *http.Request) {
	a := s.adminAuth.Load()
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
		Name:     liveCookieName,
		Value:    a.cookie.value,
		Path:     livepage.PagePath,
		HttpOnly: true,
		SameSite: http.SameSiteStrictMode,
	})
	http.Redirect(w, r, livepage.PagePath, http.StatusSeeOther)
}
