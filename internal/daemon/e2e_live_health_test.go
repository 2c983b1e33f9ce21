package daemon_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/livepage"
)

// liveHealthConfig is a daemon with a route for each part of the live
// page's health panels: "slow" delays all but the first request of a
// client by a minute, "shadow" has a dry-run rate that would refuse the
// second request, "down" has an upstream that refuses connections, and
// "one" (the rest) lets each client run one request at a time.
const liveHealthConfig = `admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - name: slow
        path_prefix: /slow
        upstreams: ["{{backend}}"]
        rate: {rate: 1r/m, burst: 5}
      - name: shadow
        path_prefix: /shadow
        upstreams: ["{{backend}}"]
        rate: {rate: 1r/m, nodelay: true, dry_run: true}
      - name: down
        path_prefix: /down
        upstreams: ["http://127.0.0.1:1"]
      - name: one
        upstreams: ["{{backend}}"]
        limit: {permits: 1}
`

// The rows and lines of liveHealthConfig's panels.
const (
	liveSlowRate   = "web/route/slow/rate"
	liveShadowRate = "web/route/shadow/rate"
	liveDownErrors = "web/down/refused"
)

// healthTraffic drives liveHealthConfig's daemon: four 2xx (one per
// route but down, and a second shadow one the dry-run rate would have
// refused), a 429 (with a request holding route one's permit), a 502 from
// the dead upstream, and two requests that the slow route's rate is
// delaying. Calling the function it returns makes the two delayed
// requests' clients leave (they end as 499) and waits until they have.
func healthTraffic(t *testing.T, d *testDaemon) (leave func()) {
	t.Helper()
	c := d.client("127.0.0.3")
	for _, p := range []string{"/slow/a", "/shadow/a", "/shadow/b", "/"} {
		if st, body, _ := get(t, c, d.url("web", p)); st != http.StatusOK {
			t.Fatalf("GET %s: %d %s, want 200", p, st, body)
		}
	}
	refuse(t, d, "127.0.0.2")
	if st, _, _ := get(t, c, d.url("web", "/down")); st != http.StatusBadGateway {
		t.Fatalf("dead upstream: %d, want 502", st)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	for i := range 2 {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.url("web", fmt.Sprintf("/slow/%d", i)), nil)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			resp, err := c.Do(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				err = fmt.Errorf("a delayed request answered %d before its client left", resp.StatusCode)
			}
			done <- err
		}()
	}
	var once bool
	leave = func() {
		if once {
			return
		}
		once = true
		cancel()
		for range 2 {
			if err := <-done; err != nil && !strings.Contains(err.Error(), "context canceled") {
				t.Errorf("delayed request: %v", err)
			}
		}
	}
	t.Cleanup(leave)
	d.waitFor("two requests delayed by the slow route's rate", func() bool {
		return strings.Contains(d.metrics(), `portcullis_rate_delaying{limit="rate",listener="web",route="slow"} 2`)
	})
	return leave
}

// frameWhere reads frames of an event stream until one satisfies ok, for
// at most 5 of them (a sample a second).
func frameWhere(t *testing.T, r *bufio.Reader, what string, ok func(livepage.Frame) bool) livepage.Frame {
	t.Helper()
	var f livepage.Frame
	for range 5 {
		if f = nextFrame(t, r); ok(f) {
			return f
		}
	}
	t.Fatalf("5 frames, none with %s; the last: %+v", what, f)
	return f
}

// classes returns the status classes of a listener's requests as
// "2xx=4 4xx=1 ...", zero classes left out.
func classes(q *livepage.Requests) string {
	if q == nil {
		return "no requests"
	}
	var parts []string
	for _, c := range q.Classes {
		if c.Count != 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", c.Name, c.Count))
		}
	}
	return fmt.Sprintf("total=%d %s", q.Total, strings.Join(parts, " "))
}

// A request a rate is delaying is waiting: the rate's row counts it while
// it waits, as portcullis_rate_delaying does, and no more once its client
// has left.
func TestLivePageRateDelayedAreWaiting(t *testing.T) {
	d := startDaemon(t, liveHealthConfig)
	_, r := events(t, d, nil)
	listenersFrame(t, r)
	leave := healthTraffic(t, d)
	f := frameWhere(t, r, "the delayed requests waiting", func(f livepage.Frame) bool {
		slow, _ := row(f, liveSlowRate)
		return slow.Waiting == 2
	})
	if slow, _ := row(f, liveSlowRate); slow.InUse != 0 || slow.Refused != 0 {
		t.Errorf("slow rate row: %+v, want 2 waiting and nothing else", slow)
	}
	leave()
	frameWhere(t, r, "no request waiting after the clients left", func(f livepage.Frame) bool {
		slow, _ := row(f, liveSlowRate)
		return slow.Waiting == 0
	})
	if m := d.metrics(); !strings.Contains(m, `portcullis_rate_delaying{limit="rate",listener="web",route="slow"} 0`) {
		t.Errorf("portcullis_rate_delaying after the clients left:\n%s", grepLines(m, "rate_delaying"))
	}
}

// The health panels count what /metrics counts: the listener's requests by
// status class (499 apart), the upstream errors by route and kind, and
// what a dry-run rate would have refused.
func TestLivePageHealthPanels(t *testing.T) {
	d := startDaemon(t, liveHealthConfig)
	_, r := events(t, d, nil)
	if f := listenersFrame(t, r); classes(f.Listeners[0].Requests) != "total=0 " || len(f.Upstream) != 0 ||
		len(f.Shadow) != 1 || f.Shadow[0].ID != liveShadowRate || f.Shadow[0].WouldRefuse != 0 {
		t.Fatalf("before any request: requests %s, upstream %+v, shadow %+v", classes(f.Listeners[0].Requests), f.Upstream, f.Shadow)
	}
	leave := healthTraffic(t, d)
	const before = "total=6 2xx=4 4xx=1 5xx=1"
	f := frameWhere(t, r, "the traffic", func(f livepage.Frame) bool { return classes(f.Listeners[0].Requests) == before })
	want := livepage.UpstreamErrors{ID: liveDownErrors, Listener: "web", Route: "down", Kind: "refused", Count: 1}
	if got := f.Upstream; len(got) != 1 || got[0].ID != want.ID || got[0].Kind != want.Kind || got[0].Route != want.Route || got[0].Count != 1 {
		t.Errorf("upstream errors: %+v, want %+v", got, want)
	}
	if got := f.Shadow; len(got) != 1 || got[0].ID != liveShadowRate || got[0].WouldRefuse != 1 || got[0].Limit != "1r/m per client_ip (dry run)" {
		t.Errorf("shadow: %+v, want the shadow route's rate having refused 1", got)
	}
	m := d.metrics()
	for _, line := range []string{
		`portcullis_http_requests_total{code="2xx",listener="web",route="one"} 1`,
		`portcullis_http_requests_total{code="4xx",listener="web",route="one"} 1`,
		`portcullis_http_requests_total{code="5xx",listener="web",route="down"} 1`,
		`portcullis_upstream_errors_total{kind="refused",listener="web",route="down"} 1`,
		`portcullis_rate_shadow_refused_total{limit="rate",listener="web",route="shadow"} 1`,
	} {
		if !strings.Contains(m, line) {
			t.Errorf("/metrics lacks %s", line)
		}
	}

	leave()
	const after = "total=8 2xx=4 4xx=1 499=2 5xx=1"
	f = frameWhere(t, r, "the clients that left", func(f livepage.Frame) bool { return classes(f.Listeners[0].Requests) == after })
	if i := slices.IndexFunc(f.Listeners[0].Requests.Classes, func(c livepage.Count) bool { return c.Name == "499" }); i < 0 {
		t.Errorf("no 499 class: %+v", f.Listeners[0].Requests)
	}
}
