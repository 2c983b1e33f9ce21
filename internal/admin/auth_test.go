package admin_test

import (
	"bytes"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/admin"
	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/livepage"
)

// With a token, every endpoint but the health checks and the live page's
// way in needs it; a request without it, or with another, gets 401 and a
// Bearer challenge, and learns nothing (not even which paths exist). A
// token stored later is in force at the next request.
func TestTokenRequired(t *testing.T) {
	var auth atomic.Pointer[admin.Auth]
	auth.Store(authOf(t, token))
	src := newSource()
	src.listeners = []admin.Listener{{Config: &config.Listener{Name: "web", Protocol: config.ProtocolHTTP}, Addr: "127.0.0.2:80", Conns: connListener(t, 4, 1)}}
	s := startAdmin(t, src, &auth)
	for _, tc := range []struct {
		name, path, auth string
		want             int
	}{
		{"metrics without", "/metrics", "", http.StatusUnauthorized},
		{"limits without", "/debug/limits", "", http.StatusUnauthorized},
		{"unknown path without", "/nowhere", "", http.StatusUnauthorized},
		{"live page without", livepage.PagePath, "", http.StatusUnauthorized},
		{"events without", livepage.EventsPath, "", http.StatusUnauthorized},
		{"another token", "/debug/limits", "Bearer " + tokenLater, http.StatusUnauthorized},
		{"a prefix of the token", "/debug/limits", "Bearer " + token[:len(token)-1], http.StatusUnauthorized},
		{"the token with more", "/debug/limits", "Bearer " + token + "0", http.StatusUnauthorized},
		{"another scheme", "/debug/limits", "Basic " + token, http.StatusUnauthorized},
		{"no scheme", "/debug/limits", token, http.StatusUnauthorized},
		{"metrics with", "/metrics", "Bearer " + token, http.StatusOK},
		{"scheme in lower case", "/debug/limits", "bearer " + token, http.StatusOK},
		{"spaces around the token", "/debug/limits", "Bearer  " + token + " ", http.StatusOK},
		{"unknown path with", "/nowhere", "Bearer " + token, http.StatusNotFound},
		{"healthz", "/healthz", "", http.StatusOK},
		{"readyz", "/readyz", "", http.StatusOK},
		{"assets", livepage.AssetsPath + "live.js", "", http.StatusOK},
		{"root", "/", "", http.StatusSeeOther},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := get(t, s, tc.path, "Authorization", tc.auth)
			if resp.StatusCode != tc.want {
				t.Fatalf("GET %s with %q: %d, want %d", tc.path, tc.auth, resp.StatusCode, tc.want)
			}
			if tc.want == http.StatusSeeOther && resp.Header.Get("Location") != livepage.PagePath {
				t.Errorf("GET %s: to %q, want %s", tc.path, resp.Header.Get("Location"), livepage.PagePath)
			}
			if tc.want != http.StatusUnauthorized {
				return
			}
			if got := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
				t.Errorf("401 with WWW-Authenticate %q, want a Bearer challenge", got)
			}
			if strings.Contains(body, "127.0.0.") || strings.Contains(body, "portcullis_") || strings.Contains(body, "web") {
				t.Errorf("the 401 body gives data away: %q", body)
			}
			if strings.Contains(body, "<form") {
				t.Errorf("a 401 to a script shows the token form: %q", body)
			}
		})
	}
	t.Run("a new token", func(t *testing.T) {
		auth.Store(authOf(t, tokenLater))
		if resp, _ := get(t, s, "/debug/limits", "Authorization", "Bearer "+token); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("the old token: %d, want 401", resp.StatusCode)
		}
		if resp, _ := get(t, s, "/debug/limits", "Authorization", "Bearer "+tokenLater); resp.StatusCode != http.StatusOK {
			t.Errorf("the new token: %d, want 200", resp.StatusCode)
		}
		auth.Store(nil)
		if resp, _ := get(t, s, "/debug/limits"); resp.StatusCode != http.StatusOK {
			t.Errorf("no token in force: %d, want 200", resp.StatusCode)
		}
	})
}

// A browser that navigates to the live page without the token gets the
// token form (401, HTML) rather than a line of text.
func TestLivePageAsksABrowserForTheToken(t *testing.T) {
	var auth atomic.Pointer[admin.Auth]
	auth.Store(authOf(t, token))
	s := startAdmin(t, newSource(), &auth)
	resp, body := get(t, s, livepage.PagePath, "Accept", "text/html,application/xhtml+xml")
	if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("browser without token: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if !strings.Contains(body, `name="token"`) || !strings.Contains(body, livepage.LoginPath) {
		t.Errorf("no token form posting to %s:\n%s", livepage.LoginPath, body)
	}
	resp, body = get(t, s, "/metrics", "Accept", "text/html")
	if resp.StatusCode != http.StatusUnauthorized || strings.Contains(body, "<form") {
		t.Errorf("a browser asking for /metrics: %d, form shown: %v", resp.StatusCode, strings.Contains(body, "<form"))
	}
}

// login posts the token form with tok and returns the response.
func login(t *testing.T, s *admin.Server, tok string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+s.Addr().String()+livepage.LoginPath,
		strings.NewReader(url.Values{"token": {tok}}.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return do(t, req)
}

// The token form sets a cookie derived from the token (not the token),
// HttpOnly, SameSite=Strict, for the live page's path. It opens the live
// page and its event stream, never /metrics or /debug/limits, and a new
// token makes it worthless.
func TestLoginCookie(t *testing.T) {
	var auth atomic.Pointer[admin.Auth]
	auth.Store(authOf(t, token))
	s := startAdmin(t, newSource(), &auth)

	resp, body := login(t, s, tokenLater)
	if resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 || !strings.Contains(body, `name="token"`) || !strings.Contains(body, "not the admin token") {
		t.Fatalf("a wrong token: %d, cookies %v, want 401, none, and the form again saying so:\n%s", resp.StatusCode, resp.Cookies(), body)
	}
	resp, _ = login(t, s, "  "+token+"\n")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != livepage.PagePath {
		t.Fatalf("the token: %d to %q, want 303 to %s", resp.StatusCode, resp.Header.Get("Location"), livepage.PagePath)
	}
	cookies := resp.Cookies()
	if len(cookies) != 1 {
		t.Fatalf("cookies set: %v", cookies)
	}
	c := cookies[0]
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != livepage.PagePath || c.MaxAge != 0 || !c.Expires.IsZero() {
		t.Errorf("cookie %+v: want HttpOnly, SameSite=Strict, Path=%s, until the browser closes", c, livepage.PagePath)
	}
	if strings.Contains(c.Value, token) || c.Value == "" {
		t.Errorf("cookie value %q is empty or holds the token", c.Value)
	}
	cookie := c.Name + "=" + c.Value
	for _, tc := range []struct {
		path string
		want int
	}{
		{livepage.PagePath, http.StatusOK},
		{"/metrics", http.StatusUnauthorized},
		{"/debug/limits", http.StatusUnauthorized},
	} {
		if resp, _ := get(t, s, tc.path, "Cookie", cookie); resp.StatusCode != tc.want {
			t.Errorf("GET %s with the cookie: %d, want %d", tc.path, resp.StatusCode, tc.want)
		}
	}
	// The event stream opens with the cookie: its first frame comes.
	nextFrame(t, s, func(livepage.Frame) bool { return true }, "Cookie", cookie)
	for _, spoilt := range []string{c.Value[1:], c.Value + "A", token} {
		if resp, _ := get(t, s, livepage.PagePath, "Cookie", c.Name+"="+spoilt); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("the cookie %q: %d, want 401", spoilt, resp.StatusCode)
		}
	}
	again, _ := login(t, s, token)
	if len(again.Cookies()) != 1 || again.Cookies()[0].Value != c.Value {
		t.Errorf("the same token made another cookie: %v, then %v", c, again.Cookies())
	}

	auth.Store(authOf(t, tokenLater))
	if resp, _ := get(t, s, livepage.PagePath, "Cookie", cookie); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the cookie after the token changed: %d, want 401", resp.StatusCode)
	}
}

// Without a token there is nothing to log in to: the form's POST sends
// the browser to the page and sets nothing.
func TestLoginWithoutToken(t *testing.T) {
	s := startAdmin(t, newSource(), nil)
	resp, _ := login(t, s, token)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != livepage.PagePath || len(resp.Cookies()) != 0 {
		t.Errorf("login without a token: %d to %q, cookies %v", resp.StatusCode, resp.Header.Get("Location"), resp.Cookies())
	}
}

// The form's body is bounded: a client cannot make the listener read a
// large one.
func TestLoginBodyBounded(t *testing.T) {
	var auth atomic.Pointer[admin.Auth]
	auth.Store(authOf(t, token))
	s := startAdmin(t, newSource(), &auth)
	resp, _ := login(t, s, token+strings.Repeat("0", 8<<10))
	if resp.StatusCode == http.StatusSeeOther || len(resp.Cookies()) != 0 {
		t.Errorf("a form of 8 KiB: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
}

// LoadAuth reads the token file: none without one, an error naming what
// it was doing for a file it cannot use.
func TestLoadAuth(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if a, err := admin.LoadAuth(config.Admin{}); a != nil || err != nil {
		t.Errorf("without token_file: %v, %v; want none", a, err)
	}
	for _, file := range []string{short, filepath.Join(dir, "missing")} {
		a, err := admin.LoadAuth(config.Admin{TokenFile: file})
		if a != nil || err == nil || !strings.HasPrefix(err.Error(), "admin: token: ") {
			t.Errorf("token file %s: %v, %v; want an admin: token: error", filepath.Base(file), a, err)
		}
	}
	a, b := authOf(t, token), authOf(t, token)
	if !a.Same(b) || a.Same(authOf(t, tokenLater)) || a.Same(nil) || !(*admin.Auth)(nil).Same(nil) {
		t.Error("Same does not tell tokens apart")
	}
}

// LogChange warns when the admin listener is reachable beyond loopback
// without a token: at start, and at a reload that moves it there or takes
// its token away; not on loopback, not with a token, and not again at a
// reload that changed nothing. A changed token is logged at a reload.
func TestLogChange(t *testing.T) {
	const warning = "admin listener reachable beyond loopback without admin.token_file"
	a, b := authOf(t, token), authOf(t, tokenLater)
	every := &net.TCPAddr{IP: net.IPv4zero, Port: 9901}
	loop := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9901}
	for _, tc := range []struct {
		name          string
		c             admin.Change
		warn, changed bool
	}{
		{"start, every interface, no token", admin.Change{Addr: every, Starting: true}, true, false},
		{"start, loopback, no token", admin.Change{Addr: loop, Starting: true}, false, false},
		{"start, every interface, token", admin.Change{Auth: a, Addr: every, Starting: true}, false, false},
		{"start, no listener", admin.Change{Starting: true}, false, false},
		{"reload, nothing changed", admin.Change{Addr: every, PrevAddr: every}, false, false},
		{"reload takes the token away", admin.Change{PrevAuth: a, Addr: every, PrevAddr: every}, true, true},
		{"reload moves it off loopback", admin.Change{Addr: every, PrevAddr: loop}, true, false},
		{"reload rotates the token", admin.Change{Auth: b, PrevAuth: a, Addr: every, PrevAddr: every}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			admin.LogChange(slog.New(slog.NewTextHandler(&out, nil)), tc.c)
			if got := strings.Contains(out.String(), warning); got != tc.warn {
				t.Errorf("warning logged: %v, want %v:\n%s", got, tc.warn, out.String())
			}
			if got := strings.Contains(out.String(), "admin token changed"); got != tc.changed {
				t.Errorf("token change logged: %v, want %v:\n%s", got, tc.changed, out.String())
			}
		})
	}
}
