package main

import (
	"fmt"
	"strings"
)

// The targets for Portcullis under attack.
const (
	minGoodputRatio = 0.99
	maxP99Ratio     = 1.5
	maxHeld         = 64
	// cpuTie is the relative CPU difference below which two proxies tie.
	cpuTie = 0.10
	// maxLogCost is the most the access log may cost, relative to the same
	// daemon without it, in requests/s and in CPU per request.
	maxLogCost = 0.10
)

// TargetCheck is one of the targets, checked on the medians.
type TargetCheck struct {
	Target string `json:"target"`
	// Met is nil when the run lacks what the check needs.
	Met    *bool  `json:"met"`
	Detail string `json:"detail"`
}

// portcullisVariants are the Portcullis configurations whose attack
// targets are checked, each under its own label.
var portcullisVariants = []string{"portcullis", "portcullis-lean", "portcullis-fast", "portcullis-nethttp", "portcullis-log", "portcullis-syn", "portcullis-rst"}

func checkTargets(s Summary) []TargetCheck {
	var out []TargetCheck
	for _, variant := range portcullisVariants {
		out = append(out, attackChecks(s, variant)...)
	}
	pt, ok := findThroughput(s, "portcullis")
	if !ok {
		return out
	}
	for _, peer := range []string{"nginx", "haproxy"} {
		if t, ok := findThroughput(s, peer); ok {
			pr, _ := findPaired(s, "portcullis", peer)
			out = append(out, throughputCheck(pt, t, pr), cpuPerRequestCheck(pt, t, pr))
		}
	}
	if lt, ok := findThroughput(s, "portcullis-log"); ok {
		pr, _ := findPaired(s, "portcullis-log", "portcullis")
		out = append(out, accessLogChecks(pt, lt, pr)...)
	}
	return out
}

// The throughput targets are met or not on the median of the rounds' own
// ratios (see PairedRow); the medians of each side are shown beside it.

// throughputCheck is issue 19's throughput target: Portcullis serves at
// least as many requests/s as peer.
func throughputCheck(pt, peer ThroughputRow, pr PairedRow) TargetCheck {
	c := TargetCheck{Target: "throughput with limits ≥ " + peer.Proxy, Detail: "n/a"}
	if pr.ReqPerSec.Known() {
		met := pr.ReqPerSec >= 1
		c.Met = &met
		c.Detail = fmt.Sprintf("%s; medians %.0f vs %.0f req/s (%.2fx)", roundRatios(pr.ReqPerSec, pr.EachReqPerSec),
			float64(pt.ReqPerSec), float64(peer.ReqPerSec), float64(pt.ReqPerSec/peer.ReqPerSec))
	}
	return c
}

// cpuPerRequestCheck is issue 19's cost target: Portcullis spends no more
// CPU per request than peer.
func cpuPerRequestCheck(pt, peer ThroughputRow, pr PairedRow) TargetCheck {
	c := TargetCheck{Target: "CPU per request ≤ " + peer.Proxy, Detail: "n/a"}
	if pr.CPUPer1k.Known() {
		met := pr.CPUPer1k <= 1
		c.Met = &met
		c.Detail = fmt.Sprintf("%s; medians %.1f vs %.1f ms per 1000 requests (%.2fx)", roundRatios(pr.CPUPer1k, pr.EachCPUPer1k),
			float64(pt.CPUPer1kMS), float64(peer.CPUPer1kMS), float64(pt.CPUPer1kMS/peer.CPUPer1kMS))
	}
	return c
}

// accessLogChecks compare Portcullis with the access log on (lt) to itself
// without it (pt): within maxLogCost in requests/s and in CPU per request.
func accessLogChecks(pt, lt ThroughputRow, pr PairedRow) []TargetCheck {
	rps := TargetCheck{Target: fmt.Sprintf("access log on: requests/s within %.0f%% of off", 100*maxLogCost), Detail: "n/a"}
	if pr.ReqPerSec.Known() {
		met := float64(pr.ReqPerSec) >= 1-maxLogCost
		rps.Met, rps.Detail = &met, fmt.Sprintf("%s; medians %.0f vs %.0f req/s (%.3fx)", roundRatios(pr.ReqPerSec, pr.EachReqPerSec),
			float64(lt.ReqPerSec), float64(pt.ReqPerSec), float64(lt.ReqPerSec/pt.ReqPerSec))
	}
	cpu := TargetCheck{Target: fmt.Sprintf("access log on: CPU per request within %.0f%% of off", 100*maxLogCost), Detail: "n/a"}
	if pr.CPUPer1k.Known() {
		met := float64(pr.CPUPer1k) <= 1+maxLogCost
		cpu.Met, cpu.Detail = &met, fmt.Sprintf("%s; medians %.1f vs %.1f ms per 1000 requests (%.3fx)", roundRatios(pr.CPUPer1k, pr.EachCPUPer1k),
			float64(lt.CPUPer1kMS), float64(pt.CPUPer1kMS), float64(lt.CPUPer1kMS/pt.CPUPer1kMS))
	}
	return []TargetCheck{rps, cpu}
}

// roundRatios describes a median of the rounds' ratios and the ratios.
func roundRatios(median Num, each []Num) string {
	s := make([]string, len(each))
	for i, v := range each {
		s[i] = f(v, "%.2f")
	}
	return fmt.Sprintf("%.2fx by the rounds (%s)", float64(median), strings.Join(s, ", "))
}

// attackChecks checks the attack targets of one Portcullis variant; the
// plain one's labels name only the scenario.
func attackChecks(s Summary, variant string) []TargetCheck {
	var out []TargetCheck
	for _, sc := range attackScenarios {
		pc, ok := findProtection(s, variant, sc)
		if !ok {
			continue
		}
		label := sc
		if variant != "portcullis" {
			label = variant + ", " + sc
		}
		out = append(out,
			check(fmt.Sprintf("%s: goodput ≥ %.2f of no-attack", label, minGoodputRatio),
				pc.GoodputRatio, func(v float64) bool { return v >= minGoodputRatio }, "%.3f"),
			check(fmt.Sprintf("%s: p99 ≤ %.1fx no-attack", label, maxP99Ratio),
				pc.P99Ratio, func(v float64) bool { return v <= maxP99Ratio }, "%.2fx"),
			check(fmt.Sprintf("%s: ≤ %d attacker connections held", label, maxHeld),
				pc.PeakHeld, func(v float64) bool { return v <= maxHeld }, "%.0f"),
		)
		if hp, ok := findProtection(s, "haproxy", sc); ok {
			out = append(out, cpuCheck(label, pc, hp))
		}
	}
	return out
}

func check(target string, v Num, pass func(float64) bool, format string) TargetCheck {
	c := TargetCheck{Target: target, Detail: "n/a"}
	if v.Known() {
		met := pass(float64(v))
		c.Met, c.Detail = &met, fmt.Sprintf(format, float64(v))
	}
	return c
}

func cpuCheck(sc string, pc, hp ProtectionRow) TargetCheck {
	c := TargetCheck{Target: sc + ": less CPU on the attacker than HAProxy", Detail: "n/a"}
	if pc.AttackCPUPct.Known() && hp.AttackCPUPct.Known() {
		// Closer than cpuTie is inside the noise of these machines: a tie,
		// which does not meet "less".
		met := pc.AttackCPUPct < (1-cpuTie)*hp.AttackCPUPct
		c.Met = &met
		c.Detail = fmt.Sprintf("%.1f%% vs %.1f%% of a core", float64(pc.AttackCPUPct), float64(hp.AttackCPUPct))
		if d := float64(pc.AttackCPUPct/hp.AttackCPUPct) - 1; d > -cpuTie && d < cpuTie {
			c.Detail += fmt.Sprintf(" (a tie: within %.0f%%)", 100*cpuTie)
		}
	}
	return c
}

func findProtection(s Summary, proxy, sc string) (ProtectionRow, bool) {
	for _, r := range s.Protection {
		if r.Proxy == proxy && r.Scenario == sc && r.Rounds > 0 {
			return r, true
		}
	}
	return ProtectionRow{}, false
}

func findThroughput(s Summary, proxy string) (ThroughputRow, bool) {
	for _, r := range s.Throughput {
		if r.Proxy == proxy && r.Rounds > 0 {
			return r, true
		}
	}
	return ThroughputRow{}, false
}
