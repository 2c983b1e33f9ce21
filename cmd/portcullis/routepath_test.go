package main

import (
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/backend"
)

// TestRoutePathsLogged: at start and after each reload, the daemon logs
// once per route how its requests are served and why a route is off the
// event loops, as check prints it.
func TestRoutePathsLogged(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the event loops are Linux's")
	}
	b, err := backend.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const text = `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - {name: api, path_prefix: /api, upstreams: ["UPSTREAM"], limit: {permits: 2}}
      - {name: site, upstreams: ["UPSTREAM"], rate: {rate: 10r/s, headers: always}}
`
	file := filepath.Join(t.TempDir(), "portcullis.yaml")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(strings.ReplaceAll(text, "UPSTREAM", b.URL())), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(text)
	sig, logs := &signals{}, &syncBuffer{}
	_, code := startRun(t, []string{"run", "--config", file}, sig, io.Discard, logs)
	api := `msg="route path" listener=web route=api path=event_loops`
	siteRated := `msg="route path" listener=web route=site path=full_server why="the route's rate sends its RateLimit fields with every answer (headers: always)"`
	siteNow := `msg="route path" listener=web route=site path=event_loops`
	if !waitFor(func() bool { return strings.Contains(logs.String(), siteRated) }) || !strings.Contains(logs.String(), api) {
		t.Fatalf("no route path lines at start:\n%s", logs.String())
	}
	write(strings.Replace(text, `, rate: {rate: 10r/s, headers: always}`, "", 1))
	sig.send(syscall.SIGHUP)
	if !waitFor(func() bool { return strings.Contains(logs.String(), siteNow) }) {
		t.Fatalf("no route path lines after the reload:\n%s", logs.String())
	}
	if n := strings.Count(logs.String(), api); n != 2 {
		t.Errorf("%d lines for route api, want 2 (start, reload):\n%s", n, logs.String())
	}
	sig.send(syscall.SIGTERM)
	if c := waitCode(t, code); c != exitOK {
		t.Fatalf("exit code %d", c)
	}
}

// check prints each route's path as a comment before the effective
// configuration, as the daemon logs it.
func TestCheckPrintsRoutePaths(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the event loops are Linux's")
	}
	file := filepath.Join(t.TempDir(), "p.yaml")
	text := `listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:8080"
    routes:
      - {name: api, path_prefix: /api, upstreams: ["http://127.0.0.1:9000"]}
      - {name: tls, upstreams: ["https://127.0.0.1:9443"]}
`
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut strings.Builder
	if code := run([]string{"check", "--config", file}, &out, &errOut); code != exitOK {
		t.Fatalf("check: exit %d\n%s", code, errOut.String())
	}
	want := "# path: listener web route api: event_loops\n# path: listener web route tls: full_server (an https upstream, https://127.0.0.1:9443)\n"
	if !strings.Contains(out.String(), want) {
		t.Errorf("check output lacks\n%s\n%s", want, out.String())
	}
}
