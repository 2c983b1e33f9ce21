package main

import (
	"encoding/json"
	"math"
	"slices"
	"time"
)

// Scenario names as run.sh writes them into file names.
const (
	scThroughput   = "throughput"
	scNone         = "none"
	scSlowloris    = "slowloris"
	scSlowRequests = "slow-requests"
	direct         = "direct"
)

// proxyOrder is the order of proxies in tables and charts.
var proxyOrder = []string{"portcullis", "portcullis-lean", "portcullis-fast", "portcullis-nethttp", "portcullis-log", "portcullis-syn", "portcullis-rst", "nginx", "haproxy", floor, floorAdmit, floorEpollAdmit}

// floor is bench/floor/floorproxy (bench/floor): the least a Go proxy does per
// request, a reference for the throughput scenario only. It limits
// nothing, so it has no place in the attack scenarios.
const floor = "floor"

// floorAdmit is bench/floor -admit: the floor plus the admission work a
// data path relaying bytes could not skip, what such a path could reach. A
// reference for the throughput scenario only, as the floor is.
const floorAdmit = "floor-admit"

// floorEpollAdmit is bench/floor -admit -epoll: floor-admit's work on
// epoll loops of its own, outside Go's network poller (nginx's shape), a
// reference for the throughput scenario only.
const floorEpollAdmit = "floor-epoll-admit"

// isReference reports whether p is one of the floors, which are measured
// in the throughput scenario only and checked against no target.
func isReference(p string) bool { return p == floor || p == floorAdmit || p == floorEpollAdmit }

// attackScenarios are the scenarios with an attacker, in table order.
var attackScenarios = []string{scSlowloris, scSlowRequests}

// Summary is everything the outputs show. Every figure is a median over the
// rounds in which it could be computed; Rounds says how many that was.
type Summary struct {
	Meta       Meta            `json:"meta"`
	Proxies    []string        `json:"proxies"`
	Throughput []ThroughputRow `json:"throughput"`
	Protection []ProtectionRow `json:"protection"`
	Paired     []PairedRow     `json:"paired"`
	Targets    []TargetCheck   `json:"targets"`
	// OtherCoresMedian and OtherCoresMax describe the CPU other people's
	// processes took during the runs, in cores (the machine has Meta["cpus"]).
	OtherCoresMedian Num   `json:"other_cores_median"`
	OtherCoresMax    Num   `json:"other_cores_max"`
	Runs             []Run `json:"runs"`
}

// ThroughputRow is one target under the throughput scenario.
type ThroughputRow struct {
	Proxy     string `json:"proxy"`
	Rounds    int    `json:"rounds"`
	ReqPerSec Num    `json:"requests_per_s"`
	// VsDirect is goodput over the same round's direct-to-backend goodput.
	VsDirect    Num `json:"vs_direct"`
	SuccessRate Num `json:"success_rate"`
	P50MS       Num `json:"p50_ms"`
	P99MS       Num `json:"p99_ms"`
	// CPUPer1kMS is the target's CPU per 1000 requests, in ms.
	CPUPer1kMS Num `json:"cpu_per_1k_requests_ms"`
	// SiegeCPUPer1kMS is the load generator's own CPU per 1000 requests.
	SiegeCPUPer1kMS Num `json:"siege_cpu_per_1k_requests_ms"`
}

// ProtectionRow is one proxy under one attack scenario, against its own
// no-attack run of the same round.
type ProtectionRow struct {
	Proxy       string `json:"proxy"`
	Scenario    string `json:"scenario"`
	Rounds      int    `json:"rounds"`
	BaseGoodput Num    `json:"base_goodput_per_s"`
	Goodput     Num    `json:"goodput_per_s"`
	// GoodputRatio is attacked goodput over no-attack goodput.
	GoodputRatio Num `json:"goodput_ratio"`
	SuccessRate  Num `json:"success_rate"`
	BaseP99MS    Num `json:"base_p99_ms"`
	P99MS        Num `json:"p99_ms"`
	P99Ratio     Num `json:"p99_ratio"`
	// PeakHeld is the most attacker connections the proxy held at once.
	PeakHeld Num `json:"attacker_peak_held"`
	// ReconnectsPerSec is the attacker's reconnect rate: refusals breed
	// reconnects.
	ReconnectsPerSec Num `json:"attacker_reconnects_per_s"`
	// BaseCPUPct and CPUPct are the proxy's CPU, as % of one core, over the
	// no-attack run and the attacked run.
	BaseCPUPct Num `json:"base_cpu_pct_core"`
	CPUPct     Num `json:"cpu_pct_core"`
	// AttackCPUPct estimates the CPU the attacker cost the proxy, as % of one
	// core while the attacker ran: the attacked run's CPU less the no-attack
	// run's CPU scaled to the legitimate requests served, over the attack's
	// duration.
	AttackCPUPct Num `json:"attacker_cpu_pct_core"`
}

func summarize(meta Meta, runs []Run) Summary {
	s := Summary{Meta: meta, Runs: runs}
	present := map[string]bool{}
	for _, r := range runs {
		present[r.Proxy] = true
	}
	for _, p := range proxyOrder {
		if present[p] {
			s.Proxies = append(s.Proxies, p)
		}
	}
	idx := index(runs)
	for _, p := range append([]string{direct}, s.Proxies...) {
		if row := throughputRow(idx, p); row.Rounds > 0 {
			s.Throughput = append(s.Throughput, row)
		}
	}
	for _, sc := range attackScenarios {
		for _, p := range s.Proxies {
			if !isReference(p) {
				s.Protection = append(s.Protection, protectionRow(idx, p, sc))
			}
		}
	}
	s.Paired = pairedRows(idx)
	s.Targets = checkTargets(s)
	others := make([]float64, len(runs))
	for i, r := range runs {
		others[i] = r.OtherCores()
	}
	s.OtherCoresMedian = Num(median(others))
	if len(others) > 0 {
		s.OtherCoresMax = Num(slices.Max(others))
	}
	return s
}

type key struct {
	proxy, scenario string
	round           int
}

// index maps each usable run (one with a report) by proxy, scenario, round.
func index(runs []Run) map[key]*Run {
	m := make(map[key]*Run, len(runs))
	for i := range runs {
		if r := &runs[i]; r.Report != nil {
			m[key{r.Proxy, r.Scenario, r.Round}] = r
		}
	}
	return m
}

func rounds(idx map[key]*Run) []int {
	seen := map[int]bool{}
	for k := range idx {
		seen[k.round] = true
	}
	out := make([]int, 0, len(seen))
	for r := range seen {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

// samples collects one value per round for each named field.
type samples map[string][]float64

func (s samples) add(name string, v float64) {
	if !math.IsNaN(v) && !math.IsInf(v, 0) {
		s[name] = append(s[name], v)
	}
}

func (s samples) median(name string) Num { return Num(median(s[name])) }

func throughputRow(idx map[key]*Run, proxy string) ThroughputRow {
	row := ThroughputRow{Proxy: proxy}
	s := samples{}
	for _, r := range rounds(idx) {
		t := idx[key{proxy, scThroughput, r}]
		if t == nil {
			continue
		}
		row.Rounds++
		l := t.Report.Legit
		s.add("rps", l.RequestsPerSec)
		s.add("ok", l.SuccessRate)
		s.add("p50", ms(l.P50))
		s.add("p99", ms(l.P99))
		s.add("cpu", perK(t.CPUSeconds(), l.Requests))
		if c := t.Report.CPU; c != nil {
			s.add("self", perK(c.Self.Seconds(), l.Requests))
		}
		if d := idx[key{direct, scThroughput, r}]; d != nil {
			s.add("vs", div(l.GoodputPerSec, d.Report.Legit.GoodputPerSec))
		}
	}
	row.ReqPerSec, row.VsDirect, row.SuccessRate = s.median("rps"), s.median("vs"), s.median("ok")
	row.P50MS, row.P99MS = s.median("p50"), s.median("p99")
	row.CPUPer1kMS, row.SiegeCPUPer1kMS = s.median("cpu"), s.median("self")
	return row
}

func protectionRow(idx map[key]*Run, proxy, scenario string) ProtectionRow {
	row := ProtectionRow{Proxy: proxy, Scenario: scenario}
	s := samples{}
	for _, r := range rounds(idx) {
		a, b := idx[key{proxy, scenario, r}], idx[key{proxy, scNone, r}]
		if a == nil || b == nil || a.Report.Attack == nil {
			continue
		}
		row.Rounds++
		al, bl, at := a.Report.Legit, b.Report.Legit, a.Report.Attack
		s.add("bg", bl.GoodputPerSec)
		s.add("g", al.GoodputPerSec)
		s.add("gr", div(al.GoodputPerSec, bl.GoodputPerSec))
		s.add("ok", al.SuccessRate)
		s.add("bp99", ms(bl.P99))
		s.add("p99", ms(al.P99))
		s.add("p99r", div(float64(al.P99), float64(bl.P99)))
		s.add("held", float64(at.PeakHeld))
		s.add("rec", at.ReconnectsPerSec)
		s.add("bcpu", 100*b.CPUSeconds()/seconds(b.WallNS))
		s.add("cpu", 100*a.CPUSeconds()/seconds(a.WallNS))
		legitShare := b.CPUSeconds() * div(float64(al.Requests), float64(bl.Requests))
		s.add("acpu", 100*(a.CPUSeconds()-legitShare)/at.Elapsed.Seconds())
	}
	row.BaseGoodput, row.Goodput, row.GoodputRatio = s.median("bg"), s.median("g"), s.median("gr")
	row.SuccessRate = s.median("ok")
	row.BaseP99MS, row.P99MS, row.P99Ratio = s.median("bp99"), s.median("p99"), s.median("p99r")
	row.PeakHeld, row.ReconnectsPerSec = s.median("held"), s.median("rec")
	row.BaseCPUPct, row.CPUPct, row.AttackCPUPct = s.median("bcpu"), s.median("cpu"), s.median("acpu")
	return row
}

// Num is a figure that may be unknown (NaN): JSON null, "n/a" in tables.
type Num float64

// Known reports whether n is a number.
func (n Num) Known() bool { return !math.IsNaN(float64(n)) }

// MarshalJSON writes null for an unknown figure, which JSON cannot hold.
func (n Num) MarshalJSON() ([]byte, error) {
	if !n.Known() || math.IsInf(float64(n), 0) {
		return []byte("null"), nil
	}
	return json.Marshal(float64(n))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func seconds(ns int64) float64 { return float64(ns) / 1e9 }

// perK is CPU seconds per 1000 requests, in ms.
func perK(cpuSeconds float64, requests uint64) float64 {
	return div(cpuSeconds*1e6, float64(requests))
}

// div is a/b, NaN when b is 0 so that samples drops it.
func div(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

// median of xs, NaN for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
