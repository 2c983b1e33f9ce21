package proxy_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/proxy"
	"github.com/seed-a07d1050/portcullis/internal/redistest"
)

// Two nodes sharing one Redis count a route limit together: a client
// holding its one permit on node A is refused on node B.
func TestClusterSharesRouteLimitsAcrossNodes(t *testing.T) {
	redis := redistest.Start(t)
	text := `
admin: {listen: "127.0.0.1:0"}
cluster:
  redis: {addrs: ["` + redis.Addr() + `"]}
  timeout: 2s        # this machine is shared: never fall back to the node's own count
  on_error: closed
  prefix: "test:` + strings.ReplaceAll(t.Name(), "/", "-") + `:"
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - name: r
        upstreams: ["{{backend}}"]
        limit: {permits: 1}
`
	a := startDaemon(t, text)
	b := startBackend(t)
	nodeB, err := proxy.Start(parseConfig(t, text, b.URL()), proxy.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = nodeB.Shutdown(context.Background()) }()
	urlB := "http://" + nodeB.Addr("web").String() + "/"

	c := a.client("127.0.0.2")
	slow := getAsync(c, a.url("web", "/?ms=2000"))
	a.waitFor("permit held on node A", func() bool { return a.route("web", "r").Limit.Totals.InUse == 1 })
	if st, _, _ := get(t, c, urlB); st != http.StatusTooManyRequests {
		t.Fatalf("same client on node B: %d, want 429 (one cluster-wide count)", st)
	}
	if st, _, _ := get(t, a.client("127.0.0.3"), urlB); st != http.StatusOK {
		t.Fatalf("another client on node B: %d", st)
	}
	if r := await(t, slow); r.status != http.StatusOK {
		t.Fatalf("slow on node A: %d %v", r.status, r.err)
	}
	a.waitFor("permit back on node A", func() bool { return a.route("web", "r").Limit.Totals.InUse == 0 })
	ok := waitUntil(func() bool {
		resp, err := c.Get(urlB)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if !ok {
		t.Fatal("node B never admitted the client after node A released its permit")
	}
	c.CloseIdleConnections()
}
