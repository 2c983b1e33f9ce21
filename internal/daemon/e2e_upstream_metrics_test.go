package daemon_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/backend/misbehave"
)

// TestUnsolicitedBytesShowInMetrics runs requests against a backend that
// writes a stray response on its idle connections: /metrics counts the
// connections the daemon dropped for it, so an operator can see a backend
// misbehaving.
func TestUnsolicitedBytesShowInMetrics(t *testing.T) {
	defaultServer(t, testUnsolicitedBytesShowInMetrics)
}

func testUnsolicitedBytesShowInMetrics(t *testing.T) {
	srv, err := misbehave.Start("127.0.0.1:0", misbehave.Config{Fault: misbehave.LateResponse})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	d := startDaemonBefore(t, reuseConfig, srv.URL())
	c := d.client("127.0.0.2")
	for range 3 {
		if st, _, _ := get(t, c, d.url("web", "/x")); st != http.StatusOK {
			t.Fatalf("status %d", st)
		}
		srv.Release() // the stray response arrives on the idle connection
	}
	resp, err := http.Get(d.adminURL("/metrics"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "portcullis_upstream_unsolicited_total ") {
			if strings.TrimPrefix(line, "portcullis_upstream_unsolicited_total ") == "0" {
				t.Fatalf("no unsolicited connection counted: %s", line)
			}
			return
		}
	}
	t.Fatal("portcullis_upstream_unsolicited_total missing from /metrics")
}
