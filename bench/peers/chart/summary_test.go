package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/siege"
)

func TestMedian(t *testing.T) {
	tests := []struct {
		name string
		in   []float64
		want float64
	}{
		{"odd count", []float64{3, 1, 2}, 2},
		{"even count averages the middle two", []float64{4, 1, 3, 2}, 2.5},
		{"one value", []float64{7}, 7},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := median(tc.in); got != tc.want {
				t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
	if got := median(nil); !math.IsNaN(got) {
		t.Errorf("median(nil) = %v, want NaN", got)
	}
}

func TestNumMarshalsUnknownAsNull(t *testing.T) {
	b, err := json.Marshal(struct{ A, B Num }{Num(math.NaN()), 1.5})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"A":null,"B":1.5}`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

// report builds a siege report with the legitimate figures a summary reads.
func report(goodput float64, requests uint64, p99 time.Duration, attack *siege.AttackStats) *siege.Report {
	return &siege.Report{Legit: siege.LegitStats{
		GoodputPerSec: goodput, RequestsPerSec: goodput, Requests: requests, Successes: requests,
		SuccessRate: 1, P99: p99,
	}, Attack: attack}
}

func TestProtectionRowRatiosWithinEachRound(t *testing.T) {
	attack := &siege.AttackStats{PeakHeld: 64, ReconnectsPerSec: 1000, Elapsed: 10 * time.Second}
	runs := []Run{
		// Round 1: base 1000/s, attacked 900/s → 0.9; round 2: base 2000/s, attacked 2000/s → 1.0;
		// round 3: the same, 1.0. A ratio of medians would give 1900/2000 = 0.95 instead.
		{RunMeta: RunMeta{Proxy: "portcullis", Scenario: scNone, Round: 1, CPUTicks: 100, WallNS: 10e9}, Report: report(1000, 10000, 10*time.Millisecond, nil)},
		{RunMeta: RunMeta{Proxy: "portcullis", Scenario: scSlowloris, Round: 1, CPUTicks: 190, WallNS: 10e9}, Report: report(900, 9000, 20*time.Millisecond, attack)},
		{RunMeta: RunMeta{Proxy: "portcullis", Scenario: scNone, Round: 2, CPUTicks: 100, WallNS: 10e9}, Report: report(2000, 20000, 10*time.Millisecond, nil)},
		{RunMeta: RunMeta{Proxy: "portcullis", Scenario: scSlowloris, Round: 2, CPUTicks: 200, WallNS: 10e9}, Report: report(2000, 20000, 10*time.Millisecond, attack)},
		{RunMeta: RunMeta{Proxy: "portcullis", Scenario: scNone, Round: 3, CPUTicks: 100, WallNS: 10e9}, Report: report(2000, 20000, 10*time.Millisecond, nil)},
		{RunMeta: RunMeta{Proxy: "portcullis", Scenario: scSlowloris, Round: 3, CPUTicks: 200, WallNS: 10e9}, Report: report(1900, 19000, 15*time.Millisecond, attack)},
	}
	row := protectionRow(index(runs), "portcullis", scSlowloris)
	if row.Rounds != 3 {
		t.Fatalf("Rounds = %d, want 3", row.Rounds)
	}
	if got := float64(row.GoodputRatio); math.Abs(got-0.95) > 1e-9 {
		t.Errorf("GoodputRatio = %v, want the median of 0.9, 1.0, 0.95 = 0.95", got)
	}
	if got := float64(row.P99Ratio); math.Abs(got-1.5) > 1e-9 {
		t.Errorf("P99Ratio = %v, want the median of 2, 1, 1.5 = 1.5", got)
	}
	// Round 1: 1.9 s of CPU, of which 1.0 s × 9000/10000 = 0.9 s is legitimate work:
	// 1.0 s over 10 s of attack = 10 % of a core. Rounds 2 and 3: 1.0 s and 1.05 s → 10 % and 10.5 %.
	if got := float64(row.AttackCPUPct); math.Abs(got-10) > 1e-9 {
		t.Errorf("AttackCPUPct = %v, want 10", got)
	}
	if row.PeakHeld != 64 {
		t.Errorf("PeakHeld = %v, want 64", row.PeakHeld)
	}
}

func TestProtectionRowSkipsRoundsWithoutBaseline(t *testing.T) {
	runs := []Run{
		{RunMeta: RunMeta{Proxy: "nginx", Scenario: scSlowloris, Round: 1, WallNS: 1e9},
			Report: report(900, 900, time.Millisecond, &siege.AttackStats{Elapsed: time.Second})},
	}
	row := protectionRow(index(runs), "nginx", scSlowloris)
	if row.Rounds != 0 || row.GoodputRatio.Known() {
		t.Errorf("got %d rounds and ratio %v, want 0 rounds and an unknown ratio", row.Rounds, row.GoodputRatio)
	}
}

func TestCheckTargets(t *testing.T) {
	s := Summary{
		Protection: []ProtectionRow{
			{Proxy: "portcullis", Scenario: scSlowloris, Rounds: 1, GoodputRatio: 0.995, P99Ratio: 1.6, PeakHeld: 64, AttackCPUPct: 10},
			{Proxy: "portcullis-syn", Scenario: scSlowloris, Rounds: 1, GoodputRatio: 0.98, P99Ratio: 1.1, PeakHeld: 64, AttackCPUPct: 1},
			{Proxy: "haproxy", Scenario: scSlowloris, Rounds: 1, AttackCPUPct: 10.5},
		},
		Throughput: []ThroughputRow{
			{Proxy: "portcullis", Rounds: 1, ReqPerSec: 100, CPUPer1kMS: 40},
			{Proxy: "portcullis-log", Rounds: 1, ReqPerSec: 95, CPUPer1kMS: 45},
			{Proxy: "nginx", Rounds: 1, ReqPerSec: 200, CPUPer1kMS: 20},
		},
		// The targets are met on the rounds' own ratios, not on the ratio
		// of the medians above (which would say the opposite for nginx).
		Paired: []PairedRow{
			{A: "portcullis", B: "nginx", Rounds: 3, ReqPerSec: 1.01, CPUPer1k: 0.99,
				EachReqPerSec: []Num{1.01, 0.9, 1.2}, EachCPUPer1k: []Num{0.99, 1.1, 0.8}},
			{A: "portcullis-log", B: "portcullis", Rounds: 3, ReqPerSec: 0.89, CPUPer1k: 1.09,
				EachReqPerSec: []Num{0.89, 0.8, 1}, EachCPUPer1k: []Num{1.09, 1.2, 1}},
		},
	}
	want := map[string]bool{
		"slowloris: goodput ≥ 0.99 of no-attack":                           true,
		"slowloris: p99 ≤ 1.5x no-attack":                                  false,
		"slowloris: ≤ 64 attacker connections held":                        true,
		"slowloris: less CPU on the attacker than HAProxy":                 false, // within 10 %: a tie
		"portcullis-syn, slowloris: goodput ≥ 0.99 of no-attack":           false,
		"portcullis-syn, slowloris: p99 ≤ 1.5x no-attack":                  true,
		"portcullis-syn, slowloris: ≤ 64 attacker connections held":        true,
		"portcullis-syn, slowloris: less CPU on the attacker than HAProxy": true,
		"throughput with limits ≥ nginx":                                   true,
		"CPU per request ≤ nginx":                                          true,
		"access log on: requests/s within 10% of off":                      false,
		"access log on: CPU per request within 10% of off":                 true,
	}
	got := checkTargets(s)
	if len(got) != len(want) {
		t.Fatalf("got %d checks, want %d: %+v", len(got), len(want), got)
	}
	for _, c := range got {
		w, ok := want[c.Target]
		if !ok || c.Met == nil || *c.Met != w {
			t.Errorf("%q: met %v, want %v (known target: %v)", c.Target, c.Met, w, ok)
		}
	}
}

// TestBuildWritesOutputs runs the whole program on two tiny runs and checks
// every output exists and the table names both rows.
func TestBuildWritesOutputs(t *testing.T) {
	raw := t.TempDir()
	write := func(name string, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(raw, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("meta.json", Meta{"cmd": "run.sh --quick", "rounds": "1", "cap": "64"})
	write("direct.throughput.1.json", report(1000, 10000, time.Millisecond, nil))
	write("direct.throughput.1.meta.json", RunMeta{Proxy: direct, Scenario: scThroughput, Round: 1, CPUTicks: 50, WallNS: 10e9})
	write("portcullis.throughput.1.json", report(500, 5000, 2*time.Millisecond, nil))
	write("portcullis.throughput.1.meta.json", RunMeta{Proxy: "portcullis", Scenario: scThroughput, Round: 1, CPUTicks: 40, WallNS: 10e9})
	// A run whose siege failed leaves an empty report and an error.
	write("portcullis.none.1.meta.json", RunMeta{Proxy: "portcullis", Scenario: scNone, Round: 1, Exit: 1, WallNS: 1e9})
	if err := os.WriteFile(filepath.Join(raw, "portcullis.none.1.json"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(raw, "portcullis.none.1.err"), []byte("siege: target unreachable\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	out := t.TempDir()
	md, png, js := filepath.Join(out, "r.md"), filepath.Join(out, "r.png"), filepath.Join(out, "r.json")
	if err := build(raw, md, png, js); err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| direct | 1000 | 1.00 |", "| portcullis | 500 | 0.50 |", "80.0 ms", "target unreachable"} {
		if !strings.Contains(string(text), want) {
			t.Errorf("results.md lacks %q:\n%s", want, text)
		}
	}
	if fi, err := os.Stat(png); err != nil || fi.Size() == 0 {
		t.Errorf("chart not written: %v", err)
	}
	if _, err := os.Stat(js); err != nil {
		t.Errorf("JSON not written: %v", err)
	}
}

func TestBuildFailsWithoutRuns(t *testing.T) {
	raw := t.TempDir()
	if err := os.WriteFile(filepath.Join(raw, "meta.json"), []byte(`{}`), 0o644); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	err := build(raw, filepath.Join(out, "a.md"), filepath.Join(out, "a.png"), filepath.Join(out, "a.json"))
	if err == nil || !strings.Contains(err.Error(), "no *.meta.json runs") {
		t.Errorf("build on an empty directory: err = %v, want one saying there are no runs", err)
	}
}

// TestFloorsAreThroughputOnly: the floor references get a throughput row
// each and no attack rows, and no target is checked on them.
func TestFloorsAreThroughputOnly(t *testing.T) {
	var runs []Run
	for _, p := range []string{"portcullis", floor, floorAdmit, floorEpollAdmit} {
		runs = append(runs, Run{RunMeta: RunMeta{Proxy: p, Scenario: scThroughput, Round: 1, WallNS: 1e9, CPUTicks: 10},
			Report: report(1000, 1000, time.Millisecond, nil)})
	}
	s := summarize(Meta{}, runs)
	if len(s.Throughput) != 4 || s.Throughput[1].Proxy != floor || s.Throughput[2].Proxy != floorAdmit || s.Throughput[3].Proxy != floorEpollAdmit {
		t.Fatalf("throughput rows %+v, want portcullis, floor, floor-admit, floor-epoll-admit", s.Throughput)
	}
	for _, r := range s.Protection {
		if isReference(r.Proxy) {
			t.Fatalf("an attack row for a floor: %+v", r)
		}
	}
	for _, c := range s.Targets {
		if strings.Contains(c.Target, floor) {
			t.Fatalf("a target checked on a floor: %+v", c)
		}
	}
}

// TestPairedRatiosWithinEachRound: a pair's ratios are taken within each
// round, where both ran, and their median is the row's.
func TestPairedRatiosWithinEachRound(t *testing.T) {
	var runs []Run
	add := func(proxy string, round int, rps float64, ticks int64) {
		runs = append(runs, Run{RunMeta: RunMeta{Proxy: proxy, Scenario: scThroughput, Round: round, WallNS: 1e9, CPUTicks: ticks},
			Report: report(rps, uint64(rps), time.Millisecond, nil)})
	}
	// Round 1 is a fast window for both, round 2 a slow one, round 3 has
	// no nginx run: the ratios are 1.1 and 1.05 whatever the drift.
	add("portcullis", 1, 1100, 100)
	add("nginx", 1, 1000, 100)
	add("portcullis", 2, 630, 60)
	add("nginx", 2, 600, 66)
	add("portcullis", 3, 900, 90)
	s := summarize(Meta{}, runs)
	pr, ok := findPaired(s, "portcullis", "nginx")
	if !ok || pr.Rounds != 2 {
		t.Fatalf("paired row %+v (found %v), want one of 2 rounds", pr, ok)
	}
	if math.Abs(float64(pr.ReqPerSec)-1.075) > 1e-9 {
		t.Errorf("req/s ratio %v, want the median of 1.1 and 1.05", pr.ReqPerSec)
	}
	// CPU per request: round 1 100/1100 over 100/1000; round 2 60/630 over 66/600.
	want := (1000.0/1100 + (60.0/630)/(66.0/600)) / 2
	if math.Abs(float64(pr.CPUPer1k)-want) > 1e-9 {
		t.Errorf("CPU ratio %v, want %v", pr.CPUPer1k, want)
	}
	if len(pr.EachReqPerSec) != 2 || math.Abs(float64(pr.EachReqPerSec[1])-1.05) > 1e-9 {
		t.Errorf("each round's req/s ratios %v, want [1.1 1.05]", pr.EachReqPerSec)
	}
}
