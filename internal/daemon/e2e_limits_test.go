package daemon_test

import (
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func dialFrom(t *testing.T, ip, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: waitLimit}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, ip, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// synDropped reports whether a connection from ip to addr stays
// unestablished for 300 ms: the listener's SYN filter dropped its SYN. An
// established connection is closed at once.
func synDropped(ip, addr string) bool {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 300 * time.Millisecond}
	c, err := d.Dial("tcp", addr)
	if err == nil {
		_ = c.Close()
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// refusedAtOnce reports whether the server closed c without answering.
func refusedAtOnce(t *testing.T, c net.Conn) bool {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(waitLimit))
	_, _ = c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	n, err := c.Read(make([]byte, 1))
	return n == 0 && err != nil && !isTimeout(err)
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

func TestConnectionCapPerClientAtAccept(t *testing.T) {
	defaultServer(t, testConnectionCapPerClientAtAccept)
}

func testConnectionCapPerClientAtAccept(t *testing.T) {
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    max_conns_per_client: 3
    routes:
      - upstreams: ["{{backend}}"]
`)
	addr := d.srv.Addr("web").String()
	for range 3 {
		dialFrom(t, "127.0.0.2", addr)
	}
	d.waitFor("3 open connections", func() bool { return d.listener("web").Connections.Open == 3 })

	if !refusedAtOnce(t, dialFrom(t, "127.0.0.2", addr)) {
		t.Fatal("fourth connection of 127.0.0.2 was served over a cap of 3")
	}
	if st, _, _ := get(t, d.client("127.0.0.3"), d.url("web", "/")); st != http.StatusOK {
		t.Fatalf("other client got %d, want 200", st)
	}
	l := d.listener("web")
	if l.Connections.Refused.ClientCap != 1 {
		t.Fatalf("client_cap refusals = %d, want 1", l.Connections.Refused.ClientCap)
	}
	if len(l.BusyClients) == 0 || l.BusyClients[0].Key != "127.0.0.2" || l.BusyClients[0].InUse != 3 {
		t.Fatalf("busy clients = %+v, want 127.0.0.2 with 3 first", l.BusyClients)
	}
	metrics := d.metrics()
	for _, want := range []string{
		`portcullis_connections_refused_total{listener="web",reason="client_cap"} 1`,
		`portcullis_connections_open{listener="web"}`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(metrics, "127.0.0.2") {
		t.Error("/metrics has a per-client label")
	}
}

func (d *testDaemon) metrics() string {
	d.t.Helper()
	_, body, _ := get(d.t, http.DefaultClient, d.adminURL("/metrics"))
	return body
}

func TestRouteLimitQueuesThenRefuses429(t *testing.T) {
	bothServers(t, testRouteLimitQueuesThenRefuses429)
}

func testRouteLimitQueuesThenRefuses429(t *testing.T) {
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - name: slow
        path_prefix: /slow
        upstreams: ["{{backend}}"]
        limit: {permits: 2, queue: {size: 1, timeout: 10s}, retry_after: 3s}
      - name: rest
        upstreams: ["{{backend}}"]
`)
	c := d.client("127.0.0.2")
	held := []<-chan result{getAsync(c, d.url("web", "/slow?ms=1500")), getAsync(c, d.url("web", "/slow?ms=1500"))}
	d.waitFor("2 permits in use", func() bool { return d.route("web", "slow").Limit.Totals.InUse == 2 })
	queued := getAsync(c, d.url("web", "/slow?ms=1"))
	d.waitFor("1 waiter", func() bool { return d.route("web", "slow").Limit.Totals.Waiting == 1 })

	st, _, h := get(t, c, d.url("web", "/slow?ms=1"))
	if st != http.StatusTooManyRequests || h.Get("Retry-After") != "3" {
		t.Fatalf("request over limit and queue: %d Retry-After %q, want 429 and 3", st, h.Get("Retry-After"))
	}
	if st, _, _ := get(t, d.client("127.0.0.3"), d.url("web", "/slow?ms=1")); st != http.StatusOK {
		t.Fatalf("another client got %d, want 200", st)
	}
	if st, _, _ := get(t, c, d.url("web", "/other")); st != http.StatusOK {
		t.Fatalf("another route got %d, want 200", st)
	}
	for i, ch := range append(held, queued) {
		if r := await(t, ch); r.err != nil || r.status != http.StatusOK {
			t.Fatalf("request %d: %d %v, want 200", i, r.status, r.err)
		}
	}
	tot := d.route("web", "slow").Limit.Totals
	if tot.Granted != 4 || tot.QueueFull != 1 {
		t.Fatalf("totals %+v, want 4 granted and 1 queue full", tot)
	}
	if m := d.metrics(); !strings.Contains(m, `portcullis_exchanges_queue_wait_seconds_count{limit="route_limit",listener="web",outcome="granted",route="slow"} 1`) {
		t.Errorf("/metrics has no queue wait for the queued request:\n%s", grep(m, "queue_wait_seconds_count"))
	}
}

func grep(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// The pitfall of Apache's mod_limitipconn: a limit of 3 on /hoge counted the
// client's requests anywhere on the server. Here a route's limit counts that
// route only.
func TestRouteLimitIsScopedToItsRoute(t *testing.T) {
	defaultServer(t, testRouteLimitIsScopedToItsRoute)
}

func testRouteLimitIsScopedToItsRoute(t *testing.T) {
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - name: hoge
        path_prefix: /hoge
        upstreams: ["{{backend}}"]
        limit: {permits: 3}
      - name: fuga
        path_prefix: /fuga
        upstreams: ["{{backend}}"]
`)
	c := d.client("127.0.0.2")
	var downloads []<-chan result
	for range 3 {
		downloads = append(downloads, getAsync(c, d.url("web", "/fuga/video.mp4?ms=1500")))
	}
	d.waitFor("3 downloads at the backend", func() bool { return d.backend.inFlight.Load() == 3 })

	st, body, _ := get(t, c, d.url("web", "/hoge/index.cgi"))
	if st != http.StatusOK || body != "ok /hoge/index.cgi\n" {
		t.Fatalf("/hoge during 3 downloads on /fuga: %d %q, want 200", st, body)
	}
	// The limit on /hoge still holds for /hoge itself.
	var hoge []<-chan result
	for range 3 {
		hoge = append(hoge, getAsync(c, d.url("web", "/hoge/slow?ms=1500")))
	}
	d.waitFor("3 permits of hoge", func() bool { return d.route("web", "hoge").Limit.Totals.InUse == 3 })
	if st, _, _ := get(t, c, d.url("web", "/hoge/index.cgi")); st != http.StatusTooManyRequests {
		t.Fatalf("fourth /hoge got %d, want 429", st)
	}
	for _, ch := range append(downloads, hoge...) {
		if r := await(t, ch); r.err != nil || r.status != http.StatusOK {
			t.Fatalf("download: %d %v", r.status, r.err)
		}
	}
}
