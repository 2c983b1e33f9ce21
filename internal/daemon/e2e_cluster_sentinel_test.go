package daemon_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/daemon"
	"github.com/seed-a07d1050/portcullis/internal/redistest"
)

// Two daemons find their Redis through a Sentinel (sentinel_addrs,
// master_name) and follow its failover: with a master, its replica and one
// Sentinel on loopback (down-after 1 s), the master is killed with SIGKILL;
// once the Sentinel has promoted the replica, both daemons count on it
// within a few seconds, and the route limit of 2 is exact across them
// again one heartbeat later: one slow request held on each node, a third
// is refused on both.
func TestClusterFollowsSentinelFailover(t *testing.T) {
	master := redistest.Start(t)
	replica := redistest.StartReplica(t, master)
	sentinel := redistest.StartSentinel(t, "pcmaster", master, 1)
	text := `
admin: {listen: "127.0.0.1:0"}
cluster:
  redis: {sentinel_addrs: ["` + sentinel.Addr() + `"], master_name: pcmaster}
  timeout: 1s
  lease: 3s
  on_error: closed
  prefix: "test:` + strings.ReplaceAll(t.Name(), "/", "-") + `:"
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - name: r
        upstreams: ["{{backend}}"]
        limit: {permits: 2}
`
	a := startDaemon(t, text)
	nodeB, err := daemon.Start(parseConfig(t, text, a.backend.URL()), daemon.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = nodeB.Shutdown(context.Background()) }()
	urls := []string{a.url("web", "/"), "http://" + nodeB.Addr("web").String() + "/"}
	c := a.client("127.0.0.2")
	defer c.CloseIdleConnections()

	// exact holds one slow request on each node and checks that a third
	// is refused on both, then lets the slow ones finish.
	exact := func(when string) {
		t.Helper()
		var slow []<-chan result
		for _, u := range urls {
			slow = append(slow, getAsync(c, u+"?ms=1500"))
		}
		a.waitFor("one permit held on node A", func() bool { return a.route("web", "r").Limit.Totals.InUse == 1 })
		time.Sleep(100 * time.Millisecond) // node B's permit: its acquire is one round trip
		for i, u := range urls {
			if st, _, err := get(t, c, u); st != http.StatusTooManyRequests {
				t.Errorf("%s: a third request on node %c: %d %v, want 429 (2 permits cluster-wide)", when, 'A'+i, st, err)
			}
		}
		for _, ch := range slow {
			if r := await(t, ch); r.status != http.StatusOK {
				t.Fatalf("%s: a slow request: %d %v", when, r.status, r.err)
			}
		}
	}
	exact("before the failover")

	killed := time.Now()
	master.Kill()
	for sentinel.MasterAddr("pcmaster") != replica.Addr() {
		if time.Since(killed) > 10*redistest.SentinelDownAfter {
			t.Fatalf("the Sentinel did not promote the replica within %v", 10*redistest.SentinelDownAfter)
		}
		time.Sleep(20 * time.Millisecond)
	}
	promoted := time.Since(killed)
	// Both nodes admit again once they have found the new master.
	for i, u := range urls {
		ok := waitUntil(func() bool {
			resp, err := c.Get(u)
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
		if !ok {
			t.Fatalf("node %c never admitted again after the failover", 'A'+i)
		}
	}
	t.Logf("Sentinel promoted the replica %v after the kill; both nodes admitted on it %v after the kill", promoted, time.Since(killed))
	if after := time.Since(killed) - promoted; after > 3*time.Second {
		t.Errorf("the nodes followed the promotion %v after it; want within a few seconds", after)
	}
	// A call that failed during the failover may have counted on the new
	// master without the node knowing (the replica had the old counts, and
	// an acquire whose answer was lost may have run): each node's heartbeat
	// (every lease/3, 1 s here) rewrites its absolute counts, so the counts
	// are exact again one heartbeat after the nodes reach the new master.
	time.Sleep(1200 * time.Millisecond)
	exact("after the failover")
}
