package config_test

import (
	"strings"
	"testing"
)

func TestRoutePaths(t *testing.T) {
	const tls = "tls: {cert_file: testdata/files/server.crt, key_file: testdata/files/server.key}"
	for _, tc := range []struct {
		name, yaml, goos string
		want             []string // RoutePath.String of each route
	}{
		{"plain on linux", `
listeners:
  - {name: web, protocol: http, listen: ":80", routes: [{name: app, upstreams: ["http://10.0.0.1:8080"], limit: {permits: 4}}]}
`, "linux", []string{"listener web route app: event_loops"}},
		{"per route", `
listeners:
  - name: web
    protocol: http
    listen: ":80"
    routes:
      - {name: rated, path_prefix: /a, upstreams: ["http://10.0.0.1"], rate: {rate: 10r/s}}
      - {name: headed, path_prefix: /d, upstreams: ["http://10.0.0.1"], rate: {rate: 10r/s, headers: always}}
      - {name: tls, path_prefix: /b, upstreams: ["https://10.0.0.1"]}
      - {name: named, path_prefix: /c, upstreams: ["http://10.0.0.1", "http://app.internal:8080"]}
      - {name: plain, upstreams: ["http://[::1]:8080"]}
`, "linux", []string{
			"listener web route rated: event_loops",
			"listener web route headed: full_server (the route's rate sends its RateLimit fields with every answer (headers: always))",
			"listener web route tls: full_server (an https upstream, https://10.0.0.1)",
			"listener web route named: lean (an upstream named by host name, http://app.internal:8080: the event loops connect to IP addresses only)",
			"listener web route plain: event_loops",
		}},
		{"net/http", `
listeners:
  - {name: web, protocol: http, listen: ":80", http1_server: net/http, routes: [{upstreams: ["http://10.0.0.1"]}]}
`, "linux", []string{"listener web route route-0: full_server (http1_server is net/http)"}},
		{"listener rate and auth", `
listeners:
  - {name: a, protocol: http, listen: ":80", rate: {rate: 5r/s}, routes: [{upstreams: ["http://10.0.0.1"]}]}
  - {name: b, protocol: http, listen: ":81", auth: {htpasswd: testdata/files/users.htpasswd}, routes: [{upstreams: ["http://10.0.0.1"]}]}
`, "linux", []string{
			"listener a route route-0: full_server (the listener has a rate)",
			"listener b route route-0: full_server (the listener authenticates (auth))",
		}},
		{"cluster", `
cluster: {redis: {addrs: ["127.0.0.1:6379"]}}
listeners:
  - name: web
    protocol: http
    listen: ":80"
    routes:
      - {name: limited, path_prefix: /a, upstreams: ["http://10.0.0.1"], limit: {permits: 2}}
      - {name: rated, path_prefix: /b, upstreams: ["http://10.0.0.1"], rate: {rate: 10r/s}}
      - {name: open, upstreams: ["http://10.0.0.1"]}
`, "linux", []string{
			"listener web route limited: event_loops",
			"listener web route rated: full_server (the route's rate counts in the cluster (Redis))",
			"listener web route open: event_loops",
		}},
		{"https and http3", `
listeners:
  - {name: tls, protocol: https, listen: ":443", ` + tls + `, routes: [{upstreams: ["http://10.0.0.1"]}]}
  - {name: h3, protocol: http3, listen: ":443", ` + tls + `, routes_from: tls}
  - {name: alone, protocol: https, listen: ":8443", ` + tls + `, routes: [{upstreams: ["http://10.0.0.1"]}]}
`, "linux", []string{
			"listener tls route route-0: full_server (the listener advertises HTTP/3 (Alt-Svc), which the byte path does not add)",
			"listener h3 route route-0: full_server (HTTP/3: quic-go's server)",
			"listener alone route route-0: event_loops",
		}},
		{"other systems", `
listeners:
  - {name: web, protocol: http, listen: ":80", routes: [{upstreams: ["http://10.0.0.1"]}]}
`, "darwin", []string{"listener web route route-0: lean (no event loops on darwin)"}},
		{"windows", `
listeners:
  - {name: web, protocol: http, listen: ":80", routes: [{upstreams: ["http://10.0.0.1"]}]}
`, "windows", []string{"listener web route route-0: full_server (no byte path on windows)"}},
		{"forward and tcp listeners have no routes", `
listeners:
  - {name: egress, protocol: http, mode: forward, listen: "127.0.0.1:3128"}
  - {name: db, protocol: tcp, listen: ":5432", upstream: "10.0.0.1:5432"}
`, "linux", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustParse(t, tc.yaml).Effective()
			var got []string
			for _, p := range c.RoutePaths(tc.goos) {
				got = append(got, p.String())
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}
