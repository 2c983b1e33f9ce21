package main

// PairedRow compares two targets of the throughput scenario round by
// round: A's figure over B's within each round in which both ran, then the
// median of those ratios. The machine's speed drifts by a tenth or more
// over a minute, so two medians taken over different windows can differ by
// as much as the proxies do; run.sh runs the pairs the targets
// compare back to back within each round (its throughput_order), and the
// ratio of two windows a few seconds apart cancels most of the drift.
type PairedRow struct {
	A      string `json:"a"`
	B      string `json:"b"`
	Rounds int    `json:"rounds"`
	// ReqPerSec is the median over rounds of A's requests/s over B's.
	ReqPerSec Num `json:"requests_per_s_ratio"`
	// CPUPer1k is the median over rounds of A's CPU per request over B's.
	CPUPer1k Num `json:"cpu_per_request_ratio"`
	// EachReqPerSec and EachCPUPer1k are the rounds' own ratios, in the
	// order of the rounds (NaN, JSON null, where a figure is missing).
	EachReqPerSec []Num `json:"each_round_requests_per_s_ratio"`
	EachCPUPer1k  []Num `json:"each_round_cpu_per_request_ratio"`
}

// pairs are the comparisons the throughput targets make: Portcullis
// against each peer, and Portcullis with the access log on against itself
// without it.
var pairs = [][2]string{{"portcullis", "nginx"}, {"portcullis", "haproxy"}, {"portcullis-log", "portcullis"}}

func pairedRows(idx map[key]*Run) []PairedRow {
	var out []PairedRow
	for _, p := range pairs {
		if row := pairedRow(idx, p[0], p[1]); row.Rounds > 0 {
			out = append(out, row)
		}
	}
	return out
}

func pairedRow(idx map[key]*Run, a, b string) PairedRow {
	row := PairedRow{A: a, B: b}
	s := samples{}
	for _, r := range rounds(idx) {
		ra, rb := idx[key{a, scThroughput, r}], idx[key{b, scThroughput, r}]
		if ra == nil || rb == nil {
			continue
		}
		row.Rounds++
		la, lb := ra.Report.Legit, rb.Report.Legit
		rps := div(la.RequestsPerSec, lb.RequestsPerSec)
		cpu := div(perK(ra.CPUSeconds(), la.Requests), perK(rb.CPUSeconds(), lb.Requests))
		s.add("rps", rps)
		s.add("cpu", cpu)
		row.EachReqPerSec = append(row.EachReqPerSec, Num(rps))
		row.EachCPUPer1k = append(row.EachCPUPer1k, Num(cpu))
	}
	row.ReqPerSec, row.CPUPer1k = s.median("rps"), s.median("cpu")
	return row
}

func findPaired(s Summary, a, b string) (PairedRow, bool) {
	for _, r := range s.Paired {
		if r.A == a && r.B == b && r.Rounds > 0 {
			return r, true
		}
	}
	return PairedRow{}, false
}
