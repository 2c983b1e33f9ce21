package daemon_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/daemon"
	"github.com/seed-a07d1050/portcullis/internal/redistest"
)

// TestForwardReclaimAfter sets reclaim_after to 1s: a plain request held
// past it loses its permit (and is cut), while an older CONNECT tunnel,
// established, keeps its own.
func TestForwardReclaimAfter(t *testing.T) { defaultServer(t, testForwardReclaimAfter) }

func testForwardReclaimAfter(t *testing.T) {
	d, _ := startForward(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: egress
    protocol: http
    listen: "127.0.0.1:0"
    mode: forward
    forward:
      destinations: {allow: ["127.0.0.0/8"]}
      limits: [{key: client_ip, permits: 1, reclaim_after: 1s}]
`)
	echo := tcpEcho(t)
	target := newGatedTarget(t, false)
	tu, resp := d.openTunnel("egress", "127.0.0.2", echo, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	tu.echo(t, "ping")
	slow := getAsync(d.proxyClient("egress", "", "", "127.0.0.3"), target.url("/slow"))
	d.waitFor("the request's permit reclaimed", func() bool {
		return d.forwardLimit("egress", "client_ip").Totals.Reclaimed == 1
	})
	if r := await(t, slow); r.err == nil && r.status == http.StatusOK {
		t.Fatal("the request whose permit was reclaimed went on to the end")
	}
	lim := d.forwardLimit("egress", "client_ip")
	if len(lim.Busy) != 1 || lim.Busy[0].Key != "127.0.0.2" || lim.Totals.Reclaimed != 1 {
		t.Fatalf("limit %+v: want only the tunnel's permit held, one reclaimed", lim)
	}
	tu.echo(t, "the tunnel, older than reclaim_after, is still open")
	tu.c.Close()
}

// TestForwardLimitsCountAcrossTheCluster runs two nodes sharing one Redis:
// a user holding its one permit on node A is refused on node B.
func TestForwardLimitsCountAcrossTheCluster(t *testing.T) {
	defaultServer(t, testForwardLimitsCountAcrossTheCluster)
}

func testForwardLimitsCountAcrossTheCluster(t *testing.T) {
	redis := redistest.Start(t)
	text := `
admin: {listen: "127.0.0.1:0"}
cluster:
  redis: {addrs: ["` + redis.Addr() + `"]}
  timeout: 2s        # this machine is shared: never fall back to the node's own count
  on_error: closed
  prefix: "test:` + strings.ReplaceAll(t.Name(), "/", "-") + `:"
listeners:
  - name: egress
    protocol: http
    listen: "127.0.0.1:0"
    mode: forward
    auth: {htpasswd: "{{htpasswd}}"}
    forward:
      destinations: {allow: ["127.0.0.0/8"]}
      limits: [{key: proxy_user, permits: 1}]
`
	a, file := startForward(t, text)
	nodeB, err := daemon.Start(parseConfig(t, strings.ReplaceAll(text, "{{htpasswd}}", file), a.backend.URL()), daemon.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = nodeB.Shutdown(context.Background()) }()
	target := newGatedTarget(t, false)
	slow := getAsync(a.proxyClient("egress", "alice", "alice-pw", "127.0.0.2"), target.url("/slow"))
	a.waitFor("alice's permit held on node A", func() bool { return target.inFlight.Load() == 1 })
	viaB := func(user, pass string) int {
		t.Helper()
		b := &testDaemon{t: t, srv: nodeB, backend: a.backend}
		st, _, _ := get(t, b.proxyClient("egress", user, pass, "127.0.0.3"), target.url("/echo"))
		return st
	}
	if st := viaB("alice", "alice-pw"); st != http.StatusTooManyRequests {
		t.Fatalf("alice on node B: %d, want 429 (one cluster-wide count)", st)
	}
	if st := viaB("bob", "bob-pw"); st != http.StatusOK {
		t.Fatalf("bob on node B: %d", st)
	}
	target.open()
	await(t, slow)
	if !waitUntil(func() bool { return viaB("alice", "alice-pw") == http.StatusOK }) {
		t.Fatal("node B never admitted alice after node A released her permit")
	}
}

// TestForwardSendTimeout asks the forward proxy for an endless body and
// never reads it: within send_timeout the exchange ends and its permit
// comes back, as on a reverse listener. A CONNECT tunnel, whose bounds are
// its own, outlives the listener's write_timeout and send_timeout while
// idle.
func TestForwardSendTimeout(t *testing.T) { defaultServer(t, testForwardSendTimeout) }

func testForwardSendTimeout(t *testing.T) {
	d, _ := startForward(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: egress
    protocol: http
    listen: "127.0.0.1:0"
    mode: forward
    send_timeout: 500ms
    write_timeout: 500ms
    forward:
      destinations: {allow: ["127.0.0.0/8"]}
      limits: [{key: client_ip, permits: 4}]
`)
	echo := tcpEcho(t)
	tu, resp := d.openTunnel("egress", "127.0.0.3", echo, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	c := dialFrom(t, "127.0.0.2", d.srv.Addr("egress").String())
	fmt.Fprintf(c, "GET %s/big HTTP/1.1\r\nHost: %s\r\n\r\n", d.backend.URL(), strings.TrimPrefix(d.backend.URL(), "http://"))
	select {
	case err := <-d.backend.bigEnded:
		if err == nil {
			t.Fatal("the whole endless body was sent to a client that reads nothing")
		}
	case <-time.After(waitLimit):
		t.Fatal("the stalled exchange was not ended")
	}
	d.waitFor("the stalled exchange's permit back", func() bool {
		return d.forwardLimit("egress", "client_ip").Totals.InUse == 1 // the tunnel's
	})
	time.Sleep(time.Second) // past write_timeout and send_timeout, the tunnel idle
	tu.echo(t, "the tunnel is bounded by its own timeouts only")
	tu.c.Close()
}
