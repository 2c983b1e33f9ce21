package daemon_test

import (
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

// TestRequestMetricsAfterTraffic scrapes /metrics from a running daemon
// after real traffic: every series passes promlint (what `promtool check
// metrics` checks), and the request series count what was sent: three
// requests answered 200 and one refused 429 by a rate on route r, one
// request no route takes (404) on the listener's own series, and an
// upstream that refuses connections on route down (502, an upstream error
// of kind refused). No series carries a client label.
func TestRequestMetricsAfterTraffic(t *testing.T) {
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    client_limit: {permits: 8}
    routes:
      - name: r
        path_prefix: /r
        upstreams: ["{{backend}}"]
        rate: {rate: 3r/m, burst: 2, nodelay: true}
        limit: {permits: 4}
      - name: down
        host: [down.test]
        upstreams: ["http://127.0.0.1:1"]
`)
	c := d.client("127.0.0.2")
	for i, want := range []int{200, 200, 200, 429} {
		if st, _, _ := get(t, c, d.url("web", "/r/x")); st != want {
			t.Fatalf("request %d: %d, want %d", i, st, want)
		}
	}
	if st, _, _ := get(t, c, d.url("web", "/nowhere")); st != http.StatusNotFound {
		t.Fatalf("unrouted: %d, want 404", st)
	}
	req, _ := http.NewRequest(http.MethodGet, d.url("web", "/"), nil)
	req.Host = "down.test"
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("dead upstream: %d, want 502", resp.StatusCode)
	}

	m := d.metrics()
	problems, err := promlint.New(strings.NewReader(m)).Lint()
	if err != nil {
		t.Fatalf("promlint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	for _, want := range []string{
		`portcullis_http_requests_total{code="2xx",listener="web",route="r"} 3`,
		`portcullis_http_requests_total{code="4xx",listener="web",route="r"} 1`,
		`portcullis_http_requests_total{code="5xx",listener="web",route="r"} 0`,
		`portcullis_http_requests_total{code="4xx",listener="web",route=""} 1`,
		`portcullis_http_requests_total{code="5xx",listener="web",route="down"} 1`,
		`portcullis_http_request_duration_seconds_count{listener="web",route="r"} 4`,
		`portcullis_http_request_duration_seconds_bucket{listener="web",route="r",le="+Inf"} 4`,
		`portcullis_upstream_response_duration_seconds_count{listener="web",route="r"} 3`,
		`portcullis_upstream_response_duration_seconds_count{listener="web",route="down"} 0`,
		`portcullis_upstream_errors_total{kind="refused",listener="web",route="down"} 1`,
		`portcullis_upstream_errors_total{kind="refused",listener="web",route="r"} 0`,
		`portcullis_exchanges_in_use{limit="route_limit",listener="web",route="r"} 0`,
		`portcullis_exchanges_in_use{limit="client_limit",listener="web",route=""} 0`,
		`goversion="` + runtime.Version() + `"`,
		"\ngo_goroutines ",
		"\nprocess_cpu_seconds_total ",
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s; it has:\n%s", want, grep(m, strings.SplitN(strings.TrimSpace(want), "{", 2)[0]))
		}
	}
	if !strings.Contains(m, "\nportcullis_build_info{") || !strings.Contains(grep(m, "portcullis_build_info{"), "} 1") {
		t.Errorf("no portcullis_build_info 1:\n%s", grep(m, "build_info"))
	}
	if strings.Contains(m, `limit="limit"`) {
		t.Errorf("a limit label says only \"limit\":\n%s", grep(m, `limit="limit"`))
	}
	for _, l := range strings.Split(m, "\n") {
		if strings.Contains(l, "127.0.0.2") || strings.Contains(l, "client=") {
			t.Errorf("a series names a client: %s", l)
		}
	}
}

// A route a reload removes leaves /metrics: its series do not stay frozen
// at their last values. A route the reload keeps keeps counting on.
func TestReloadDropsTheRequestMetricsOfRemovedRoutes(t *testing.T) {
	const two = `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - name: old
        path_prefix: /old
        upstreams: ["{{backend}}"]
      - name: kept
        upstreams: ["{{backend}}"]
`
	d := startDaemon(t, two)
	c := d.client("127.0.0.2")
	for _, path := range []string{"/old/x", "/y"} {
		if st, _, _ := get(t, c, d.url("web", path)); st != http.StatusOK {
			t.Fatalf("%s: %d, want 200", path, st)
		}
	}
	// An exchange is counted once its answer is written, which the client
	// may read first.
	for _, want := range []string{
		`portcullis_http_requests_total{code="2xx",listener="web",route="old"} 1`,
		`portcullis_http_requests_total{code="2xx",listener="web",route="kept"} 1`,
	} {
		d.waitFor("/metrics to count "+want, func() bool { return strings.Contains(d.metrics(), want) })
	}

	one := strings.Replace(two, `      - name: old
        path_prefix: /old
        upstreams: ["{{backend}}"]
`, "", 1)
	if err := d.srv.Reload(d.reloadConfig(one, "")); err != nil {
		t.Fatal(err)
	}
	if st, _, _ := get(t, c, d.url("web", "/old/x")); st != http.StatusOK {
		t.Fatalf("/old/x through kept: %d, want 200", st)
	}
	want := `portcullis_http_requests_total{code="2xx",listener="web",route="kept"} 2`
	d.waitFor("/metrics to count "+want, func() bool { return strings.Contains(d.metrics(), want) })
	if m := d.metrics(); strings.Contains(m, `route="old"`) {
		t.Errorf("a removed route's series stay on /metrics:\n%s", grepLines(m, `route="old"`))
	}
}

// grepLines returns the lines of text holding sub.
func grepLines(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
