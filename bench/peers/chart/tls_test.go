package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func wrkOut(requests int, non2xx int) string {
	s := fmt.Sprintf("Running 10s test @ https://127.0.0.1:18495/\n  2 threads and 64 connections\n"+
		"  Thread Stats   Avg      Stdev     Max   +/- Stdev\n    Latency     1.71ms    4.06ms  40.84ms   95.12%%\n"+
		"  %d requests in 10.00s, 2.29MB read\n", requests)
	if non2xx > 0 {
		s += fmt.Sprintf("  Non-2xx or 3xx responses: %d\n", non2xx)
	}
	return s + "Requests/sec:   8469.00\nTransfer/sec:      1.13MB\n"
}

func h2loadOut(ok int) string {
	return fmt.Sprintf("finished in 10.00s, 3159.50 req/s, 139.15KB/s\n"+
		"requests: %d total, %d started, %d done, %d succeeded, 0 failed, 0 errored, 0 timeout\n"+
		"status codes: %d 2xx, 0 3xx, 0 4xx, 0 5xx\n", ok, ok, ok, ok, ok)
}

func connsOut(ok, resumed int) string {
	return fmt.Sprintf(`{"ok":%d,"resumed":%d,"errors":0,"seconds":10}`+"\n", ok, resumed)
}

// writeTLSRun writes one run as run.sh --tls does.
func writeTLSRun(t *testing.T, dir, proxy, scenario string, round int, cpuTicks int64, out string) {
	t.Helper()
	base := filepath.Join(dir, fmt.Sprintf("%s.%s.%d", proxy, scenario, round))
	meta := fmt.Sprintf(`{"proxy":%q,"scenario":%q,"round":%d,"exit":0,"cpu_ticks":%d,"wall_ns":10500000000,"machine_busy_ticks":2000,"load_average":3.5}`,
		proxy, scenario, round, cpuTicks)
	if err := os.WriteFile(base+".meta.json", []byte(meta), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(base+".out", []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestParseWrkCountsNon2xxAsFailed(t *testing.T) {
	var r TLSRun
	if err := parseWrk(&r, []byte(wrkOut(1000, 10))); err != nil {
		t.Fatal(err)
	}
	if r.OK != 990 || r.Failed != 10 || r.Seconds != 10 {
		t.Fatalf("parsed %+v; want 990 ok, 10 failed, 10 s", r)
	}
	if err := parseWrk(&r, []byte("unable to connect to 127.0.0.1:1 Connection refused\n")); err == nil {
		t.Fatal("wrk output without a summary parsed")
	}
}

// TestTLSRatiosWithinEachRound builds the summary of two rounds in which
// the machine's speed halves: the medians of each side move, the
// round-by-round ratios do not.
func TestTLSRatiosWithinEachRound(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "meta.json"), []byte(`{"cmd":"bench/peers/run.sh --tls","rounds":"2"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for round, speed := range map[int]int{1: 2, 2: 1} {
		// Portcullis: 0.8x nginx's requests at 1.5x its CPU per request.
		writeTLSRun(t, dir, "nginx-tls", "https1", round, 100, wrkOut(10000*speed, 0))
		writeTLSRun(t, dir, "portcullis-tls", "https1", round, 120, wrkOut(8000*speed, 0))
		writeTLSRun(t, dir, "nginx-tls", "h2", round, 100, h2loadOut(10000*speed))
		writeTLSRun(t, dir, "portcullis-tls", "h2", round, 100, h2loadOut(10000*speed))
		writeTLSRun(t, dir, "haproxy-tls", "h2", round, 100, h2loadOut(12000*speed))
		writeTLSRun(t, dir, "nginx-tls", "hs-full", round, 100, connsOut(1000*speed, 0))
		writeTLSRun(t, dir, "portcullis-tls", "hs-full", round, 100, connsOut(950*speed, 0))
		writeTLSRun(t, dir, "portcullis-tls", "hs-resumed", round, 100, connsOut(2000*speed, 1990*speed))
	}
	md, js := filepath.Join(dir, "tls.md"), filepath.Join(dir, "tls.json")
	if err := buildTLS(dir, md, js); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var s TLSSummary
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{
		"https1: portcullis-tls req/s ≥ 1.0x nginx-tls":           false,
		"https1: portcullis-tls CPU per request ≤ 1.0x nginx-tls": false,
		"h2: portcullis-tls req/s ≥ 1.0x nginx-tls":               true,
		"h2: portcullis-tls req/s ≥ 0.9x haproxy-tls":             false, // 0.83
		"h2: portcullis-tls CPU per request ≤ 1.2x nginx-tls":     true,
		"hs-full: portcullis-tls req/s ≥ 0.9x nginx-tls":          true,
	}
	if len(s.Targets) != len(want) {
		t.Fatalf("%d targets; want %d", len(s.Targets), len(want))
	}
	for _, c := range s.Targets {
		w, ok := want[c.Target]
		if !ok || c.Met == nil || *c.Met != w {
			t.Errorf("target %q: met %v (%s); want %v", c.Target, c.Met, c.Detail, w)
		}
	}
	for _, p := range s.Paired {
		if p.Scenario == "https1" && p.B == "nginx-tls" {
			if p.Rounds != 2 || math.Abs(float64(p.PerSec)-0.8) > 1e-9 || math.Abs(float64(p.CPUPer1k)-1.5) > 1e-9 {
				t.Fatalf("https1 pair %+v; want 0.8x per s and 1.5x CPU over 2 rounds", p)
			}
		}
	}
	for _, r := range s.Rows {
		if r.Proxy == "portcullis-tls" && r.Scenario == "hs-resumed" && math.Abs(float64(r.ResumedPct)-99.5) > 1e-9 {
			t.Fatalf("resumed %v%%; want 99.5%%", r.ResumedPct)
		}
	}
	text, _ := os.ReadFile(md)
	if !strings.Contains(string(text), "| https1: portcullis-tls req/s ≥ 1.0x nginx-tls | **no** |") {
		t.Fatalf("markdown lacks the unmet https1 target:\n%s", text)
	}
}
