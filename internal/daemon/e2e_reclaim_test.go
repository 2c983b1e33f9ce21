package daemon_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/config"
)

// TestReclaimEndsStuckExchange: a route's permit held past reclaim_after
// is taken back, and the exchange that held it is ended (its connection
// cut), on both modes and on the lean path in Go's poller too (eventloop's
// part for TLS connections), where the exchange holds a permit it took
// without the handler chain, and whose outcomes it counts.
func TestReclaimEndsStuckExchange(t *testing.T) {
	bothServers(t, testReclaimEndsStuckExchange)
	t.Run("server=lean", testReclaimEndsStuckExchange)
}

func testReclaimEndsStuckExchange(t *testing.T) {
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - name: r
        upstreams: ["{{backend}}"]
        limit: {permits: 1, reclaim_after: 1s}
`)
	c := d.client("127.0.0.2")
	start := time.Now()
	stuck := getAsync(c, d.url("web", "/?ms=20000"))
	d.waitFor("the permit held", func() bool { return d.route("web", "r").Limit.Totals.InUse == 1 })
	select {
	case res := <-stuck:
		if res.err == nil && res.status == http.StatusOK {
			t.Fatalf("the stuck exchange was served in full after %v", time.Since(start))
		}
	case <-time.After(waitLimit):
		t.Fatal("the stuck exchange was not ended after its permit was reclaimed")
	}
	if waited := time.Since(start); waited > 10*time.Second {
		t.Errorf("the exchange ended after %v, want about reclaim_after (1s) and its sweep", waited)
	}
	d.waitFor("the permit back", func() bool { return d.route("web", "r").Limit.Totals.InUse == 0 })
	if tot := d.route("web", "r").Limit.Totals; tot.Reclaimed != 1 {
		t.Errorf("reclaimed %d permits, want 1", tot.Reclaimed)
	}
	if st, _, _ := get(t, c, d.url("web", "/")); st != http.StatusOK {
		t.Errorf("the next request: %d, want 200", st)
	}
	if serverOf(t) == config.HTTP1ServerLean {
		// The lean path took both: the stuck one was handed over to
		// answer its failure, the next relayed.
		m := grepLines(d.metrics(), "portcullis_http_lean_exchanges_total")
		for _, want := range []string{`outcome="handed_over"} 1`, `outcome="relayed"} 1`} {
			if !strings.Contains(m, want) {
				t.Errorf("lean outcomes lack %s:\n%s", want, m)
			}
		}
	}
}
