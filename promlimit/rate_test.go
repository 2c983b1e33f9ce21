package promlimit_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a07d1050/portcullis/limit/limittest"
	"github.com/seed-a07d1050/portcullis/promlimit"
	"github.com/seed-a07d1050/portcullis/rate"
)

func TestRateCollectorReportsTotals(t *testing.T) {
	l, err := rate.New(rate.Config[string]{Rate: rate.PerSecond(1), Burst: 1, Clock: limittest.NewClock()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Allow("a") // admitted
	l.Allow("a") // delayed
	l.Allow("a") // refused
	c := promlimit.NewRateCollector(l, promlimit.Opts{Subsystem: "rate", ConstLabels: prometheus.Labels{"route": "api"}})
	fams := gather(t, c)
	if len(fams) != 9 {
		t.Fatalf("collector exports %d families, want 9", len(fams))
	}
	for name, want := range map[string]float64{
		"portcullis_rate_admitted_total":       1,
		"portcullis_rate_delayed_total":        1,
		"portcullis_rate_refused_total":        1,
		"portcullis_rate_shadow_refused_total": 0,
		"portcullis_rate_cancelled_total":      0,
		"portcullis_rate_keys":                 1,
		"portcullis_rate_delaying":             0, // Allow decides, it does not wait
	} {
		if got := value(t, fams, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}
