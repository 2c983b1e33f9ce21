package daemon_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"testing"
	"time"
)

// What nginx 1.22.1 and HAProxy 2.6.12 do with these spellings, measured on
// loopback with a prefix location /admin in front of an echo upstream
// (nginx: "location /admin { proxy_pass http://up; }" beside
// "location / { ... }"; HAProxy: "use_backend admin if { path_beg /admin }"):
//
//   - nginx matches locations on its normalised path, in which %2F is
//     decoded to "/" and dot segments resolved, so "/a/..%2Fadmin/x",
//     "/%2Fadmin/x" and "/a/%2E%2E%2Fadmin/x" all match /admin, and it
//     forwards the target as the client wrote it (proxy_pass without a
//     URI). It answers "/..%2Fadmin/x" and "/%2e%2e/admin/x" with 400.
//     A backslash, raw or as %5C, is no separator to it: "/a%5C..%5Cadmin/x"
//     and "/a\..\admin/x" match "/" and reach the upstream as written, where
//     a backend that reads "\" as "/" (IIS, some frameworks) serves /admin.
//     "/a/..%252Fadmin/x" matches "/", "/admin%252Fx" matches /admin (its
//     prefix match is by characters, not segments).
//   - HAProxy matches path_beg on the target as the client wrote it and
//     forwards it so: every spelling that does not start with the literal
//     "/admin" (as "/admin%2Fx" and "/admin%252Fx" do) goes to the default backend,
//     "//admin/x", "/%61dmin/x" and "/a/%2e%2e/admin/x" included, and a
//     backend that decodes or resolves serves /admin from it.
//
// Portcullis routes on the path the upstream will act on, and by default
// (escaped_slashes: reject) refuses an escaped slash with 400: the route
// limit on /admin counts every spelling that a decoding backend resolves
// to /admin, or the request never reaches an upstream. unescape_and_forward
// routes and forwards the decoded path, so the upstream receives exactly
// what was routed; unescape_and_redirect sends the client there with 307.
// keep is HAProxy's behaviour for escaped slashes, and is walked around by
// a backend that decodes them, as the cases below show. Backslashes are
// refused whatever escaped_slashes says. A double encoding ("%252F") is the
// text "%2F" after the one decoding RFC 3986 asks for, no separator: it is
// routed as a segment of that name and forwarded as written.

// escapedCase is one spelling and what each escaped_slashes answers it
// with while the /admin permit is held: 429 when routed to /admin, 200
// when routed to the open route, 400, or 307.
type escapedCase struct {
	target                           string
	reject, unescape, redirect, keep int
	location                         string // the redirect's Location, for 307
}

var escapedCases = []escapedCase{
	{"/admin/x", 429, 429, 429, 429, ""},
	{"/admin%2Fx", 400, 429, 307, 429, "/admin/x"},
	{"/admin%2fx", 400, 429, 307, 429, "/admin/x"},
	{"/%2Fadmin/x", 400, 429, 307, 200, "/admin/x"},
	{"/%2fadmin/x", 400, 429, 307, 200, "/admin/x"},
	{"/a/..%2Fadmin/x", 400, 429, 307, 200, "/admin/x"},
	{"/a/..%2fadmin/x", 400, 429, 307, 200, "/admin/x"},
	{"/a%2F..%2Fadmin/x", 400, 429, 307, 200, "/admin/x"},
	{"/a/%2E%2E%2Fadmin/x", 400, 429, 307, 200, "/admin/x"},
	{"/a/%2e%2e%2fadmin/x", 400, 429, 307, 200, "/admin/x"},
	{"/a/.%2F..%2Fadmin/x", 400, 429, 307, 200, "/admin/x"},
	{"/a/..%2Fadmin/x?q=1", 400, 429, 307, 200, "/admin/x?q=1"},
	{"/..%2Fadmin/x", 400, 400, 400, 200, ""},
	{"/a/%2e%2e/admin/x", 429, 429, 429, 429, ""},
	{"/a/%2E%2E/admin/x", 429, 429, 429, 429, ""},
	{"/%2e%2e/admin/x", 400, 400, 400, 400, ""},
	{"//admin/x", 429, 429, 429, 429, ""},
	{"/%61dmin/x", 429, 429, 429, 429, ""},
	{"/a%5C..%5Cadmin/x", 400, 400, 400, 400, ""},
	{"/a%5c..%5cadmin/x", 400, 400, 400, 400, ""},
	{`/a\..\admin/x`, 400, 400, 400, 400, ""},
	{`/a\admin/x`, 400, 400, 400, 400, ""},
	{"/a/..%252Fadmin/x", 200, 200, 200, 200, ""},
	{"/admin%252Fx", 200, 200, 200, 200, ""},
	{"/a/..%255Cadmin/x", 200, 200, 200, 200, ""},
}

// TestEscapedSlashes sends every spelling of a path under a limited /admin
// route to a daemon under each escaped_slashes, end to end, on every
// HTTP/1.1 server (the event loops relay GETs themselves, so a spelling
// they took would walk around the chain's check), and checks the answer,
// that no request reached the upstream by another route with a path that
// a decoding backend resolves to /admin (but under keep, which allows
// it), and what the upstream receives once the permit is free.
func TestEscapedSlashes(t *testing.T) {
	for _, mode := range []string{"", "reject", "unescape_and_forward", "unescape_and_redirect", "keep"} {
		name := mode
		if name == "" {
			name = "default"
		}
		t.Run("escaped_slashes="+name, func(t *testing.T) {
			bothServers(t, func(t *testing.T) { testEscapedSlashes(t, mode) })
		})
	}
}

func testEscapedSlashes(t *testing.T, mode string) {
	up := startTargetEcho(t)
	setting := ""
	if mode != "" {
		setting = "    escaped_slashes: " + mode + "\n"
	}
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
`+setting+`    routes:
      - name: admin
        path_prefix: /admin
        upstreams: ["`+up.url+`"]
        limit: {permits: 1}
      - name: open
        upstreams: ["`+up.url+`"]
`)
	addr := d.srv.Addr("web").String()

	// The /admin permit is held by a request its client ends at the end.
	hold := dialFrom(t, "127.0.0.2", addr)
	fmt.Fprintf(hold, "GET /admin/hold?ms=20000 HTTP/1.1\r\nHost: app.test\r\n\r\n")
	d.waitFor("the /admin permit to be held", func() bool { return d.route("web", "admin").Limit.Totals.InUse == 1 })

	for _, c := range escapedCases {
		want := map[string]int{"": c.reject, "reject": c.reject, "unescape_and_forward": c.unescape,
			"unescape_and_redirect": c.redirect, "keep": c.keep}[mode]
		st, loc, body := rawGetTarget(t, "127.0.0.2", addr, c.target)
		if st != want {
			t.Errorf("GET %s: %d %q, want %d", c.target, st, body, want)
			continue
		}
		if st == http.StatusTemporaryRedirect && loc != c.location {
			t.Errorf("GET %s: redirected to %q, want %q", c.target, loc, c.location)
		}
		if st != http.StatusOK {
			continue
		}
		// Routed to the open route: the upstream got raw; what would a
		// backend that decodes it (once), then resolves it, serve?
		raw, ok := strings.CutPrefix(strings.TrimSpace(body), "raw ")
		if !ok {
			t.Errorf("GET %s: body %q", c.target, body)
			continue
		}
		if p := decodedPath(raw); (p == "/admin" || strings.HasPrefix(p, "/admin/")) && mode != "keep" {
			t.Errorf("GET %s reached the upstream by the open route as %q, which a decoding backend serves as %q", c.target, raw, p)
		}
	}
	if g := d.route("web", "admin").Limit.Totals.Granted; g != 1 {
		t.Errorf("the /admin limit granted %d permits, want 1 (the hold)", g)
	}
	_ = hold.Close()
	d.waitFor("the /admin permit to come back", func() bool { return d.route("web", "admin").Limit.Totals.InUse == 0 })

	// With the permit free: what the upstream receives.
	forwarded := map[string]map[string]string{
		"/a/..%2Fadmin/x": {"unescape_and_forward": "/admin/x", "keep": "/a/..%2Fadmin/x"},
		"/a%2Fb":          {"unescape_and_forward": "/a/b", "keep": "/a%2Fb"},
		"/a%2F%2Fb/./c":   {"unescape_and_forward": "/a/b/c", "keep": "/a%2F%2Fb/c"},
		"/a/..%252Fb":     {"": "/a/..%252Fb", "reject": "/a/..%252Fb", "unescape_and_forward": "/a/..%252Fb", "keep": "/a/..%252Fb"},
	}
	for target, byMode := range forwarded {
		want, ok := byMode[mode]
		if !ok {
			continue
		}
		st, _, body := rawGetTarget(t, "127.0.0.3", addr, target)
		if st != http.StatusOK || body != "raw "+want+"\n" {
			t.Errorf("GET %s reached the upstream as %q (status %d), want %q", target, body, st, want)
		}
	}
}

// decodedPath is the path a backend that percent-decodes a request target
// once, then resolves its dot segments and merges its slashes, serves.
func decodedPath(raw string) string {
	p, _, _ := strings.Cut(raw, "?")
	if u, err := url.PathUnescape(p); err == nil {
		p = u
	}
	return path.Clean(strings.ReplaceAll(p, `\`, "/"))
}

// targetEcho answers every request with the target it received, as
// written: "raw <request-target>", after ?ms=N milliseconds when asked.
type targetEcho struct{ url string }

func startTargetEcho(t *testing.T) *targetEcho {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ms, _ := strconv.Atoi(r.URL.Query().Get("ms")); ms > 0 {
			select {
			case <-time.After(time.Duration(ms) * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
		_, _ = fmt.Fprintf(w, "raw %s\n", r.RequestURI)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return &targetEcho{url: "http://" + ln.Addr().String()}
}

// rawExchange sends GET target, exactly as written, on a new connection
// from ip and returns the answer's status, Location and body.
func rawGetTarget(t *testing.T, ip, addr, target string) (int, string, string) {
	t.Helper()
	c := dialFrom(t, ip, addr)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(waitLimit))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n", target)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET %s: %v", target, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read body: %v", target, err)
	}
	return resp.StatusCode, resp.Header.Get("Location"), string(b)
}
