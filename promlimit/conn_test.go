package promlimit_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a07d1050/portcullis/connlimit"
	"github.com/seed-a07d1050/portcullis/promlimit"
)

func TestConnCollector(t *testing.T) {
	src := promlimit.ConnStatsFunc(func() connlimit.Stats {
		return connlimit.Stats{Accepted: 10, Exempt: 2, Open: 3, Pending: 1,
			Refused: connlimit.Refused{ClientCap: 4, ClientRate: 2, ProxyHeaderSlow: 5}}
	})
	fams := gather(t, promlimit.NewConnCollector(src, promlimit.Opts{ConstLabels: prometheus.Labels{"listener": "web"}}))
	for name, want := range map[string]float64{
		"portcullis_connections_accepted_total":      10,
		"portcullis_connections_exempt_total":        2,
		"portcullis_connections_open":                3,
		"portcullis_connections_pending":             1,
		"portcullis_connections_accept_errors_total": 0,
	} {
		if got := value(t, fams, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	refused := map[string]float64{}
	for _, m := range fams["portcullis_connections_refused_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "reason" {
				refused[l.GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	want := map[string]float64{"client_cap": 4, "level": 0, "client_rate": 2, "proxy_header_bad": 0, "proxy_header_slow": 5,
		"proxy_header_missing": 0, "store": 0, "shutdown": 0, "filtered": 0}
	if len(refused) != len(want) {
		t.Fatalf("refused reasons %v, want %v", refused, want)
	}
	for r, n := range want {
		if refused[r] != n {
			t.Errorf("refused{reason=%s} = %v, want %v", r, refused[r], n)
		}
	}
}
