package daemon_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestClientHangUpIs499 checks that a client that leaves while its request
// waits (in a rate's delay, in a limit's queue, on the upstream) is logged
// and counted as nginx's 499 (Client Closed Request), with the limiter's
// reason (abandoned) where a limiter held it, and never as a 5xx: before,
// the same exchanges were logged as 503 (reason rate, or abandoned) or
// 502, and set off 5xx alerts.
func TestClientHangUpIs499(t *testing.T) { bothServers(t, testClientHangUpIs499) }

func testClientHangUpIs499(t *testing.T) {
	var out syncBuffer
	d := startLoggingDaemon(t, `
admin: {listen: "127.0.0.1:0"}
log: {format: json, access_log: true}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - name: rate
        path_prefix: /rate
        upstreams: ["{{backend}}"]
        rate: {rate: 1r/m, burst: 1}
      - name: queue
        path_prefix: /queue
        upstreams: ["{{backend}}"]
        limit: {permits: 1, queue: {size: 1, timeout: 1m}}
      - name: slow
        path_prefix: /slow
        upstreams: ["{{backend}}"]
`, &out)
	addr := d.srv.Addr("web").String()
	ended := func(route string, n int) bool {
		return strings.Contains(d.metrics(), fmt.Sprintf(`portcullis_http_request_duration_seconds_count{listener="web",route=%q} %d`, route, n))
	}
	// hangUp sends a request for target and closes its connection once
	// waiting says the request waits.
	hangUp := func(target, what string, waiting func() bool) {
		c := dialFrom(t, "127.0.0.2", addr)
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: app.test\r\n\r\n", target)
		d.waitFor(what, waiting)
		_ = c.Close()
	}

	// The rate's burst is spent; the next request is delayed a minute.
	if st, _ := rawGet(t, "127.0.0.2", addr, "GET", "/rate/first"); st != http.StatusOK {
		t.Fatalf("first request of the rate: %d", st)
	}
	hangUp("/rate/delayed", "the request delayed", func() bool { return d.rateOf("web", "rate").Totals.Delayed == 1 })
	d.waitFor("the delayed request's end", func() bool { return ended("rate", 2) })

	// The limit's permit is held; the next request queues.
	hold := getAsync(d.client("127.0.0.2"), d.url("web", "/queue/hold?ms=2000"))
	d.waitFor("the permit held", func() bool { return d.route("web", "queue").Limit.Totals.InUse == 1 })
	hangUp("/queue/queued", "the request queued", func() bool { return d.route("web", "queue").Limit.Totals.Waiting == 1 })
	d.waitFor("the queued request's end", func() bool { return ended("queue", 1) })
	if ab := d.route("web", "queue").Limit.Totals.Abandoned; ab != 1 {
		t.Errorf("the limit counted %d abandoned waiters, want 1", ab)
	}
	if r := await(t, hold); r.err != nil || r.status != http.StatusOK {
		t.Fatalf("the request holding the permit: %+v", r)
	}

	// No limit: the request waits on its upstream, which takes 5 s.
	hangUp("/slow/x?ms=5000", "the upstream to have the request", func() bool { return d.backend.inFlight.Load() == 1 })
	d.waitFor("the slow request's end", func() bool { return ended("slow", 1) })

	m := d.metrics()
	for _, want := range []string{
		`portcullis_http_requests_total{code="499",listener="web",route="rate"} 1`,
		`portcullis_http_requests_total{code="5xx",listener="web",route="rate"} 0`,
		`portcullis_http_requests_total{code="4xx",listener="web",route="rate"} 0`,
		`portcullis_http_requests_total{code="499",listener="web",route="queue"} 1`,
		`portcullis_http_requests_total{code="5xx",listener="web",route="queue"} 0`,
		`portcullis_http_requests_total{code="499",listener="web",route="slow"} 1`,
		`portcullis_http_requests_total{code="5xx",listener="web",route="slow"} 0`,
		`portcullis_upstream_errors_total{kind="other",listener="web",route="slow"} 0`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s; it has:\n%s", want, grep(m, "portcullis_http_requests_total{"))
		}
	}
	if tot := d.route("web", "queue").Limit.Totals; tot.InUse != 0 || tot.Waiting != 0 {
		t.Errorf("the limit holds %d permits and %d waiters after the test, want none", tot.InUse, tot.Waiting)
	}

	d.stop()
	lines := accessLines(t, out.String())
	for _, c := range []struct {
		path, limit, reason, admission string
	}{
		{"/rate/delayed", "rate", "abandoned", "refused"},
		{"/queue/queued", "route_limit", "abandoned", "refused"},
		{"/slow/x", "", "", "admitted"},
	} {
		l := findLine(t, lines, c.path, 499)
		if got, _ := l["admission"].(string); got != c.admission {
			t.Errorf("%s: admission %q, want %q: %v", c.path, got, c.admission, l)
		}
		if got, _ := l["limit"].(string); got != c.limit {
			t.Errorf("%s: limit %q, want %q: %v", c.path, got, c.limit, l)
		}
		if got, _ := l["reason"].(string); got != c.reason {
			t.Errorf("%s: reason %q, want %q: %v", c.path, got, c.reason, l)
		}
		if _, ok := l["upstream_ms"]; ok {
			t.Errorf("%s: an upstream_ms for a request no upstream answered: %v", c.path, l)
		}
	}
}

// TestDaemonCutsAreNot499 checks the other side of TestClientHangUpIs499:
// an exchange the daemon itself ends is no client hang-up. A request a
// limit's reclaim cut while it waited on its upstream keeps its 502, and
// one cut off in a rate's delay at the end of a shutdown keeps its 503
// (reason abandoned), although in both the request's context ended as
// when a client leaves.
func TestDaemonCutsAreNot499(t *testing.T) { bothServers(t, testDaemonCutsAreNot499) }

func testDaemonCutsAreNot499(t *testing.T) {
	var out syncBuffer
	d := startLoggingDaemon(t, `
admin: {listen: "127.0.0.1:0"}
log: {format: json, access_log: true}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - name: rate
        path_prefix: /rate
        upstreams: ["{{backend}}"]
        rate: {rate: 1r/m, burst: 1}
      - name: stuck
        path_prefix: /stuck
        upstreams: ["{{backend}}"]
        limit: {permits: 1, reclaim_after: 1s}
`, &out)
	addr := d.srv.Addr("web").String()

	stuck := dialFrom(t, "127.0.0.2", addr)
	fmt.Fprintf(stuck, "GET /stuck/x?ms=20000 HTTP/1.1\r\nHost: app.test\r\n\r\n")
	d.waitFor("the permit reclaimed", func() bool {
		tot := d.route("web", "stuck").Limit.Totals
		return tot.Reclaimed == 1 && tot.InUse == 0
	})
	d.waitFor("the reclaimed exchange's end", func() bool {
		return strings.Contains(d.metrics(), `portcullis_http_request_duration_seconds_count{listener="web",route="stuck"} 1`)
	})
	m := d.metrics()
	for _, want := range []string{
		`portcullis_http_requests_total{code="499",listener="web",route="stuck"} 0`,
		`portcullis_http_requests_total{code="5xx",listener="web",route="stuck"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s; it has:\n%s", want, grep(m, "portcullis_http_requests_total{"))
		}
	}

	if st, _ := rawGet(t, "127.0.0.2", addr, "GET", "/rate/first"); st != http.StatusOK {
		t.Fatalf("first request of the rate: %d", st)
	}
	delayed := dialFrom(t, "127.0.0.2", addr)
	fmt.Fprintf(delayed, "GET /rate/delayed HTTP/1.1\r\nHost: app.test\r\n\r\n")
	d.waitFor("the request delayed", func() bool { return d.rateOf("web", "rate").Totals.Delayed == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := d.srv.Shutdown(ctx); err == nil {
		t.Fatal("Shutdown returned nil with a request delayed for a minute: it should have cut it off")
	}

	lines := accessLines(t, out.String())
	findLine(t, lines, "/stuck/x", http.StatusBadGateway)
	l := findLine(t, lines, "/rate/delayed", http.StatusServiceUnavailable)
	if l["reason"] != "abandoned" || l["limit"] != "rate" {
		t.Errorf("the delayed request cut off by the shutdown: %v, want limit rate and reason abandoned", l)
	}
}
