package daemon_test

import (
	"runtime"
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/redistest"
)

// TestRoutePathsMatchTheRunningTables holds config.RoutePaths, which the
// daemon logs and check prints, to what the running tables do: for every
// route of a configuration covering each rule, the path the snapshot
// reports (decided from the built routes, the event loops and Alt-Svc)
// is the one RoutePaths names.
func TestRoutePathsMatchTheRunningTables(t *testing.T) {
	redis := redistest.Start(t)
	certFile, keyFile := certFiles(t)
	htpasswd := writeHtpasswd(t, t.TempDir(), testUsers...)
	tls := `tls: {cert_file: "` + certFile + `", key_file: "` + keyFile + `"}`
	texts := map[string]string{
		"routes": `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - {name: plain, path_prefix: /a, upstreams: ["{{backend}}"], limit: {permits: 4}, shadow_limit: {permits: 2}}
      - {name: rated, path_prefix: /b, upstreams: ["{{backend}}"], rate: {rate: 10r/s}}
      - {name: headed, path_prefix: /d, upstreams: ["{{backend}}"], rate: {rate: 10r/s, headers: always}}
      - {name: tls, path_prefix: /c, upstreams: ["https://127.0.0.1:1"]}
      - {name: named, upstreams: ["http://localhost:1"]}
  - name: netgo
    protocol: http
    listen: "127.0.0.1:0"
    http1_server: net/http
    routes: [{upstreams: ["{{backend}}"]}]
  - name: rated
    protocol: http
    listen: "127.0.0.1:0"
    rate: {rate: 10r/s}
    routes: [{upstreams: ["{{backend}}"]}]
  - name: authed
    protocol: http
    listen: "127.0.0.1:0"
    auth: {htpasswd: "` + htpasswd + `"}
    routes: [{upstreams: ["{{backend}}"]}]
  - name: secure
    protocol: https
    listen: "127.0.0.1:0"
    ` + tls + `
    routes: [{upstreams: ["{{backend}}"]}]
  - name: advertised
    protocol: https
    listen: "127.0.0.1:0"
    ` + tls + `
    routes: [{upstreams: ["{{backend}}"]}]
  - name: quic
    protocol: http3
    listen: "127.0.0.1:0"
    ` + tls + `
    routes_from: advertised
`,
		"cluster": `
admin: {listen: "127.0.0.1:0"}
cluster: {redis: {addrs: ["` + redis.Addr() + `"]}}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - {name: counted, path_prefix: /a, upstreams: ["{{backend}}"], limit: {permits: 4}}
      - {name: rated, path_prefix: /b, upstreams: ["{{backend}}"], rate: {rate: 10r/s}}
      - {name: open, upstreams: ["{{backend}}"]}
  - name: capped
    protocol: http
    listen: "127.0.0.1:0"
    client_limit: {permits: 8}
    routes: [{upstreams: ["{{backend}}"]}]
`,
	}
	for name, text := range texts {
		t.Run(name, func(t *testing.T) {
			d := startDaemon(t, text)
			cfg := parseConfig(t, text, d.backend.URL()).Effective()
			want := map[string]config.RoutePath{}
			for _, p := range cfg.RoutePaths(runtime.GOOS) {
				want[p.Listener+"/"+p.Route] = p
			}
			seen := map[config.DataPath]bool{}
			n := 0
			for _, l := range d.snapshot().Listeners {
				for _, r := range l.Routes {
					n++
					w, ok := want[l.Name+"/"+r.Name]
					switch {
					case !ok:
						t.Errorf("listener %s route %s: running, but RoutePaths does not name it", l.Name, r.Name)
					case r.Path != w.Path:
						t.Errorf("listener %s route %s: the tables serve it on %s, RoutePaths says %s", l.Name, r.Name, r.Path, w)
					}
					seen[r.Path] = true
				}
			}
			if n == 0 || n != len(want)-strings.Count(text, "routes_from") {
				t.Errorf("%d routes running, RoutePaths names %d", n, len(want))
			}
			if name == "routes" && runtime.GOOS == "linux" && len(seen) != 3 {
				t.Errorf("the configuration covers the three paths, the tables show %v", seen)
			}
		})
	}
}
