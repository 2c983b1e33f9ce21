package redisprom_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a07d1050/portcullis/limit/redisstore"
	"github.com/seed-a07d1050/portcullis/limit/redisstore/redisprom"
)

type fixed redisstore.Stats

func (f fixed) Stats() redisstore.Stats { return redisstore.Stats(f) }

func TestCollectorExportsStats(t *testing.T) {
	counts := make([]uint64, len(redisstore.LatencyBounds())+1)
	counts[0], counts[2], counts[len(counts)-1] = 3, 2, 1
	src := fixed{
		Acquire:   redisstore.CallStats{Calls: 10, Errors: 2},
		Sync:      redisstore.CallStats{Calls: 4},
		Heartbeat: redisstore.CallStats{Calls: 1, Errors: 1},
		Latency:   redisstore.Histogram{Counts: counts, Count: 6, Sum: 0.5},
		Fallbacks: 7, FallbackRefusals: 1, Unavailable: 5, Cached: 9, Notifications: 2,
		Breaker: redisstore.BreakerOpen, BreakerOpens: 3, Keys: 4, Held: 8,
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(redisprom.NewCollector(src, "", prometheus.Labels{"store": "a"})); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			name := mf.GetName()
			for _, l := range m.Label {
				if l.GetName() != "store" {
					name += "{" + l.GetValue() + "}"
				}
			}
			switch {
			case m.Counter != nil:
				got[name] = m.Counter.GetValue()
			case m.Gauge != nil:
				got[name] = m.Gauge.GetValue()
			case m.Histogram != nil:
				got[name+"_count"] = float64(m.Histogram.GetSampleCount())
				got[name+"_le_0.001"] = float64(m.Histogram.Bucket[2].GetCumulativeCount())
			}
		}
	}
	want := map[string]float64{
		"portcullis_redisstore_calls_total{acquire}":           10,
		"portcullis_redisstore_errors_total{acquire}":          2,
		"portcullis_redisstore_calls_total{sync}":              4,
		"portcullis_redisstore_errors_total{heartbeat}":        1,
		"portcullis_redisstore_call_duration_seconds_count":    6,
		"portcullis_redisstore_call_duration_seconds_le_0.001": 5,
		"portcullis_redisstore_fallbacks_total{granted}":       7,
		"portcullis_redisstore_fallbacks_total{refused}":       1,
		"portcullis_redisstore_unavailable_total":              5,
		"portcullis_redisstore_cached_decisions_total":         9,
		"portcullis_redisstore_notifications_total":            2,
		"portcullis_redisstore_breaker_state":                  2,
		"portcullis_redisstore_breaker_opens_total":            3,
		"portcullis_redisstore_keys":                           4,
		"portcullis_redisstore_held_permits":                   8,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}

var _ redisprom.StatsSource = (*redisstore.Store[string])(nil)
