package daemon_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/daemon"
)

// startLoggedFields starts a daemon from text, as startLogged does, for a
// configuration with JSON logs; stop shuts it down, which flushes the
// access lines, and returns the lines of msg "access".
func startLoggedFields(t *testing.T, text string) (srv *daemon.Server, b *testBackend, stop func() []jsonLine) {
	t.Helper()
	d, out := startLogged(t, text)
	return d.srv, d.backend, func() []jsonLine {
		if err := d.srv.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		var access []jsonLine
		for _, l := range parseJSONLines(t, out.String()) {
			if l.fields["msg"] == "access" {
				access = append(access, l)
			}
		}
		return access
	}
}

// A dry-run rate's access lines say what the rate would have done,
// enforcing, as nginx's limit_req_dry_run tells DELAYED_DRY_RUN from
// REJECTED_DRY_RUN: rate 1r/m with burst 1 admits the first request, would
// have delayed the second a minute and refused the third.
func TestAccessLogRateDryRun(t *testing.T) { bothServers(t, testAccessLogRateDryRun) }

func testAccessLogRateDryRun(t *testing.T) {
	srv, _, stop := startLoggedFields(t, `
log: {format: json, level: info}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    rate: {rate: 1r/m, burst: 1, dry_run: true}
    routes:
      - upstreams: ["{{backend}}"]
`)
	c := clientFrom("127.0.0.2")
	for i := range 3 {
		if st, _, _ := get(t, c, "http://"+srv.Addr("web").String()+"/n"+string(rune('1'+i))); st != http.StatusOK {
			t.Fatalf("request %d: %d", i+1, st)
		}
	}
	c.CloseIdleConnections()
	want := map[string][2]any{
		"/n1": {"admitted", nil},
		"/n2": {"shadow_over", "delayed"},
		"/n3": {"shadow_over", "rejected"},
	}
	lines := stop()
	if len(lines) != 3 {
		t.Fatalf("%d access lines, want 3", len(lines))
	}
	for _, l := range lines {
		w, ok := want[l.fields["path"].(string)]
		if !ok {
			t.Fatalf("unexpected line %v", l.fields)
		}
		if l.fields["admission"] != w[0] || l.fields["rate_dry_run"] != w[1] {
			t.Errorf("%v: admission=%v rate_dry_run=%v, want %v %v", l.fields["path"],
				l.fields["admission"], l.fields["rate_dry_run"], w[0], w[1])
		}
	}
}

// A request refused for queue_timeout waited the queue's timeout; its
// access line says so in queued_ms, as an admitted request's does.
func TestAccessLogQueueTimeoutQueuedMs(t *testing.T) {
	bothServers(t, testAccessLogQueueTimeoutQueuedMs)
}

func testAccessLogQueueTimeoutQueuedMs(t *testing.T) {
	srv, b, stop := startLoggedFields(t, `
log: {format: json, level: info}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - upstreams: ["{{backend}}"]
        limit: {permits: 1, queue: {size: 1, timeout: 150ms}}
`)
	addr := "http://" + srv.Addr("web").String()
	hold := getAsync(clientFrom("127.0.0.2"), addr+"/hold?ms=1500")
	if !waitUntil(func() bool { return b.inFlight.Load() == 1 }) {
		t.Fatal("the holder never reached the backend")
	}
	c := clientFrom("127.0.0.2")
	if st, _, _ := get(t, c, addr+"/late"); st != http.StatusServiceUnavailable && st != http.StatusTooManyRequests {
		t.Fatalf("the queued request: %d, want a refusal", st)
	}
	if r := await(t, hold); r.status != http.StatusOK {
		t.Fatalf("the holder: %d %v", r.status, r.err)
	}
	c.CloseIdleConnections()
	var found bool
	for _, l := range stop() {
		if l.fields["reason"] != "queue_timeout" {
			continue
		}
		found = true
		q, _ := l.fields["queued_ms"].(json.Number)
		if ms, err := q.Float64(); err != nil || ms != 150 {
			t.Errorf("queue_timeout line: queued_ms = %v, want 150 (the queue's timeout): %v", l.fields["queued_ms"], l.fields)
		}
	}
	if !found {
		t.Fatal("no access line with reason=queue_timeout")
	}
}

// A connection refused at accept is logged with its peer as host:port; the
// lines held back (one a second per listener) are counted, and the count
// is reported a second later by a line of its own even when no refusal
// follows to carry it.
func TestConnRefusalLineReportsSuppressed(t *testing.T) {
	b := startBackend(t)
	cfg := parseConfig(t, `
log: {format: json, level: info}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    max_conns_per_client: 1
    routes:
      - upstreams: ["{{backend}}"]
`, b.URL())
	out := new(syncBuffer)
	srv, err := daemon.Start(cfg, daemon.Options{LogOutput: out})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Shutdown(context.Background()) }()
	addr := srv.Addr("web").String()
	hold := dialFrom(t, "127.0.0.2", addr)
	defer hold.Close()
	if _, err := hold.Write([]byte("GET /?ms=1 HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	if !waitUntil(func() bool { return b.inFlight.Load() == 0 && srv.Snapshot().Listeners[0].Connections.Open == 1 }) {
		t.Fatal("the first connection was not admitted")
	}
	var ports []string
	for i := range 3 {
		c := dialFrom(t, "127.0.0.2", addr)
		ports = append(ports, c.LocalAddr().String())
		if !refusedAtOnce(t, c) {
			t.Fatalf("connection %d of 127.0.0.2 was not refused at accept", i+2)
		}
	}
	var refusal, summary map[string]any
	if !waitUntil(func() bool {
		refusal, summary = nil, nil
		for _, l := range parseJSONLines(t, out.String()) {
			switch l.fields["msg"] {
			case "connlimit: connection refused":
				refusal = l.fields
			case "connlimit: connection refusals suppressed":
				summary = l.fields
			}
		}
		return summary != nil
	}) {
		t.Fatalf("no line reports the suppressed refusals:\n%s", out.String())
	}
	if refusal["peer"] != ports[0] || refusal["suppressed"] != json.Number("0") {
		t.Errorf("refusal line %v: want peer %s (host:port) and suppressed 0", refusal, ports[0])
	}
	if summary["listener"] != "web" || summary["suppressed"] != json.Number("2") {
		t.Errorf("summary line %v: want listener web, suppressed 2", summary)
	}
}

// A listener's access_log.fields adds the query string, User-Agent and
// Referer to its access lines, in that order, after the default fields;
// another listener's lines keep the default fields only. A value slog
// would quote (a space in a User-Agent) is written as slog writes it.
func TestAccessLogOptionalFields(t *testing.T) { bothServers(t, testAccessLogOptionalFields) }

func testAccessLogOptionalFields(t *testing.T) {
	srv, _, stop := startLoggedFields(t, `
log: {format: json, level: info}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    access_log: {fields: [referer, query, user_agent]}
    routes:
      - upstreams: ["{{backend}}"]
  - name: plain
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - upstreams: ["{{backend}}"]
`)
	c := clientFrom("127.0.0.2")
	send := func(listener, target, ua, referer string) {
		req, err := http.NewRequest("GET", "http://"+srv.Addr(listener).String()+target, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("User-Agent", ua)
		if referer != "" {
			req.Header.Set("Referer", referer)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %d", listener, target, resp.StatusCode)
		}
	}
	send("web", "/a?x=1&y=2", "curl/8.5", "http://ref.test/p")
	send("web", "/b", "Mozilla/5.0 (X11; Linux)", "")
	send("plain", "/c?z=3", "curl/8.5", "http://ref.test/p")
	c.CloseIdleConnections()
	lines := stop()
	byPath := make(map[string]jsonLine)
	for _, l := range lines {
		byPath[l.fields["path"].(string)] = l
	}
	check := func(path string, want map[string]any) {
		l, ok := byPath[path]
		if !ok {
			t.Fatalf("no access line for %s", path)
		}
		for k, v := range want {
			if l.fields[k] != v {
				t.Errorf("%s: %s = %#v, want %#v", path, k, l.fields[k], v)
			}
		}
	}
	check("/a", map[string]any{"query": "x=1&y=2", "user_agent": "curl/8.5", "referer": "http://ref.test/p"})
	check("/b", map[string]any{"query": nil, "user_agent": "Mozilla/5.0 (X11; Linux)", "referer": nil})
	check("/c", map[string]any{"query": nil, "user_agent": nil, "referer": nil})
}
