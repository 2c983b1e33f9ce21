package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// The TLS scenarios of run.sh --tls, in the order the tables show them.
var tlsScenarios = []struct{ name, title string }{
	{"https1", "HTTPS/1.1 keep-alive (wrk, 2 threads, 64 connections)"},
	{"h2", "HTTP/2 (h2load, 16 connections × 16 streams)"},
	{"hs-full", "New connection per request, full TLS 1.3 handshakes (16 workers from 16 addresses)"},
	{"hs-resumed", "New connection per request, TLS 1.3 resumptions (16 workers from 16 addresses)"},
}

// tlsProxyOrder is the order of the TLS targets in the tables: the three
// proxies, then the references.
var tlsProxyOrder = []string{"portcullis-tls", "nginx-tls", "haproxy-tls", "tlsfloor", "tlsfloor-h2check", "tlsfloor-proxy", "nginx-static"}

// TLSRun is one run of a TLS scenario: what run.sh measured around it and
// what its load generator reported.
type TLSRun struct {
	Proxy            string  `json:"proxy"`
	Scenario         string  `json:"scenario"`
	Round            int     `json:"round"`
	Exit             int     `json:"exit"`
	CPUTicks         int64   `json:"cpu_ticks"`
	WallNS           int64   `json:"wall_ns"`
	MachineBusyTicks int64   `json:"machine_busy_ticks"`
	LoadAverage      float64 `json:"load_average"`
	// OK is the requests answered with a 2xx (for the handshake scenarios,
	// the connections), Failed the others and the errors, Seconds the
	// load generator's measured window.
	OK      int64   `json:"ok"`
	Failed  int64   `json:"failed"`
	Resumed int64   `json:"resumed"`
	Seconds float64 `json:"seconds"`
	Err     string  `json:"error,omitempty"`
}

func (r TLSRun) perSec() float64 { return div(float64(r.OK), r.Seconds) }

// cpuPer1k is the target's CPU per 1000 requests, in ms.
func (r TLSRun) cpuPer1k() float64 { return perK(float64(r.CPUTicks)/100, uint64(max(r.OK, 0))) }

// TLSRow is one target's medians in one scenario.
type TLSRow struct {
	Proxy      string `json:"proxy"`
	Scenario   string `json:"scenario"`
	Rounds     int    `json:"rounds"`
	PerSec     Num    `json:"per_s"`
	CPUPer1kMS Num    `json:"cpu_ms_per_1k"`
	Failed     int64  `json:"failed"`
	// ResumedPct is the share of connections that resumed a session.
	ResumedPct Num `json:"resumed_pct"`
}

// TLSPaired is A against B in one scenario, ratios taken round by round.
type TLSPaired struct {
	Scenario  string `json:"scenario"`
	A         string `json:"a"`
	B         string `json:"b"`
	Rounds    int    `json:"rounds"`
	PerSec    Num    `json:"per_s_ratio"`
	CPUPer1k  Num    `json:"cpu_per_request_ratio"`
	EachPer   []Num  `json:"each_round_per_s_ratio"`
	EachCPU   []Num  `json:"each_round_cpu_ratio"`
	LoadRange string `json:"load_average_range"`
}

// TLSSummary is what chart -tls writes.
type TLSSummary struct {
	Meta    Meta          `json:"meta"`
	Rows    []TLSRow      `json:"rows"`
	Paired  []TLSPaired   `json:"paired"`
	Targets []TargetCheck `json:"targets"`
	Runs    []TLSRun      `json:"runs"`
}

// tlsPairs are the comparisons the tables show: the daemon against each
// peer and against the Go floors (answering, and proxying at the least),
// the answering floor against nginx's static server, and the proxying
// floor against nginx proxying.
var tlsPairs = [][2]string{
	{"portcullis-tls", "nginx-tls"}, {"portcullis-tls", "haproxy-tls"}, {"portcullis-tls", "tlsfloor-h2check"},
	{"portcullis-tls", "tlsfloor-proxy"}, {"tlsfloor", "nginx-static"}, {"tlsfloor-h2check", "tlsfloor"},
	{"tlsfloor-proxy", "nginx-tls"},
}

// buildTLS reads the TLS runs of dir and writes their summary.
func buildTLS(dir, mdPath, jsonPath string) error {
	var meta Meta
	if err := readJSON(filepath.Join(dir, "meta.json"), &meta); err != nil {
		return err
	}
	runs, err := loadTLSRuns(dir)
	if err != nil {
		return err
	}
	s := summarizeTLS(meta, runs)
	if err := writeJSON(jsonPath, s); err != nil {
		return err
	}
	return os.WriteFile(mdPath, tlsMarkdown(s), 0o644)
}

func loadTLSRuns(dir string) ([]TLSRun, error) {
	metas, err := filepath.Glob(filepath.Join(dir, "*.meta.json"))
	if err != nil {
		return nil, err
	}
	if len(metas) == 0 {
		return nil, fmt.Errorf("no *.meta.json runs in %s", dir)
	}
	runs := make([]TLSRun, 0, len(metas))
	for _, m := range metas {
		var r TLSRun
		if err := readJSON(m, &r); err != nil {
			return nil, err
		}
		base := strings.TrimSuffix(m, ".meta.json")
		out, err := os.ReadFile(base + ".out")
		if err != nil {
			return nil, err
		}
		if err := parseLoad(&r, out); err != nil {
			r.Err = err.Error()
			if e, _ := os.ReadFile(base + ".err"); len(e) > 0 {
				r.Err += ": " + firstLine(string(e))
			}
		}
		runs = append(runs, r)
	}
	sort.Slice(runs, func(i, j int) bool {
		a, b := runs[i], runs[j]
		if a.Round != b.Round {
			return a.Round < b.Round
		}
		if a.Scenario != b.Scenario {
			return a.Scenario < b.Scenario
		}
		return a.Proxy < b.Proxy
	})
	return runs, nil
}

// parseLoad fills r's counts from its load generator's output.
func parseLoad(r *TLSRun, out []byte) error {
	switch r.Scenario {
	case "https1":
		return parseWrk(r, out)
	case "h2":
		return parseH2load(r, out)
	case "hs-full", "hs-resumed":
		return parseTLSConns(r, out)
	}
	return fmt.Errorf("unknown scenario %q", r.Scenario)
}

var (
	wrkTotal  = regexp.MustCompile(`(?m)^\s*(\d+) requests in ([0-9.]+)(us|ms|s|m),`)
	wrkNon2xx = regexp.MustCompile(`(?m)^\s*Non-2xx or 3xx responses: (\d+)`)
	wrkSocket = regexp.MustCompile(`(?m)^\s*Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
)

// parseWrk reads wrk's summary: "N requests in 10.00s, ...", and the
// non-2xx and socket error lines when present.
func parseWrk(r *TLSRun, out []byte) error {
	m := wrkTotal.FindSubmatch(out)
	if m == nil {
		return errors.New("wrk: no \"requests in\" line")
	}
	total, _ := strconv.ParseInt(string(m[1]), 10, 64)
	secs, _ := strconv.ParseFloat(string(m[2]), 64)
	secs *= map[string]float64{"us": 1e-6, "ms": 1e-3, "s": 1, "m": 60}[string(m[3])]
	var failed int64
	if m := wrkNon2xx.FindSubmatch(out); m != nil {
		failed, _ = strconv.ParseInt(string(m[1]), 10, 64)
	}
	if m := wrkSocket.FindSubmatch(out); m != nil {
		for _, g := range m[1:] {
			n, _ := strconv.ParseInt(string(g), 10, 64)
			failed += n
		}
	}
	r.OK, r.Failed, r.Seconds = total-min(failed, total), failed, secs
	return nil
}

var (
	h2Finished = regexp.MustCompile(`(?m)^finished in ([0-9.]+)(us|ms|s),`)
	h2Requests = regexp.MustCompile(`(?m)^requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout`)
	h2Status   = regexp.MustCompile(`(?m)^status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx`)
)

// parseH2load reads h2load's summary: the window ("finished in"), the
// requests that succeeded with a 2xx, and the others.
func parseH2load(r *TLSRun, out []byte) error {
	f, q, st := h2Finished.FindSubmatch(out), h2Requests.FindSubmatch(out), h2Status.FindSubmatch(out)
	if f == nil || q == nil || st == nil {
		return errors.New("h2load: no \"finished in\", \"requests:\" or \"status codes:\" line")
	}
	secs, _ := strconv.ParseFloat(string(f[1]), 64)
	secs *= map[string]float64{"us": 1e-6, "ms": 1e-3, "s": 1}[string(f[2])]
	n := func(b []byte) int64 { v, _ := strconv.ParseInt(string(b), 10, 64); return v }
	r.OK = n(st[1])
	r.Failed = n(q[2]) + n(q[3]) + n(q[4]) + n(st[2]) + n(st[3]) + n(st[4])
	r.Seconds = secs
	return nil
}

// parseTLSConns reads bench/peers/tlsconns's JSON line.
func parseTLSConns(r *TLSRun, out []byte) error {
	var v struct {
		OK, Resumed, Errors int64
		Seconds             float64
		FirstError          string `json:"first_error"`
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	if !sc.Scan() {
		return errors.New("tlsconns: no output")
	}
	if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
		return fmt.Errorf("tlsconns: %w", err)
	}
	r.OK, r.Resumed, r.Failed, r.Seconds = v.OK, v.Resumed, v.Errors, v.Seconds
	if v.FirstError != "" {
		r.Err = "first error: " + v.FirstError
	}
	return nil
}

type tlsKey struct {
	proxy, scenario string
	round           int
}

func summarizeTLS(meta Meta, runs []TLSRun) TLSSummary {
	s := TLSSummary{Meta: meta, Runs: runs}
	idx := map[tlsKey]*TLSRun{}
	roundSet := map[int]bool{}
	for i := range runs {
		r := &runs[i]
		if r.Seconds > 0 && r.OK > 0 {
			idx[tlsKey{r.Proxy, r.Scenario, r.Round}] = r
			roundSet[r.Round] = true
		}
	}
	var rounds []int
	for r := range roundSet {
		rounds = append(rounds, r)
	}
	sort.Ints(rounds)
	for _, sc := range tlsScenarios {
		for _, p := range tlsProxyOrder {
			if row := tlsRow(idx, rounds, runs, p, sc.name); row.Rounds > 0 {
				s.Rows = append(s.Rows, row)
			}
		}
		for _, pair := range tlsPairs {
			if pr := tlsPair(idx, rounds, sc.name, pair[0], pair[1]); pr.Rounds > 0 {
				s.Paired = append(s.Paired, pr)
			}
		}
	}
	s.Targets = tlsTargets(s.Paired)
	return s
}

func tlsRow(idx map[tlsKey]*TLSRun, rounds []int, runs []TLSRun, proxy, scenario string) TLSRow {
	row := TLSRow{Proxy: proxy, Scenario: scenario}
	smp := samples{}
	for _, rd := range rounds {
		r := idx[tlsKey{proxy, scenario, rd}]
		if r == nil {
			continue
		}
		row.Rounds++
		smp.add("per", r.perSec())
		smp.add("cpu", r.cpuPer1k())
		smp.add("resumed", 100*div(float64(r.Resumed), float64(r.OK)))
	}
	for _, r := range runs {
		if r.Proxy == proxy && r.Scenario == scenario {
			row.Failed += r.Failed
		}
	}
	row.PerSec, row.CPUPer1kMS, row.ResumedPct = smp.median("per"), smp.median("cpu"), smp.median("resumed")
	return row
}

func tlsPair(idx map[tlsKey]*TLSRun, rounds []int, scenario, a, b string) TLSPaired {
	pr := TLSPaired{Scenario: scenario, A: a, B: b}
	smp := samples{}
	lo, hi := 1e9, -1.0
	for _, rd := range rounds {
		ra, rb := idx[tlsKey{a, scenario, rd}], idx[tlsKey{b, scenario, rd}]
		if ra == nil || rb == nil {
			continue
		}
		pr.Rounds++
		per, cpu := div(ra.perSec(), rb.perSec()), div(ra.cpuPer1k(), rb.cpuPer1k())
		smp.add("per", per)
		smp.add("cpu", cpu)
		pr.EachPer = append(pr.EachPer, Num(per))
		pr.EachCPU = append(pr.EachCPU, Num(cpu))
		lo, hi = min(lo, ra.LoadAverage, rb.LoadAverage), max(hi, ra.LoadAverage, rb.LoadAverage)
	}
	pr.PerSec, pr.CPUPer1k = smp.median("per"), smp.median("cpu")
	if pr.Rounds > 0 {
		pr.LoadRange = fmt.Sprintf("%.1f–%.1f", lo, hi)
	}
	return pr
}

// tlsTarget is one of issue 39's targets: A's figure over B's, the median
// of the rounds' ratios, at least (per second) or at most (CPU) bound.
type tlsTarget struct {
	scenario, a, b string
	cpu            bool
	bound          float64
}

var tlsTargetList = []tlsTarget{
	{"https1", "portcullis-tls", "nginx-tls", false, 1.0},
	{"https1", "portcullis-tls", "nginx-tls", true, 1.0},
	{"h2", "portcullis-tls", "nginx-tls", false, 1.0},
	{"h2", "portcullis-tls", "haproxy-tls", false, 0.9},
	{"h2", "portcullis-tls", "nginx-tls", true, 1.2},
	{"hs-full", "portcullis-tls", "nginx-tls", false, 0.9},
}

func tlsTargets(paired []TLSPaired) []TargetCheck {
	var out []TargetCheck
	for _, t := range tlsTargetList {
		name := fmt.Sprintf("%s: %s req/s ≥ %.1fx %s", t.scenario, t.a, t.bound, t.b)
		if t.cpu {
			name = fmt.Sprintf("%s: %s CPU per request ≤ %.1fx %s", t.scenario, t.a, t.bound, t.b)
		}
		c := TargetCheck{Target: name, Detail: "n/a"}
		for _, p := range paired {
			if p.Scenario != t.scenario || p.A != t.a || p.B != t.b {
				continue
			}
			ratio, each := p.PerSec, p.EachPer
			met := ratio >= Num(t.bound)
			if t.cpu {
				ratio, each = p.CPUPer1k, p.EachCPU
				met = ratio <= Num(t.bound)
			}
			if ratio.Known() {
				c.Met = &met
				c.Detail = roundRatios(ratio, each)
			}
		}
		out = append(out, c)
	}
	return out
}

// ran reports whether scenario has any run in s.
func (s TLSSummary) ran(scenario string) bool {
	for _, r := range s.Rows {
		if r.Scenario == scenario {
			return true
		}
	}
	return false
}

func tlsMarkdown(s TLSSummary) []byte {
	var b bytes.Buffer
	m := s.Meta
	fmt.Fprintf(&b, "# TLS scenarios: results\n\n")
	fmt.Fprintf(&b, "Generated by `bench/peers/chart -tls` from the runs of `%s`, %s to %s. "+
		"Medians of %s interleaved rounds, windows of %s; ratios are taken within each round, then their median.\n\n",
		m["cmd"], m["start"], m["end"], m["rounds"], m["duration"])
	fmt.Fprintf(&b, "| | |\n| --- | --- |\n")
	for _, kv := range [][2]string{
		{"Portcullis", m["portcullis"]}, {"nginx", m["nginx"]}, {"HAProxy", m["haproxy"]}, {"Go", m["go"]},
		{"OpenSSL", m["openssl"]}, {"wrk", m["wrk"]}, {"h2load", m["h2load"]},
		{"CPU", m["cpus"] + " × " + m["cpu"]}, {"load average (1, 5, 15 min) at start / end", m["load_start"] + " / " + m["load_end"]},
	} {
		fmt.Fprintf(&b, "| %s | %s |\n", kv[0], mdEscape(kv[1]))
	}
	for _, sc := range tlsScenarios {
		if !s.ran(sc.name) {
			continue // not run (run.sh --tls-scenarios)
		}
		fmt.Fprintf(&b, "\n## %s\n\n| target | per s | CPU per 1k | failed | resumed | rounds |\n| --- | ---: | ---: | ---: | ---: | ---: |\n", sc.title)
		for _, r := range s.Rows {
			if r.Scenario == sc.name {
				fmt.Fprintf(&b, "| %s | %s | %s | %d | %s | %d |\n", r.Proxy, f(r.PerSec, "%.0f"),
					f(r.CPUPer1kMS, "%.1f ms"), r.Failed, f(r.ResumedPct, "%.0f%%"), r.Rounds)
			}
		}
		fmt.Fprintf(&b, "\n| A vs B | per s | CPU per request | each round (per s; CPU) | load average |\n| --- | ---: | ---: | --- | --- |\n")
		for _, p := range s.Paired {
			if p.Scenario == sc.name {
				fmt.Fprintf(&b, "| %s vs %s | %s | %s | %s; %s | %s |\n", p.A, p.B, f(p.PerSec, "%.2fx"),
					f(p.CPUPer1k, "%.2fx"), joinNums(p.EachPer), joinNums(p.EachCPU), p.LoadRange)
			}
		}
	}
	fmt.Fprintf(&b, "\n## Targets (issue 39)\n\n| target | met | rounds' ratios |\n| --- | --- | --- |\n")
	for _, c := range s.Targets {
		met := "n/a"
		if c.Met != nil {
			met = map[bool]string{true: "yes", false: "**no**"}[*c.Met]
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", c.Target, met, mdEscape(c.Detail))
	}
	var failed []string
	for _, r := range s.Runs {
		if r.Exit != 0 || r.Err != "" {
			failed = append(failed, fmt.Sprintf("- round %d %s %s: exit %d %s", r.Round, r.Proxy, r.Scenario, r.Exit, mdEscape(r.Err)))
		}
	}
	if len(failed) > 0 {
		fmt.Fprintf(&b, "\n## Runs with errors\n\n%s\n", strings.Join(failed, "\n"))
	}
	return b.Bytes()
}
