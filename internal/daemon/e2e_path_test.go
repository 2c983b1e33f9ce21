package daemon_test

import (
	"bufio"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// rawGet sends one HTTP/1.1 request for target on a new connection from
// ip, exactly as written, and returns the status and body of the answer.
func rawGet(t *testing.T, ip, addr, method, target string) (int, string) {
	t.Helper()
	c := dialFrom(t, ip, addr)
	fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n", method, target)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
	return resp.StatusCode, b.String()
}

// TestRouteOnCleanedPath checks every spelling of a path under /api: each
// is routed to the /api route, counted by its limit, and forwarded as the
// cleaned path, or refused with 400 when backends disagree on its meaning.
func TestRouteOnCleanedPath(t *testing.T) { bothServers(t, testRouteOnCleanedPath) }

func testRouteOnCleanedPath(t *testing.T) {
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - name: api
        path_prefix: /api
        upstreams: ["{{backend}}"]
        limit: {permits: 1}
      - name: rest
        upstreams: ["{{backend}}"]
`)
	addr := d.srv.Addr("web").String()
	hold := getAsync(d.client("127.0.0.2"), d.url("web", "/api/hold?ms=5000"))
	d.waitFor("the /api permit to be held", func() bool { return d.route("web", "api").Limit.Totals.InUse == 1 })

	spellings := []struct {
		target string
		want   int
	}{
		{"/api/x", http.StatusTooManyRequests},
		{"//api/x", http.StatusTooManyRequests},
		{"/./api/x", http.StatusTooManyRequests},
		{"/x/../api/x", http.StatusTooManyRequests},
		{"/x/%2e%2e/api/x", http.StatusTooManyRequests},
		{"/x/.%2E/api/x", http.StatusTooManyRequests},
		{"/%2e/api/x", http.StatusTooManyRequests},
		{"/api//x", http.StatusTooManyRequests},
		{"/api/./x", http.StatusTooManyRequests},
		{"/api", http.StatusTooManyRequests},
		{"/%61pi/x", http.StatusTooManyRequests}, // %61 is "a": routed on the decoded path
		{"/..;/api/x", http.StatusBadRequest},
		{"/x/..;/api/x", http.StatusBadRequest},
		{"/../api/x", http.StatusBadRequest},
		{"/%2e%2e/api/x", http.StatusBadRequest},
		{"/x\\..\\api/x", http.StatusBadRequest},
		{"/x%5C..%5Capi/x", http.StatusBadRequest},
		{"/api%00/x", http.StatusBadRequest},
		{"/api/a%2Fb", http.StatusBadRequest}, // escaped_slashes: reject, the default (see e2e_escaped_test.go)
		{"/apix", http.StatusOK},
	}
	for _, s := range spellings {
		if got, body := rawGet(t, "127.0.0.2", addr, "GET", s.target); got != s.want {
			t.Errorf("GET %s: %d %q, want %d", s.target, got, body, s.want)
		}
	}
	if r := await(t, hold); r.err != nil || r.status != http.StatusOK {
		t.Fatalf("held request: %+v", r)
	}

	// With the permit free, the upstream receives the cleaned path.
	forwarded := map[string]string{
		"//api/x":            "/api/x",
		"/x/../api/x":        "/api/x",
		"/x/%2e%2e/api//x/.": "/api/x/",
	}
	for target, want := range forwarded {
		if got, body := rawGet(t, "127.0.0.3", addr, "GET", target); got != http.StatusOK || body != "ok "+want+"\n" {
			t.Errorf("GET %s reached the upstream as %q (status %d), want %q", target, body, got, want)
		}
	}
}

// TestReverseRefusesConnect checks that a reverse-proxy listener answers
// CONNECT with 405, whatever its target, before any route or limit.
func TestReverseRefusesConnect(t *testing.T) { bothServers(t, testReverseRefusesConnect) }

func testReverseRefusesConnect(t *testing.T) {
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - name: api
        path_prefix: /api
        upstreams: ["{{backend}}"]
        limit: {permits: 1, release_tunnels: true}
`)
	addr := d.srv.Addr("web").String()
	for _, target := range []string{"/api/x", "app.test:443"} {
		if got, _ := rawGet(t, "127.0.0.2", addr, "CONNECT", target); got != http.StatusMethodNotAllowed {
			t.Errorf("CONNECT %s: %d, want 405", target, got)
		}
	}
	if n := d.backend.requests.Load(); n != 0 {
		t.Errorf("the upstream saw %d requests, want none", n)
	}
	if g := d.route("web", "api").Limit.Totals.Granted; g != 0 {
		t.Errorf("the route granted %d permits, want none", g)
	}
}
