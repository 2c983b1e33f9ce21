package forward_test

import (
	"github.com/seed-a07d1050/portcullis/internal/proxytest"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a07d1050/portcullis/internal/forward"
	"github.com/seed-a07d1050/portcullis/internal/waitfor"
)

// gather returns the value of each series c exports, by name and label value
// ("name" or "name/reason"), checking that every one carries the listener label.
func gather(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := make(map[string]float64)
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				if l.GetName() != "listener" {
					name += "/" + l.GetValue()
				} else if l.GetValue() != "egress" {
					t.Errorf("%s: listener %q", mf.GetName(), l.GetValue())
				}
			}
			switch {
			case m.Counter != nil:
				got[name] = m.Counter.GetValue()
			case m.Gauge != nil:
				got[name] = m.Gauge.GetValue()
			}
		}
	}
	return got
}

// TestCollector opens a tunnel and has a request denied, then checks what the collector
// says while the tunnel is open and once it has closed.
func TestCollector(t *testing.T) {
	s := newStack(t, stackOptions{})
	c := forward.NewCollector(s.proxy, prometheus.Labels{"listener": "egress"})
	conn := rawConn(t, s, "127.0.0.1")
	if _, resp := proxytest.Connect(t, conn, proxytest.TCPEcho(t), ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	if a := do(t, proxyClient(t, s, "", "", "127.0.0.1"), http.MethodGet, "http://192.0.2.1/", nil); a.status != http.StatusForbidden {
		t.Fatalf("GET to a denied address: %d, want 403", a.status)
	}
	want := map[string]float64{
		"portcullis_forward_tunnels_open":                1,
		"portcullis_forward_tunnels_total":               1,
		"portcullis_forward_refused_total/denied":        1,
		"portcullis_forward_refused_total/bad_request":   0,
		"portcullis_forward_refused_total/target_failed": 0,
	}
	got := gather(t, c)
	if len(got) != len(want) {
		t.Errorf("%d series, want %d: %v", len(got), len(want), got)
	}
	for name, v := range want {
		if g, ok := got[name]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", name, g, ok, v)
		}
	}
	_ = conn.Close()
	waitfor.Cond(t, "the tunnel to close", func() bool {
		return gather(t, c)["portcullis_forward_tunnels_open"] == 0
	})
	if got := gather(t, c)["portcullis_forward_tunnels_total"]; got != 1 {
		t.Errorf("tunnels_total after the close = %v, want 1", got)
	}
}
