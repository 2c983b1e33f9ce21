package daemon_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/daemon"
	"github.com/seed-a07d1050/portcullis/internal/logtest"
)

// syncBuffer is the test kit's log buffer, safe for the daemon's
// goroutines to write while a test reads it.
type syncBuffer = logtest.Buffer

func TestAccessLogAndJSONLogs(t *testing.T) { bothServers(t, testAccessLogAndJSONLogs) }

func testAccessLogAndJSONLogs(t *testing.T) {
	b := startBackend(t)
	cfg := parseConfig(t, `
log: {format: json, level: info, access_log: true}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - upstreams: ["{{backend}}"]
`, b.URL())
	var out syncBuffer
	srv, err := daemon.Start(cfg, daemon.Options{LogOutput: &out})
	if err != nil {
		t.Fatal(err)
	}
	c := clientFrom("127.0.0.2")
	if st, _, _ := get(t, c, "http://"+srv.Addr("web").String()+"/teapot?ms=1"); st != http.StatusOK {
		t.Fatalf("status %d", st)
	}
	c.CloseIdleConnections()
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	var access string
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Contains(line, `"msg":"access"`) {
			access = line
		}
	}
	for _, want := range []string{`"path":"/teapot"`, `"status":200`, `"client":"127.0.0.2"`, `"peer":"127.0.0.2:`, `"listener":"web"`} {
		if !strings.Contains(access, want) {
			t.Errorf("access line lacks %s: %q", want, access)
		}
	}
	if !strings.HasPrefix(strings.TrimSpace(out.String()), "{") {
		t.Errorf("log is not JSON: %q", out.String())
	}
}

// jsonLine is one JSON log line: its fields, and the keys written more than
// once (which a map would hide).
type jsonLine struct {
	fields map[string]any
	dups   []string
}

// parseJSONLines parses every line of a JSON log, failing t on a line that
// is not one JSON object.
func parseJSONLines(t *testing.T, text string) []jsonLine {
	t.Helper()
	var out []jsonLine
	for _, raw := range strings.Split(strings.TrimSpace(text), "\n") {
		dec := json.NewDecoder(strings.NewReader(raw))
		dec.UseNumber()
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			t.Fatalf("log line is not a JSON object: %q", raw)
		}
		l := jsonLine{fields: make(map[string]any)}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				t.Fatalf("log line %q: %v", raw, err)
			}
			key := tok.(string)
			var v any
			if err := dec.Decode(&v); err != nil {
				t.Fatalf("log line %q: %v", raw, err)
			}
			if _, dup := l.fields[key]; dup {
				l.dups = append(l.dups, key)
			}
			l.fields[key] = v
		}
		out = append(out, l)
	}
	return out
}

// TestRefusalLinesInJSON refuses a connection at accept and a request at
// its route limit with JSON logs, and checks the fields of both lines: each
// key once, reasons spelled as the metrics spell them, the count of lines
// left out under one name, and addresses as strings.
func TestRefusalLinesInJSON(t *testing.T) { bothServers(t, testRefusalLinesInJSON) }

func testRefusalLinesInJSON(t *testing.T) {
	b := startBackend(t)
	cfg := parseConfig(t, `
log: {format: json, level: info}
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    max_conns_per_client: 2
    routes:
      - name: r
        upstreams: ["{{backend}}"]
        limit: {permits: 1}
`, b.URL())
	var out syncBuffer
	srv, err := daemon.Start(cfg, daemon.Options{LogOutput: &out})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Shutdown(context.Background()) }()
	addr := srv.Addr("web").String()

	adminAddr := srv.AdminAddr().String()

	// 127.0.0.2 holds the route's one permit on its first connection, is
	// refused by the route limit on its second, and refused at accept on a
	// third (max_conns_per_client: 2).
	slowClient, second := clientFrom("127.0.0.2"), clientFrom("127.0.0.2")
	slow := getAsync(slowClient, "http://"+addr+"/?ms=1500")
	if !waitUntil(func() bool { return b.inFlight.Load() == 1 }) {
		t.Fatal("the slow request never reached the backend")
	}
	if st, _, _ := get(t, second, "http://"+addr+"/"); st != http.StatusTooManyRequests {
		t.Fatalf("second request: %d, want 429", st)
	}
	third := dialFrom(t, "127.0.0.2", addr)
	thirdAddr := third.LocalAddr().String()
	if !refusedAtOnce(t, third) {
		t.Fatal("a third connection of 127.0.0.2 was not refused at accept")
	}
	if r := await(t, slow); r.status != http.StatusOK {
		t.Fatalf("slow request: %d %v", r.status, r.err)
	}
	slowClient.CloseIdleConnections()
	second.CloseIdleConnections()
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	want := map[string]map[string]any{
		"portcullis started":            {"admin": adminAddr},
		"connlimit: connection refused": {"listener": "web", "reason": "client_cap", "peer": thirdAddr, "suppressed": json.Number("0")},
		"request refused":               {"limiter": "web/r/limit", "reason": "refused", "key": "127.0.0.2", "suppressed": json.Number("0")},
	}
	seen := make(map[string]bool)
	for _, l := range parseJSONLines(t, out.String()) {
		if len(l.dups) > 0 {
			t.Errorf("line %v writes %v more than once", l.fields, l.dups)
		}
		msg, _ := l.fields["msg"].(string)
		fields, ok := want[msg]
		if !ok {
			continue
		}
		seen[msg] = true
		for k, v := range fields {
			if l.fields[k] != v {
				t.Errorf("%q: %s = %#v, want %#v", msg, k, l.fields[k], v)
			}
		}
	}
	for msg := range want {
		if !seen[msg] {
			t.Errorf("no %q line in the log:\n%s", msg, out.String())
		}
	}
}
