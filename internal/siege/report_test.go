package siege_test

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/siege"
)

func reportWith(goodput float64, p99 time.Duration) siege.Report {
	return siege.Report{Legit: siege.LegitStats{GoodputPerSec: goodput, P99: p99}}
}

func TestCompare(t *testing.T) {
	tests := []struct {
		name           string
		base, attacked siege.Report
		goodput, p99   float64
	}{
		{name: "unharmed", base: reportWith(1000, 6*time.Millisecond), attacked: reportWith(1000, 6*time.Millisecond), goodput: 1, p99: 1},
		{name: "HAProxy-like", base: reportWith(1000, 6400*time.Microsecond), attacked: reportWith(990, 9400*time.Microsecond), goodput: 0.99, p99: 9.4 / 6.4},
		{name: "locked out", base: reportWith(1000, 6*time.Millisecond), attacked: reportWith(0, 0), goodput: 0, p99: 0},
		{name: "no baseline goodput", base: reportWith(0, 0), attacked: reportWith(500, time.Millisecond), goodput: 0, p99: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := siege.Compare(tc.base, tc.attacked)
			if !near(c.GoodputRatio, tc.goodput) || !near(c.P99Ratio, tc.p99) {
				t.Errorf("ratios %v, %v; want %v, %v", c.GoodputRatio, c.P99Ratio, tc.goodput, tc.p99)
			}
			if c.BaseGoodput != tc.base.Legit.GoodputPerSec || c.P99 != tc.attacked.Legit.P99 {
				t.Errorf("comparison does not carry its inputs: %+v", c)
			}
		})
	}
}

func TestMeets(t *testing.T) {
	tests := []struct {
		name               string
		c                  siege.Comparison
		minGoodput, maxP99 float64
		want               bool
	}{
		{name: "within both", c: siege.Comparison{GoodputRatio: 0.995, P99Ratio: 1.4}, minGoodput: 0.99, maxP99: 1.5, want: true},
		{name: "goodput short", c: siege.Comparison{GoodputRatio: 0.98, P99Ratio: 1.0}, minGoodput: 0.99, maxP99: 1.5},
		{name: "p99 over", c: siege.Comparison{GoodputRatio: 1, P99Ratio: 1.6}, minGoodput: 0.99, maxP99: 1.5},
		{name: "undefined p99 fails a bound", c: siege.Comparison{GoodputRatio: 1}, maxP99: 1.5},
		{name: "unchecked bounds", c: siege.Comparison{}, want: true},
		{name: "exactly on the bounds", c: siege.Comparison{GoodputRatio: 0.99, P99Ratio: 1.5}, minGoodput: 0.99, maxP99: 1.5, want: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.c.Meets(tc.minGoodput, tc.maxP99); got != tc.want {
				t.Errorf("Meets = %v, want %v", got, tc.want)
			}
		})
	}
}

func sampleReport() *siege.Report {
	return &siege.Report{
		Scenario: siege.ScenarioSlowloris,
		Target:   "http://127.0.0.1:8080/",
		Duration: 10 * time.Second,
		Warmup:   time.Second,
		Legit: siege.LegitStats{
			Clients: 16, ConnsPerClient: 1, Timeout: 2 * time.Second,
			Requests: 20000, Successes: 19990, ConnsOpened: 20000,
			RequestsPerSec: 2000, GoodputPerSec: 1999, SuccessRate: 0.9995,
			P50: 1200 * time.Microsecond, P99: 9400 * time.Microsecond, P999: 20 * time.Millisecond, Max: 40 * time.Millisecond,
			Errors: siege.ErrorCounts{Timeout: 4, EOF: 6},
		},
		Attack: &siege.AttackStats{
			Addr: netip.MustParseAddr("127.0.0.2"), Slowloris: 3000, Elapsed: 11 * time.Second,
			Attempts: 30000, Admitted: 64, Refused: 29900, Unsettled: 36, PeakHeld: 64,
			Reconnects: 27000, ReconnectsPerSec: 2454.5,
		},
		CPU:       &siege.CPUStats{PID: 99, Target: 2 * time.Second, TargetPer1k: 100 * time.Millisecond, Self: 3 * time.Second},
		FileLimit: 20000,
	}
}

func TestWriteTable(t *testing.T) {
	var b bytes.Buffer
	if err := sampleReport().WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"scenario", "slowloris",
		"10s after 1s of attack alone",
		"16 addresses × 1 connections, fresh connection per request, timeout 2s",
		"20000 (2000.0/s)", "19990 (99.95%)", "1999.0/s",
		"p50 1.2ms  p99 9.4ms  p99.9 20ms  max 40ms",
		"10: timeout 4, refused 0, reset 0, eof 6, 429 0, 5xx 0, other 0",
		"127.0.0.2: 3000 slowloris + 0 slow-request connections",
		"30000 (reconnects 27000, 2454.5/s)",
		"peak held at once", "64",
		"cpu of pid 99", "100ms per 1k requests",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	var c bytes.Buffer
	base := sampleReport()
	base.Scenario, base.Attack = siege.ScenarioNone, nil
	base.Legit.GoodputPerSec, base.Legit.P99 = 2000, 6400*time.Microsecond
	if err := siege.WriteComparison(&c, base, sampleReport()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"none", "slowloris", "ratio", "0.9995", "1.47", "6.4ms", "9.4ms"} {
		if !strings.Contains(c.String(), want) {
			t.Errorf("comparison lacks %q:\n%s", want, c.String())
		}
	}
}

func TestReportJSON(t *testing.T) {
	b, err := json.Marshal(sampleReport())
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	legit := m["legit"].(map[string]any)
	attack := m["attack"].(map[string]any)
	checks := map[string]any{
		"scenario":       m["scenario"],
		"duration_ns":    m["duration_ns"],
		"goodput_per_s":  legit["goodput_per_s"],
		"p99_ns":         legit["p99_ns"],
		"errors.timeout": legit["errors"].(map[string]any)["timeout"],
		"peak_held":      attack["peak_held"],
		"attack.addr":    attack["addr"],
	}
	want := map[string]any{
		"scenario": "slowloris", "duration_ns": 1e10, "goodput_per_s": 1999.0, "p99_ns": 9.4e6,
		"errors.timeout": 4.0, "peak_held": 64.0, "attack.addr": "127.0.0.2",
	}
	for k, v := range want {
		if checks[k] != v {
			t.Errorf("JSON %s = %v, want %v", k, checks[k], v)
		}
	}
	var back siege.Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Attack == nil || *back.Attack != *sampleReport().Attack || back.Legit != sampleReport().Legit {
		t.Error("JSON round trip lost fields")
	}
	plain := sampleReport()
	plain.Attack, plain.CPU = nil, nil
	b, _ = json.Marshal(plain)
	if strings.Contains(string(b), `"attack"`) || strings.Contains(string(b), `"cpu"`) {
		t.Errorf("absent sections should be omitted: %s", b)
	}
}
