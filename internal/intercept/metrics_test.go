package intercept_test

import (
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a07d1050/portcullis/internal/intercept"
)

func TestCollector(t *testing.T) {
	tg := newTarget(t)
	s := newStack(t, stackOptions{})
	c := client(t, s, "", "", "127.0.0.2", s.ca.pool)
	for range 2 {
		if a := mustGet(t, c, "https://localhost:"+tg.Port()+"/echo"); a.status != http.StatusOK {
			t.Fatal(a.status)
		}
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(intercept.NewCollector(s.ic, s.upstream, prometheus.Labels{"listener": "egress"}))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := make(map[string]float64)
	for _, mf := range families {
		m := mf.GetMetric()[0]
		if l := m.GetLabel(); len(l) != 1 || l[0].GetName() != "listener" || l[0].GetValue() != "egress" {
			t.Errorf("%s: labels %v", mf.GetName(), l)
		}
		switch {
		case m.Counter != nil:
			got[mf.GetName()] = m.Counter.GetValue()
		case m.Gauge != nil:
			got[mf.GetName()] = m.Gauge.GetValue()
		}
	}
	if len(got) != 17 {
		t.Errorf("%d metrics, want 17: %v", len(got), got)
	}
	for name, want := range map[string]float64{
		"portcullis_intercept_leaves_minted_total":             1,
		"portcullis_intercept_leaves_cache_hits_total":         0,
		"portcullis_intercept_leaves_cached":                   1,
		"portcullis_intercept_connects_total":                  1,
		"portcullis_intercept_sessions_total":                  1,
		"portcullis_intercept_sessions_open":                   1,
		"portcullis_intercept_requests_total":                  2,
		"portcullis_intercept_upstream_bad_certificates_total": 0,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
}
