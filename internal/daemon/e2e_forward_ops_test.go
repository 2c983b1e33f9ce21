package daemon_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/admin"
)

// TestForwardDestinationPolicyByDefault checks that a forward listener
// without destinations refuses loopback, private, IPv6 loopback, the cloud
// metadata service and a name resolving to loopback, for absolute-form
// requests and CONNECT alike, each answer naming the rule; and that
// nothing reaches the loopback backend.
func TestForwardDestinationPolicyByDefault(t *testing.T) {
	defaultServer(t, testForwardDestinationPolicyByDefault)
}

func testForwardDestinationPolicyByDefault(t *testing.T) {
	d, _ := startForward(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: egress
    protocol: http
    listen: "127.0.0.1:0"
    mode: forward
    forward: {connect_ports: ["80", "443", "1024-65535"]}  # so that the address rules decide CONNECTs too
`)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(d.backend.URL(), "http://"))
	c := d.proxyClient("egress", "", "", "127.0.0.2")
	for _, tc := range []struct {
		name, authority string
		rules           []string // the body names one of them
	}{
		{"loopback", "127.0.0.1:" + port, []string{`"loopback 127.0.0.0/8 (RFC 1122)"`}},
		{"private", "10.0.0.1:" + port, []string{`"private-use 10.0.0.0/8 (RFC 1918)"`}},
		{"IPv6 loopback", "[::1]:" + port, []string{`"loopback ::1/128 (RFC 4291)"`}},
		{"metadata service", "169.254.169.254:80", []string{`"cloud metadata service 169.254.169.254 (link-local, RFC 3927)"`}},
		{"name resolving to loopback", "localhost:" + port, []string{`"loopback 127.0.0.0/8 (RFC 1122)"`, `"loopback ::1/128 (RFC 4291)"`}},
		{"mail port", "192.0.2.1:25", []string{`"port 25 is not among the allowed ports (80, 443, 1024-65535)"`, `"port 25 is not among the CONNECT ports (80, 443, 1024-65535)"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, body, _ := get(t, c, "http://"+tc.authority+"/")
			if st != http.StatusForbidden || !containsAny(body, tc.rules) {
				t.Errorf("GET http://%s/: %d %q, want 403 naming %s", tc.authority, st, body, tc.rules[0])
			}
			tu, resp := d.openTunnel("egress", "127.0.0.3", tc.authority, "")
			body = readBody(t, resp)
			tu.c.Close()
			if resp.StatusCode != http.StatusForbidden || !containsAny(body, tc.rules) {
				t.Errorf("CONNECT %s: %d %q, want 403 naming %s", tc.authority, resp.StatusCode, body, tc.rules[0])
			}
		})
	}
	if n := d.backend.requests.Load(); n != 0 {
		t.Fatalf("the loopback backend got %d requests", n)
	}
	if f := d.forwardOf("egress"); f.Denied != 12 || f.TunnelsOpened != 0 {
		t.Fatalf("forward snapshot %+v, want 12 denials and no tunnel", f)
	}
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// forwardFailures is a forward listener with every kind of limit, for the
// failure paths.
const forwardFailures = `
admin: {listen: "127.0.0.1:0"}
shutdown_timeout: 1s
listeners:
  - name: egress
    protocol: http
    listen: "127.0.0.1:0"
    mode: forward
    client_limit: {permits: 8}
    auth: {htpasswd: "{{htpasswd}}"}
    forward:
      destinations: {allow: ["127.0.0.0/8"]}
      dial_timeout: 2s
      limits:
        - {key: target_host, permits: 8}
        - {key: proxy_user, permits: 8, queue: {size: 4, timeout: 5s}}
`

// allIdle reports whether every limit of the listener is back to zero and
// no tunnel is open.
func (d *testDaemon) allIdle(listener string) bool {
	l := d.listenerNow(listener)
	if l.ClientLimit != nil && l.ClientLimit.Totals.InUse+l.ClientLimit.Totals.Waiting != 0 {
		return false
	}
	for _, lim := range l.Forward.Limits {
		if lim.Totals.InUse+lim.Totals.Waiting != 0 {
			return false
		}
	}
	return l.Forward.TunnelsOpen == 0
}

func (d *testDaemon) inUse(listener string) int {
	l := d.listenerNow(listener)
	n := l.ClientLimit.Totals.InUse
	for _, lim := range l.Forward.Limits {
		n += lim.Totals.InUse
	}
	return n
}

// listenerNow reads the snapshot of the named listener in process, which
// works after shutdown too.
func (d *testDaemon) listenerNow(name string) admin.ListenerSnapshot {
	d.t.Helper()
	for _, l := range d.srv.Snapshot().Listeners {
		if l.Name == name {
			return l
		}
	}
	d.t.Fatalf("no listener %s", name)
	return admin.ListenerSnapshot{}
}

// resetConn closes c with a TCP RST.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// TestForwardPermitsComeBack drives the failure paths of a forward
// listener and checks after each that every permit came back: a client
// reset during a request and during a tunnel, a target that closes without
// answering, a refused connection, a reload during a tunnel, and shutdown
// with a tunnel and a request in flight.
func TestForwardPermitsComeBack(t *testing.T) { defaultServer(t, testForwardPermitsComeBack) }

func testForwardPermitsComeBack(t *testing.T) {
	d, file := startForward(t, forwardFailures)
	d.manualStop = true
	alice := basicAuth("alice", "alice-pw")
	target := newGatedTarget(t, false)
	echo := tcpEcho(t)

	t.Run("client reset during a request", func(t *testing.T) {
		c := dialFrom(t, "127.0.0.2", d.srv.Addr("egress").String())
		_, _ = io.WriteString(c, "GET "+target.url("/slow")+" HTTP/1.1\r\nHost: "+target.addr+"\r\nProxy-Authorization: "+alice+"\r\n\r\n")
		d.waitFor("the request at the target", func() bool { return target.inFlight.Load() == 1 })
		if n := d.inUse("egress"); n != 3 {
			t.Fatalf("%d permits in use, want 3 (client, target, user)", n)
		}
		resetConn(c)
		d.waitFor("permits back after the reset", func() bool { return d.allIdle("egress") })
	})

	t.Run("client reset during a tunnel", func(t *testing.T) {
		tu, resp := d.openTunnel("egress", "127.0.0.2", echo, alice)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT: %d", resp.StatusCode)
		}
		tu.echo(t, "ping")
		if n := d.inUse("egress"); n != 3 {
			t.Fatalf("%d permits in use by the tunnel, want 3", n)
		}
		resetConn(tu.c)
		d.waitFor("permits back after the reset", func() bool { return d.allIdle("egress") })
	})

	t.Run("target closes without answering", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				buf := make([]byte, 1024)
				_, _ = c.Read(buf)
				c.Close()
			}
		}()
		c := d.proxyClient("egress", "alice", "alice-pw", "127.0.0.2")
		if st, body, _ := get(t, c, "http://"+ln.Addr().String()+"/"); st != http.StatusBadGateway {
			t.Fatalf("a target closing without answer: %d %q, want 502", st, body)
		}
		d.waitFor("permits back after the target failed", func() bool { return d.allIdle("egress") })
	})

	t.Run("connection refused", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := ln.Addr().String()
		ln.Close()
		c := d.proxyClient("egress", "alice", "alice-pw", "127.0.0.2")
		if st, body, _ := get(t, c, "http://"+closed+"/"); st != http.StatusBadGateway || !strings.Contains(body, "connection refused") {
			t.Fatalf("a refused connection: %d %q, want 502", st, body)
		}
		_, resp := d.openTunnel("egress", "127.0.0.2", closed, alice)
		if resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("CONNECT to a refused port: %d, want 502", resp.StatusCode)
		}
		d.waitFor("permits back after refused connections", func() bool { return d.allIdle("egress") })
		// Both count as upstream errors of the listener, by kind.
		want := `portcullis_upstream_errors_total{kind="refused",listener="egress",route=""} 2`
		if m := d.metrics(); !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, grepLines(m, "portcullis_upstream_errors_total"))
		}
	})

	t.Run("reload during a tunnel", func(t *testing.T) {
		tu, resp := d.openTunnel("egress", "127.0.0.2", echo, alice)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT: %d", resp.StatusCode)
		}
		tu.echo(t, "before")
		// A new Via makes a new proxy; the limits stay as they are, with
		// the tunnel's permits.
		next := strings.Replace(forwardFailures, "dial_timeout: 2s", "dial_timeout: 2s\n      via: egress-2", 1)
		if err := d.srv.Reload(d.reloadConfig(next, file)); err != nil {
			t.Fatal(err)
		}
		tu.echo(t, "after the reload")
		if n := d.inUse("egress"); n != 3 {
			t.Fatalf("%d permits in use after the reload, want the tunnel's 3", n)
		}
		c := d.proxyClient("egress", "alice", "alice-pw", "127.0.0.4")
		_, body, _ := get(t, c, target.url("/echo"))
		if !strings.Contains(body, "1.1 egress-2") {
			t.Fatalf("a new request went through the old proxy: %s", body)
		}
		tu.c.Close()
		d.waitFor("permits back after the tunnel of the old proxy closed", func() bool { return d.allIdle("egress") })
	})

	t.Run("shutdown", func(t *testing.T) {
		tu, resp := d.openTunnel("egress", "127.0.0.2", echo, alice)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT: %d", resp.StatusCode)
		}
		tu.echo(t, "ping")
		c := d.proxyClient("egress", "alice", "alice-pw", "127.0.0.3")
		slow := getAsync(c, target.url("/slow"))
		d.waitFor("a request at the target", func() bool { return target.inFlight.Load() == 1 })
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		if err := d.srv.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("shutdown with a tunnel open: %v, want the deadline", err)
		}
		if _, err := io.ReadAll(tu.br); err != nil && isTimeout(err) {
			t.Fatal("the tunnel stayed open after shutdown")
		}
		await(t, slow)
		if !d.allIdle("egress") {
			t.Fatalf("permits held after shutdown: %+v", d.srv.Snapshot())
		}
	})
}

// TestForwardAuthReload reloads the htpasswd file: a new user works at
// once; an unchanged auth block keeps its failure counts; a file that does
// not load fails the whole reload, and nothing of it applies.
func TestForwardAuthReload(t *testing.T) { defaultServer(t, testForwardAuthReload) }

func testForwardAuthReload(t *testing.T) {
	const text = `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: egress
    protocol: http
    listen: "127.0.0.1:0"
    mode: forward
    auth: {htpasswd: "{{htpasswd}}", failures: {burst: 2, interval: 1h}}
    forward:
      destinations: {allow: ["127.0.0.0/8"]}
`
	d, file := startForward(t, text)
	target := newGatedTarget(t, false)
	status := func(user, pass, ip string) int {
		t.Helper()
		st, _, _ := get(t, d.proxyClient("egress", user, pass, ip), target.url("/echo"))
		return st
	}
	// 127.0.0.9 uses up its budget of two failures.
	for range 2 {
		if st := status("alice", "wrong", "127.0.0.9"); st != http.StatusProxyAuthRequired {
			t.Fatalf("a wrong password: %d", st)
		}
	}
	if st := status("alice", "alice-pw", "127.0.0.9"); st != http.StatusTooManyRequests {
		t.Fatalf("over the failure budget: %d, want 429", st)
	}

	// A reload with the file and the auth block unchanged keeps the cache:
	// alice, verified once, is not checked by bcrypt again.
	if st := status("alice", "alice-pw", "127.0.0.2"); st != http.StatusOK {
		t.Fatalf("alice: %d", st)
	}
	if err := d.srv.Reload(d.reloadConfig(text, file)); err != nil {
		t.Fatal(err)
	}
	before := d.listener("egress").Auth
	if st := status("alice", "alice-pw", "127.0.0.5"); st != http.StatusOK {
		t.Fatalf("alice after the reload: %d", st)
	}
	if after := d.listener("egress").Auth; after.Verified != before.Verified || after.CacheHits != before.CacheHits+1 {
		t.Fatalf("auth before %+v, after %+v: want alice found in the cache kept by the reload", before, after)
	}

	// carol is added: she works after the reload, and the failure count
	// of 127.0.0.9 stays (the auth block did not change).
	writeHtpasswd(t, strings.TrimSuffix(file, "/users.htpasswd"), append(testUsers, "carol", "carol-pw")...)
	if err := d.srv.Reload(d.reloadConfig(text, file)); err != nil {
		t.Fatal(err)
	}
	if st := status("carol", "carol-pw", "127.0.0.2"); st != http.StatusOK {
		t.Fatalf("the new user after the reload: %d", st)
	}
	if st := status("alice", "alice-pw", "127.0.0.9"); st != http.StatusTooManyRequests {
		t.Fatalf("after the reload, the client over budget: %d, want 429 still", st)
	}

	// A broken file fails the reload, and the other change of that reload
	// (a new Via) does not apply either. (The file breaks after the
	// configuration was read, as it may between a check and a SIGHUP.)
	next := strings.Replace(text, "allow: [\"127.0.0.0/8\"]}", "allow: [\"127.0.0.0/8\"]}\n      via: changed", 1)
	cfg := d.reloadConfig(next, file)
	if err := os.WriteFile(file, []byte("carol:$apr1$x$y\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := d.srv.Reload(cfg)
	if err == nil || !strings.Contains(err.Error(), "users.htpasswd:1") {
		t.Fatalf("reload with a broken htpasswd: %v, want an error naming the file and line", err)
	}
	if st := status("carol", "carol-pw", "127.0.0.3"); st != http.StatusOK {
		t.Fatalf("after the failed reload, carol: %d", st)
	}
	_, body, _ := get(t, d.proxyClient("egress", "carol", "carol-pw", "127.0.0.3"), target.url("/echo"))
	if !strings.Contains(body, "1.1 portcullis") || strings.Contains(body, "changed") {
		t.Fatalf("the failed reload changed the proxy: %s", body)
	}

	// A changed realm makes a new authenticator.
	writeHtpasswd(t, strings.TrimSuffix(file, "/users.htpasswd"), testUsers...)
	next = strings.Replace(text, "failures:", "realm: egress, failures:", 1)
	if err := d.srv.Reload(d.reloadConfig(next, file)); err != nil {
		t.Fatal(err)
	}
	_, _, h := get(t, d.proxyClient("egress", "", "", "127.0.0.4"), target.url("/echo"))
	if got := h.Get("Proxy-Authenticate"); got != `Basic realm="egress", charset="UTF-8"` {
		t.Fatalf("realm after the reload: %q", got)
	}
	if st := status("alice", "alice-pw", "127.0.0.9"); st != http.StatusOK {
		t.Fatalf("a new authenticator starts with whole budgets: %d", st)
	}
}

// TestReverseUserKeyIsVerified limits a reverse route by user behind the
// listener's authentication: the user is the verified one, a name in
// Authorization without the right password gets 401, and the upstream
// never sees the credentials.
func TestReverseUserKeyIsVerified(t *testing.T) { defaultServer(t, testReverseUserKeyIsVerified) }

func testReverseUserKeyIsVerified(t *testing.T) {
	d, _ := startForward(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    auth: {htpasswd: "{{htpasswd}}", realm: site}
    routes:
      - upstreams: ["{{backend}}"]
        limit: {key: user, permits: 1}
`)
	do := func(creds, path string) (int, string, http.Header) {
		t.Helper()
		req, _ := http.NewRequest("GET", d.url("web", path), nil)
		if creds != "" {
			req.Header.Set("Authorization", creds)
		}
		resp, err := d.client("127.0.0.2").Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return resp.StatusCode, readBody(t, resp), resp.Header
	}
	st, _, h := do("", "/")
	if st != http.StatusUnauthorized || h.Get("WWW-Authenticate") != `Basic realm="site", charset="UTF-8"` {
		t.Fatalf("no credentials: %d %v", st, h)
	}
	if st, _, _ := do(basicAuth("mallory", "anything"), "/"); st != http.StatusUnauthorized {
		t.Fatalf("an invented user: %d, want 401", st)
	}
	st, body, _ := do(basicAuth("alice", "alice-pw"), "/headers")
	if st != http.StatusOK || strings.Contains(body, "Authorization") {
		t.Fatalf("alice: %d %s (the upstream must not see the credentials)", st, body)
	}
	slow := make(chan int, 1)
	go func() { st, _, _ := do(basicAuth("alice", "alice-pw"), "/?ms=1500"); slow <- st }()
	d.waitFor("alice's slow request", func() bool { return d.backend.inFlight.Load() == 1 })
	if st, _, _ := do(basicAuth("alice", "alice-pw"), "/"); st != http.StatusTooManyRequests {
		t.Fatalf("alice's second request: %d, want 429", st)
	}
	if st, _, _ := do(basicAuth("bob", "bob-pw"), "/"); st != http.StatusOK {
		t.Fatalf("bob: %d", st)
	}
	if busy := d.route("web", "route-0").Limit.Busy; len(busy) != 1 || busy[0].Key != "alice" {
		t.Fatalf("busy keys %+v, want alice", busy)
	}
	if st := <-slow; st != http.StatusOK {
		t.Fatalf("alice's slow request: %d", st)
	}
}

// TestForwardMetricsAndSnapshot checks that /metrics shows the forward
// limits by key, the authentication outcomes and the tunnels, without any
// per-client label, and /debug/limits the busy users and targets.
func TestForwardMetricsAndSnapshot(t *testing.T) { defaultServer(t, testForwardMetricsAndSnapshot) }

func testForwardMetricsAndSnapshot(t *testing.T) {
	d, _ := startForward(t, forwardFailures)
	target := newGatedTarget(t, false)
	echo := tcpEcho(t)
	alice := d.proxyClient("egress", "alice", "alice-pw", "127.0.0.2")
	slow := getAsync(alice, target.url("/slow"))
	d.waitFor("the request at the target", func() bool { return target.inFlight.Load() == 1 })
	tu, resp := d.openTunnel("egress", "127.0.0.3", echo, basicAuth("bob", "bob-pw"))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	tu.echo(t, "ping")
	get(t, d.proxyClient("egress", "alice", "nope", "127.0.0.4"), target.url("/echo"))

	users := d.forwardLimit("egress", "proxy_user")
	if len(users.Busy) != 2 {
		t.Fatalf("proxy_user busy keys %+v, want alice and bob", users.Busy)
	}
	targets := d.forwardLimit("egress", "target_host")
	keys := map[string]bool{}
	for _, k := range targets.Busy {
		keys[k.Key] = true
	}
	if !keys[target.addr] || !keys[echo] {
		t.Fatalf("target_host busy keys %+v, want %s and %s", targets.Busy, target.addr, echo)
	}
	m := d.metrics()
	for _, want := range []string{
		`portcullis_exchanges_in_use{limit="proxy_user",listener="egress",route=""} 2`,
		`portcullis_exchanges_in_use{limit="target_host",listener="egress",route=""} 2`,
		`portcullis_exchanges_in_use{limit="client_limit",listener="egress",route=""} 2`,
		`portcullis_forward_tunnels_open{listener="egress"} 1`,
		`portcullis_forward_tunnels_total{listener="egress"} 1`,
		`portcullis_auth_requests_total{listener="egress",outcome="failed"} 1`,
		`portcullis_auth_requests_total{listener="egress",outcome="ok"} 2`,
		`portcullis_auth_users{listener="egress"} 2`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	for _, client := range []string{"127.0.0.2", "127.0.0.3", "alice", "bob"} {
		if strings.Contains(m, client) {
			t.Errorf("/metrics names %s: a per-client label", client)
		}
	}
	tu.c.Close()
	target.open()
	await(t, slow)
}
