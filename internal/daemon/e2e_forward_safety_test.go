package daemon_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/daemon"
)

// startLogged starts a daemon from text (see startForward) that logs to a
// buffer, and returns both.
func startLogged(t *testing.T, text string) (*testDaemon, *syncBuffer) {
	t.Helper()
	b := startBackend(t)
	file := writeHtpasswd(t, t.TempDir(), testUsers...)
	var out syncBuffer
	srv, err := daemon.Start(parseConfig(t, strings.ReplaceAll(text, "{{htpasswd}}", file), b.URL()), daemon.Options{LogOutput: &out})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return &testDaemon{t: t, srv: srv, backend: b}, &out
}

// A forward listener's CONNECT reaches 443 only unless connect_ports says
// more; the 403 names the target and the port refused, and absolute-form
// requests keep destinations.ports.
func TestForwardConnectPorts(t *testing.T) {
	backendPort := func(d *testDaemon) string {
		_, port, _ := net.SplitHostPort(strings.TrimPrefix(d.backend.URL(), "http://"))
		return port
	}
	// The harness opens connect_ports for every test that does not name
	// it; this one keeps the default by naming it in a comment.
	d, _ := startLogged(t, `
listeners:
  - name: egress
    protocol: http
    listen: "127.0.0.1:0"
    mode: forward
    forward:
      destinations: {allow: ["127.0.0.0/8"]}
      # connect_ports left out: the default, 443
`)
	port := backendPort(d)
	target := "127.0.0.1:" + port
	tu, resp := d.openTunnel("egress", "127.0.0.3", target, "")
	body := readBody(t, resp)
	tu.c.Close()
	want := "forbidden: destination " + target + ` refused by rule "port ` + port + ` is not among the CONNECT ports (443)"`
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, want) {
		t.Errorf("CONNECT %s by default: %d %q, want 403 %q", target, resp.StatusCode, body, want)
	}
	tu, resp = d.openTunnel("egress", "127.0.0.3", "example.com:22", "")
	body = readBody(t, resp)
	tu.c.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "destination example.com:22 refused") || !strings.Contains(body, "port 22 ") {
		t.Errorf("CONNECT example.com:22: %d %q, want 403 naming example.com:22 and port 22", resp.StatusCode, body)
	}
	c := d.proxyClient("egress", "", "", "127.0.0.2")
	if st, body, _ := get(t, c, "http://"+target+"/"); st != http.StatusOK {
		t.Errorf("GET http://%s/: %d %q, want 200: destinations.ports still allows it", target, st, body)
	}

	d, _ = startLogged(t, `
listeners:
  - name: egress
    protocol: http
    listen: "127.0.0.1:0"
    mode: forward
    forward:
      destinations: {allow: ["127.0.0.0/8"]}
      connect_ports: [443, "1024-65535"]
`)
	target = "127.0.0.1:" + backendPort(d)
	tu, resp = d.openTunnel("egress", "127.0.0.3", target, "")
	tu.c.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("CONNECT %s with connect_ports [443, 1024-65535]: %d, want 200", target, resp.StatusCode)
	}
}

// Without auth and allow_file, a forward listener serves loopback and
// private clients only, deciding on the client the daemon believes (here
// the one a trusted proxy names), and refuses others with 403 and a log
// line saying how to open it. allow_public_clients opens it; auth closes
// it again with 407.
func TestForwardLocalClientsOnly(t *testing.T) {
	const text = `
listeners:
  - name: egress
    protocol: http
    listen: "127.0.0.1:0"
    mode: forward
    trusted_proxies: ["127.0.0.9/32"]
    forward:
      destinations: {allow: ["127.0.0.0/8"]}
`
	from := func(d *testDaemon, peer, xff string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, d.backend.URL()+"/", nil)
		if xff != "" {
			req.Header.Set("X-Forwarded-For", xff)
		}
		resp, err := d.proxyClient("egress", "", "", peer).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return resp.StatusCode, readBody(t, resp)
	}
	d, logs := startLogged(t, text)
	for _, tc := range []struct {
		name, peer, xff string
		want            int
	}{
		{"loopback", "127.0.0.2", "", http.StatusOK},
		{"private behind the trusted proxy", "127.0.0.9", "192.168.1.7", http.StatusOK},
		{"shared space behind the trusted proxy", "127.0.0.9", "100.64.1.7", http.StatusOK},
		{"public behind the trusted proxy", "127.0.0.9", "198.51.100.7", http.StatusForbidden},
		{"public named by an untrusted peer", "127.0.0.2", "198.51.100.7", http.StatusOK}, // the peer is the client
	} {
		st, body := from(d, tc.peer, tc.xff)
		if st != tc.want {
			t.Errorf("%s: %d %q, want %d", tc.name, st, body, tc.want)
		}
		if st == http.StatusForbidden && !strings.Contains(body, "198.51.100.7 is neither") {
			t.Errorf("%s: body %q does not name the client", tc.name, body)
		}
	}
	if !strings.Contains(logs.String(), "set one of them to serve it") || !strings.Contains(logs.String(), "client=198.51.100.7") {
		t.Errorf("no log line saying how to open the listener:\n%s", logs)
	}
	if n := d.backend.requests.Load(); n != 4 {
		t.Errorf("backend got %d requests, want 4 (the refused one never reaches it)", n)
	}

	d, _ = startLogged(t, strings.Replace(text, "forward:", "forward:\n      allow_public_clients: true", 1))
	if st, body := from(d, "127.0.0.9", "198.51.100.7"); st != http.StatusOK {
		t.Errorf("with allow_public_clients: %d %q, want 200", st, body)
	}
	d, _ = startLogged(t, strings.Replace(text, "trusted_proxies:", "auth: {htpasswd: \"{{htpasswd}}\"}\n    trusted_proxies:", 1))
	if st, body := from(d, "127.0.0.9", "198.51.100.7"); st != http.StatusProxyAuthRequired {
		t.Errorf("with auth, no credentials: %d %q, want 407 (auth decides)", st, body)
	}
}

// A forward listener bound beyond loopback logs a WARN at start and on
// every reload naming the listener and the setting that opens or closes
// it; so does an interception that skips verifying its targets.
func TestForwardExposureWarnings(t *testing.T) {
	ca := newTestCA(t, "Warn CA")
	for _, tc := range []struct {
		name, extra, listen string
		want                []string // substrings of one WARN line each; none: no warning
	}{
		{"loopback, local clients only", "", "127.0.0.1:0", nil},
		{"every interface, local clients only", "", "0.0.0.0:0",
			[]string{`listener=egress setting=forward.allow_public_clients`, "serves clients on loopback and private networks only"}},
		{"every interface, open", "      allow_public_clients: true\n", "0.0.0.0:0",
			[]string{`listener=egress setting=forward.allow_public_clients`, "anyone who reaches it may relay through it"}},
		{"insecure upstream", "      intercept:\n        ca_cert: " + ca.certFile + "\n        ca_key: " + ca.keyFile +
			"\n        upstream: {insecure_skip_verify_upstream: true}\n", "127.0.0.1:0",
			[]string{`setting=forward.intercept.upstream.insecure_skip_verify_upstream`, "are not verified"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := `
listeners:
  - name: egress
    protocol: http
    listen: "` + tc.listen + `"
    mode: forward
    forward:
      via: egress
` + tc.extra
			d, logs := startLogged(t, text)
			check := func(when string, n int) {
				t.Helper()
				got := 0
				for _, line := range strings.Split(logs.String(), "\n") {
					if len(tc.want) > 0 && strings.Contains(line, "level=WARN") && strings.Contains(line, tc.want[0]) && strings.Contains(line, tc.want[1]) {
						got++
					}
				}
				if len(tc.want) == 0 && strings.Contains(logs.String(), "level=WARN") {
					t.Errorf("%s: unexpected warning:\n%s", when, logs)
				}
				if len(tc.want) > 0 && got != n {
					t.Errorf("%s: %d warnings %q, want %d:\n%s", when, got, tc.want, n, logs)
				}
			}
			check("start", 1)
			cfg := parseConfig(t, text, d.backend.URL())
			cfg.Listeners[0].Listen = d.srv.Addr("egress").String()
			if err := d.srv.Reload(cfg); err != nil {
				t.Fatal(err)
			}
			check("reload", 2)
		})
	}
}

// An interception with insecure_skip_verify_upstream counts every TLS
// session it opens with a target in
// portcullis_intercept_upstream_unverified_sessions_total and in the
// snapshot; a verifying one counts none.
func TestInterceptUnverifiedSessionsCounted(t *testing.T) {
	for _, tc := range []struct {
		name, upstream string
		want           float64
	}{
		{"insecure", `{insecure_skip_verify_upstream: true}`, 1},
		{"verified", `{ca_file: "{{origin_ca}}"}`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := strings.Replace(interceptAuthed, `upstream: {ca_file: "{{origin_ca}}"}`, "upstream: "+tc.upstream, 1)
			d := startIntercept(t, text, "")
			c := d.icClient("alice", "alice-pw", "127.0.0.2", d.ca.pool, false)
			if st, body, _ := get(t, c, d.targetURL("/")); st != http.StatusOK {
				t.Fatalf("GET: %d %q", st, body)
			}
			if got := d.metric(`portcullis_intercept_upstream_unverified_sessions_total{listener="egress"}`); got != tc.want {
				t.Errorf("unverified sessions metric %v, want %v", got, tc.want)
			}
			if got := d.intercepted().Unverified; float64(got) != tc.want {
				t.Errorf("snapshot upstream_unverified_sessions %d, want %v", got, tc.want)
			}
		})
	}
}
