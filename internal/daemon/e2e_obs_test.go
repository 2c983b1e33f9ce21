package daemon_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/daemon"
)

// startLoggingDaemon is startDaemon with the logger the daemon builds
// itself from the config's log section (the access log's fast path),
// writing into out.
func startLoggingDaemon(t *testing.T, text string, out *syncBuffer) *testDaemon {
	t.Helper()
	b := startBackend(t)
	cfg := parseConfig(t, text, b.URL())
	srv, err := daemon.Start(cfg, daemon.Options{LogOutput: out})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	d := &testDaemon{t: t, srv: srv, backend: b}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return d
}

// stop shuts the daemon down, which writes every access line waiting.
func (d *testDaemon) stop() {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := d.srv.Shutdown(ctx); err != nil {
		d.t.Fatalf("shutdown: %v", err)
	}
}

// accessLines returns the fields of the JSON access lines of log, failing
// t on a line that is not JSON or writes a key twice.
func accessLines(t *testing.T, log string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range parseJSONLines(t, log) {
		if l.fields["msg"] != "access" {
			continue
		}
		if len(l.dups) > 0 {
			t.Errorf("access line with keys written twice %v: %v", l.dups, l.fields)
		}
		out = append(out, l.fields)
	}
	return out
}

// findLine returns the one access line whose path is path and status is
// status, failing t unless there is exactly one.
func findLine(t *testing.T, lines []map[string]any, path string, status int) map[string]any {
	t.Helper()
	var found []map[string]any
	for _, l := range lines {
		if l["path"] == path && l["status"] == json.Number(strconv.Itoa(status)) {
			found = append(found, l)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d access lines for %s with status %d, want 1; lines:\n%v", len(found), path, status, lines)
	}
	return found[0]
}

// millisOf returns the number of a _ms field, or -1 when the line has
// none; it fails t on a field that is not a number.
func millisOf(t *testing.T, l map[string]any, key string) float64 {
	t.Helper()
	v, ok := l[key]
	if !ok {
		return -1
	}
	n, ok := v.(json.Number)
	if !ok {
		t.Fatalf("%s is %T %v, want a number", key, v, v)
	}
	f, err := n.Float64()
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return f
}

// wantFields fails t unless l has each field of want with that value;
// a value of nil means the field must be absent.
func wantFields(t *testing.T, what string, l map[string]any, want map[string]any) {
	t.Helper()
	for k, v := range want {
		got, ok := l[k]
		switch {
		case v == nil && ok:
			t.Errorf("%s: %s=%v, want none", what, k, got)
		case v != nil && got != v:
			t.Errorf("%s: %s=%v, want %v (line %v)", what, k, got, v, l)
		}
	}
}

// TestAccessLogOutcomes drives, over real sockets, each admission outcome
// the access line reports, in JSON: admitted (with the client a trusted
// proxy names, and the upstream's time), queued with its wait in a limit's
// queue or a rate's delay, refused because the queue is full or by a
// rate, and let through over a shadow limit. A refused request has no
// upstream time.
func TestAccessLogOutcomes(t *testing.T) { bothServers(t, testAccessLogOutcomes) }

func testAccessLogOutcomes(t *testing.T) {
	var out syncBuffer
	d := startLoggingDaemon(t, `
log: {format: json}
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    trusted_proxies: ["127.0.0.9/32"]
    routes:
      - name: slow
        path_prefix: /slow
        upstreams: ["{{backend}}"]
        limit: {permits: 1, queue: {size: 1, timeout: 10s}}
      - name: watched
        path_prefix: /watched
        upstreams: ["{{backend}}"]
        shadow_limit: {permits: 1}
      - name: rated
        path_prefix: /rated
        upstreams: ["{{backend}}"]
        rate: {rate: 1r/m, burst: 0}
      - name: paced
        path_prefix: /paced
        upstreams: ["{{backend}}"]
        rate: {rate: 2r/s, burst: 1}
      - name: rest
        upstreams: ["{{backend}}"]
`, &out)
	c := d.client("127.0.0.2")
	held := getAsync(c, d.url("web", "/slow/held?ms=600"))
	d.waitFor("the permit held", func() bool { return d.route("web", "slow").Limit.Totals.InUse == 1 })
	queued := getAsync(c, d.url("web", "/slow/queued?ms=1"))
	d.waitFor("1 waiter", func() bool { return d.route("web", "slow").Limit.Totals.Waiting == 1 })
	if st, _, _ := get(t, c, d.url("web", "/slow/refused")); st != http.StatusTooManyRequests {
		t.Fatalf("over the limit and the queue: %d, want 429", st)
	}
	for _, ch := range []<-chan result{held, queued} {
		if r := await(t, ch); r.err != nil || r.status != http.StatusOK {
			t.Fatalf("%d %v, want 200", r.status, r.err)
		}
	}

	over := getAsync(c, d.url("web", "/watched/held?ms=600"))
	d.waitFor("the shadow permit held", func() bool { return d.route("web", "watched").ShadowLimit.Totals.InUse == 1 })
	if st, _, _ := get(t, c, d.url("web", "/watched/over")); st != http.StatusOK {
		t.Fatalf("over the shadow limit: %d, want 200", st)
	}
	if r := await(t, over); r.status != http.StatusOK {
		t.Fatalf("held under the shadow limit: %d", r.status)
	}

	for i, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
		if st, _, _ := get(t, c, d.url("web", "/rated/"+strconv.Itoa(i))); st != want {
			t.Fatalf("rated request %d: %d, want %d", i, st, want)
		}
	}

	// The second comes well within the 500 ms the first took: the rate
	// delays it for the rest of them, as nginx's limit_req does.
	for i := range 2 {
		if st, _, _ := get(t, c, d.url("web", "/paced/"+strconv.Itoa(i))); st != http.StatusOK {
			t.Fatalf("paced request %d: %d", i, st)
		}
	}

	req, _ := http.NewRequest(http.MethodGet, d.url("web", "/forwarded"), nil)
	req.Header.Set("X-Forwarded-For", "203.0.113.7")
	resp, err := d.client("127.0.0.9").Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	d.stop()

	lines := accessLines(t, out.String())
	refused := findLine(t, lines, "/slow/refused", 429)
	wantFields(t, "queue full", refused, map[string]any{
		"admission": "refused", "reason": "queue_full", "limit": "route_limit", "route": "slow",
		"client": "127.0.0.2", "key": "127.0.0.2", "listener": "web", "upstream_ms": nil, "queued_ms": nil,
	})
	if !strings.HasPrefix(refused["peer"].(string), "127.0.0.2:") {
		t.Errorf("peer %v, want 127.0.0.2:port", refused["peer"])
	}
	q := findLine(t, lines, "/slow/queued", 200)
	wantFields(t, "queued", q, map[string]any{"admission": "queued", "route": "slow", "reason": nil, "limit": nil})
	if ms := millisOf(t, q, "queued_ms"); ms <= 0 {
		t.Errorf("queued request: queued_ms %v, want its wait", ms)
	}
	if ms, total := millisOf(t, q, "upstream_ms"), millisOf(t, q, "duration_ms"); ms <= 0 || total < ms {
		t.Errorf("queued request: upstream_ms %v duration_ms %v, want 0 < upstream ≤ duration", ms, total)
	}
	held200 := findLine(t, lines, "/slow/held", 200)
	wantFields(t, "held", held200, map[string]any{"admission": "admitted", "queued_ms": nil})
	if ms := millisOf(t, held200, "upstream_ms"); ms < 500 {
		t.Errorf("upstream_ms %v for a backend answering after 600 ms", ms)
	}
	wantFields(t, "shadow over", findLine(t, lines, "/watched/over", 200), map[string]any{
		"admission": "shadow_over", "limit": "shadow_limit", "route": "watched", "reason": nil,
	})
	wantFields(t, "under the shadow limit", findLine(t, lines, "/watched/held", 200), map[string]any{"admission": "admitted"})
	wantFields(t, "rate", findLine(t, lines, "/rated/1", 429), map[string]any{
		"admission": "refused", "reason": "rate", "limit": "rate", "route": "rated", "key": "127.0.0.2", "upstream_ms": nil,
	})
	wantFields(t, "paced at once", findLine(t, lines, "/paced/0", 200), map[string]any{"admission": "admitted", "queued_ms": nil, "key": "127.0.0.2"})
	paced := findLine(t, lines, "/paced/1", 200)
	wantFields(t, "paced", paced, map[string]any{"admission": "queued", "route": "paced", "key": "127.0.0.2", "limit": nil})
	if ms := millisOf(t, paced, "queued_ms"); ms <= 0 || ms > 500 {
		t.Errorf("delayed by the rate: queued_ms %v, want the rest of 500 ms", ms)
	}
	fwd := findLine(t, lines, "/forwarded", 200)
	wantFields(t, "forwarded", fwd, map[string]any{"client": "203.0.113.7", "route": "rest", "admission": "admitted", "key": nil})
	if !strings.HasPrefix(fwd["peer"].(string), "127.0.0.9:") {
		t.Errorf("peer %v, want the proxy 127.0.0.9", fwd["peer"])
	}
	for _, l := range lines {
		if millisOf(t, l, "duration_ms") < 0 {
			t.Errorf("no duration_ms: %v", l)
		}
	}
}

// TestAccessLogOnByDefault: without access_log the daemon logs every
// exchange, in text; access_log: false logs none.
func TestAccessLogOnByDefault(t *testing.T) {
	const text = `
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - name: r
        upstreams: ["{{backend}}"]
`
	for _, tt := range []struct {
		name, log string
		want      int
	}{
		{"unset", "", 3},
		{"false", "log: {access_log: false}\n", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out syncBuffer
			d := startLoggingDaemon(t, tt.log+text, &out)
			c := d.client("127.0.0.2")
			for range 3 {
				if st, _, _ := get(t, c, d.url("web", "/x")); st != http.StatusOK {
					t.Fatalf("status %d", st)
				}
			}
			d.stop()
			n := strings.Count(out.String(), " msg=access ")
			if n != tt.want {
				t.Fatalf("%d access lines, want %d:\n%s", n, tt.want, out.String())
			}
			if n > 0 && !strings.Contains(out.String(), " client=127.0.0.2 peer=127.0.0.2:") {
				t.Errorf("text line without client and peer:\n%s", out.String())
			}
		})
	}
}

// A request authentication refuses is logged as refused by auth, and one
// it lets through carries the user its limit counted as key.
func TestAccessLogAuthRefusal(t *testing.T) {
	var out syncBuffer
	pw := writeHtpasswd(t, t.TempDir(), "alice", "alice-pw")
	d := startLoggingDaemon(t, strings.ReplaceAll(`
log: {format: json}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    auth: {htpasswd: "{{htpasswd}}"}
    routes:
      - name: r
        upstreams: ["{{backend}}"]
        limit: {key: user, permits: 4}
`, "{{htpasswd}}", pw), &out)
	c := d.client("127.0.0.2")
	for _, tt := range []struct {
		path, password string
		want           int
	}{{"/in", "alice-pw", http.StatusOK}, {"/out", "guess", http.StatusUnauthorized}} {
		req, _ := http.NewRequest(http.MethodGet, d.url("web", tt.path), nil)
		req.SetBasicAuth("alice", tt.password)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Fatalf("%s: %d, want %d", tt.path, resp.StatusCode, tt.want)
		}
	}
	d.stop()
	lines := accessLines(t, out.String())
	wantFields(t, "authenticated", findLine(t, lines, "/in", 200), map[string]any{
		"admission": "admitted", "key": "alice", "route": "r", "limit": nil,
	})
	wantFields(t, "wrong password", findLine(t, lines, "/out", 401), map[string]any{
		"admission": "refused", "limit": "auth", "reason": "unauthorized", "route": nil, "upstream_ms": nil,
	})
}

// Behind a load balancer speaking the PROXY protocol, the access line's
// client is the one the PROXY header names, as the limits count it, and
// so is its key.
func TestAccessLogClientFromProxyProtocol(t *testing.T) {
	var out syncBuffer
	d := startLoggingDaemon(t, `
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    trusted_proxies: [127.0.0.5/32]
    proxy_protocol: true
    client_limit: {permits: 4}
    routes:
      - name: r
        upstreams: ["{{backend}}"]
`, &out)
	c := dialFrom(t, "127.0.0.5", d.srv.Addr("web").String())
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(waitLimit))
	if _, err := c.Write([]byte("PROXY TCP4 203.0.113.7 127.0.0.1 40000 80\r\n" +
		"GET /pp HTTP/1.1\r\nHost: site.example\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	c.Close()
	d.stop()
	line := grep(out.String(), "path=/pp ")
	for _, want := range []string{" client=203.0.113.7 peer=203.0.113.7:40000 key=203.0.113.7 route=r ", " status=200 ", " admission=admitted"} {
		if !strings.Contains(line, want) {
			t.Errorf("access line lacks %q: %s", want, line)
		}
	}
}

// A forward listener's own refusal, a destination its policy denies, is
// logged as refused by forward, reason denied.
func TestAccessLogForwardDenied(t *testing.T) {
	var out syncBuffer
	d := startLoggingDaemon(t, `
log: {format: json}
listeners:
  - name: egress
    protocol: http
    listen: "127.0.0.1:0"
    mode: forward
    forward: {}
`, &out)
	proxyURL, _ := url.Parse("http://" + d.srv.Addr("egress").String())
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}, Timeout: waitLimit}
	defer c.CloseIdleConnections()
	st, _, _ := get(t, c, d.backend.URL()+"/loopback")
	if st != http.StatusForbidden {
		t.Fatalf("a loopback destination: %d, want 403 by the default policy", st)
	}
	d.stop()
	wantFields(t, "denied", findLine(t, accessLines(t, out.String()), "/loopback", 403), map[string]any{
		"admission": "refused", "limit": "forward", "reason": "denied", "listener": "egress", "upstream_ms": nil,
	})
}

// TestAccessClientOfEachRequestOnOneConnection sends requests naming
// different clients in X-Forwarded-For over one kept-alive connection
// from a trusted proxy, and over one from an untrusted peer: each access
// line names the client its own request's header names behind the
// trusted proxy, and the peer otherwise. The loops know the client of a
// connection's every request once when the peer is it.
func TestAccessClientOfEachRequestOnOneConnection(t *testing.T) {
	bothServers(t, testAccessClientOfEachRequestOnOneConnection)
}

func testAccessClientOfEachRequestOnOneConnection(t *testing.T) {
	for _, format := range []string{"json", "text"} {
		var out syncBuffer
		d := startLoggingDaemon(t, `
log: {format: `+format+`}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    trusted_proxies: ["127.0.0.9/32"]
    routes:
      - name: r
        upstreams: ["{{backend}}"]
`, &out)
		want := map[string]string{} // path: client
		for _, tc := range []struct {
			peer    string
			xff     []string
			clients []string
		}{
			{"127.0.0.9", []string{"203.0.113.1", "203.0.113.2", "203.0.113.1"}, []string{"203.0.113.1", "203.0.113.2", "203.0.113.1"}},
			{"127.0.0.2", []string{"203.0.113.3", "203.0.113.4"}, []string{"127.0.0.2", "127.0.0.2"}},
		} {
			conn := dialFrom(t, tc.peer, d.srv.Addr("web").String())
			_ = conn.SetDeadline(time.Now().Add(2 * waitLimit))
			br := bufio.NewReader(conn)
			for i, xff := range tc.xff {
				path := "/" + tc.peer + "/" + strconv.Itoa(i)
				want[path] = tc.clients[i]
				req := "GET " + path + " HTTP/1.1\r\nHost: web.test\r\nX-Forwarded-For: " + xff + "\r\n\r\n"
				if _, err := conn.Write([]byte(req)); err != nil {
					t.Fatal(err)
				}
				readKeptOK(t, br, tc.peer+", request "+strconv.Itoa(i))
			}
			conn.Close()
		}
		d.stop()
		got := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			path, client := accessField(t, format, line, "path"), accessField(t, format, line, "client")
			if accessField(t, format, line, "msg") == "access" {
				got[path] = client
			}
		}
		for path, client := range want {
			if got[path] != client {
				t.Errorf("%s: the access line of %s names client %q, want %q", format, path, got[path], client)
			}
		}
	}
}

// accessField returns the value of key in a log line of format (json or
// text, whose values here are never quoted), "" when it has none.
func accessField(t *testing.T, format, line, key string) string {
	t.Helper()
	if format == "json" {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("a log line that is not JSON: %q: %v", line, err)
		}
		s, _ := m[key].(string)
		return s
	}
	for _, f := range strings.Fields(line) {
		if k, v, ok := strings.Cut(f, "="); ok && k == key {
			return v
		}
	}
	return ""
}
