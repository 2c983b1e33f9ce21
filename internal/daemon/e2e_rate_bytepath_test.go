package daemon_test

import (
	"net/http"
	"testing"
)

// A route with a rate stays on the byte path: a request the rate admits
// at once is relayed there, and one it would delay or refuse goes to the
// full server, which decides it. Each request is decided once: the rate's
// totals count exactly the admissions and refusals the client saw, and
// the answers are nginx's (burst+1 admitted at once with nodelay, the
// rest refused within the period; without nodelay the burst is delayed,
// on the full server).
func TestRouteRateOnTheBytePath(t *testing.T) {
	cases := []struct {
		name, rate   string
		n            int
		ok, refused  int
		onBytePath   int // requests relayed on the byte path
		delayedFirst bool
	}{
		{"nodelay", "{rate: 1r/m, burst: 3, nodelay: true}\n        limit: {permits: 8}", 10, 4, 6, 4, false},
		// One request after another: each delayed one proceeds at the
		// rate (250 ms apart), and the next comes while the key is still
		// ahead, so it is delayed too.
		{"delay", "{rate: 4r/s, burst: 3}", 4, 4, 0, 1, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			text := `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - name: r
        upstreams: ["{{backend}}"]
        rate: ` + tc.rate + `
`
			d := startDaemon(t, text)
			c := d.client("127.0.0.2")
			relayed := leanRelayed(t, d)
			ok, refused := 0, 0
			for i := range tc.n {
				switch st, _, _ := get(t, c, d.url("web", "/")); st {
				case http.StatusOK:
					ok++
				case http.StatusTooManyRequests:
					refused++
				default:
					t.Fatalf("request %d: status %d", i, st)
				}
			}
			if ok != tc.ok || refused != tc.refused {
				t.Fatalf("%d admitted and %d refused, want %d and %d", ok, refused, tc.ok, tc.refused)
			}
			if got := leanRelayed(t, d) - relayed; got != tc.onBytePath {
				t.Errorf("%d requests relayed on the byte path, want %d", got, tc.onBytePath)
			}
			rt := d.route("web", "r")
			if rt.Path != "event_loops" {
				t.Errorf("the route is served on %s, want event_loops", rt.Path)
			}
			tot := rt.Rate.Totals
			if int(tot.Admitted+tot.Delayed) != tc.ok || int(tot.Refused) != tc.refused {
				t.Errorf("the rate counted %+v; want %d admitted (delayed included) and %d refused, each once", tot, tc.ok, tc.refused)
			}
			if rt.Limit != nil && int(rt.Limit.Totals.Granted) != tc.ok {
				t.Errorf("the route's limit granted %d permits for %d admitted requests: a request the rate refused took one", rt.Limit.Totals.Granted, tc.ok)
			}
			if tc.delayedFirst && tot.Delayed != uint64(tc.ok-tc.onBytePath) {
				t.Errorf("the rate delayed %d requests, want %d", tot.Delayed, tc.ok-tc.onBytePath)
			}
			c.CloseIdleConnections()
		})
	}
}
