package daemon_test

import (
	"net/http"
	"testing"
)

func TestRoutesFromSharesRoutesAndCounts(t *testing.T) {
	defaultServer(t, testRoutesFromSharesRoutesAndCounts)
}

func testRoutesFromSharesRoutesAndCounts(t *testing.T) {
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - name: r
        upstreams: ["{{backend}}"]
        limit: {permits: 1}
  - name: alt
    protocol: http
    listen: "127.0.0.1:0"
    routes_from: web
`)
	c := d.client("127.0.0.2")
	slow := getAsync(c, d.url("web", "/?ms=1500"))
	d.waitFor("permit held", func() bool { return d.route("web", "r").Limit.Totals.InUse == 1 })
	if st, _, _ := get(t, c, d.url("alt", "/")); st != http.StatusTooManyRequests {
		t.Fatalf("same client through the sharing listener: %d, want 429 (one count for both)", st)
	}
	if r := await(t, slow); r.status != http.StatusOK {
		t.Fatalf("slow: %d %v", r.status, r.err)
	}
	d.waitFor("permit back", func() bool { return d.route("web", "r").Limit.Totals.InUse == 0 })
	if st, _, _ := get(t, c, d.url("alt", "/")); st != http.StatusOK {
		t.Fatalf("through the sharing listener: %d", st)
	}
}
