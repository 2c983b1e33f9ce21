package siege

import (
	"fmt"
	"io"
	"net/netip"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is what one run measured. Durations are time.Duration, so in JSON
// they are integer nanoseconds, in fields named *_ns.
type Report struct {
	Scenario Scenario `json:"scenario"`
	Target   string   `json:"target"`
	// Duration is the measured window: from the legitimate clients' start to
	// their stop. Every per-second figure of Legit divides by it.
	Duration time.Duration `json:"duration_ns"`
	// Warmup is how long the attacker ran before that window; 0 without
	// an attacker.
	Warmup time.Duration `json:"warmup_ns"`
	Legit  LegitStats    `json:"legit"`
	// Attack is nil for scenarios without an attacker.
	Attack *AttackStats `json:"attack,omitempty"`
	// CPU is nil unless Config.CPUPID was set.
	CPU *CPUStats `json:"cpu,omitempty"`
	// FileLimit is the open-file soft limit the run had.
	FileLimit uint64 `json:"file_limit"`
}

// LegitStats describes the legitimate clients' requests in the measured
// window. A request still in flight when the window closes is cut off and
// not counted at all, so Requests == Successes + Errors.Total().
type LegitStats struct {
	Clients        int           `json:"clients"`
	ConnsPerClient int           `json:"conns_per_client"`
	KeepAlive      bool          `json:"keep_alive"`
	Timeout        time.Duration `json:"timeout_ns"`
	// Requests counts requests that ended, well or badly.
	Requests uint64 `json:"requests"`
	// Successes counts responses with a status below 400, body read whole.
	Successes uint64 `json:"successes"`
	// ConnsOpened counts connections the clients opened (with keep-alive,
	// far fewer than Requests).
	ConnsOpened    uint64  `json:"conns_opened"`
	RequestsPerSec float64 `json:"requests_per_s"`
	// GoodputPerSec is Successes per second of Duration.
	GoodputPerSec float64 `json:"goodput_per_s"`
	// SuccessRate is Successes / Requests, 0 when there were none.
	SuccessRate float64 `json:"success_rate"`
	// P50, P99, P999 and Max are latencies of successful requests, connect
	// to last body byte. Quantiles are bucket upper bounds within 1.6% of the
	// true value; all are 0 when nothing succeeded.
	P50    time.Duration `json:"p50_ns"`
	P99    time.Duration `json:"p99_ns"`
	P999   time.Duration `json:"p999_ns"`
	Max    time.Duration `json:"max_ns"`
	Errors ErrorCounts   `json:"errors"`
}

// ErrorCounts counts failed legitimate requests by kind; each failure counts
// once.
type ErrorCounts struct {
	// Timeout: no complete response within Config.Timeout.
	Timeout uint64 `json:"timeout"`
	// Refused: the connect was refused (nothing listening, or a SYN refused).
	Refused uint64 `json:"refused"`
	// Reset: the server reset the connection.
	Reset uint64 `json:"reset"`
	// EOF: the server closed the connection before the response ended;
	// this is how a cap enforced at accept time looks to the client.
	EOF uint64 `json:"eof"`
	// Status429 and Status5xx: complete responses with those statuses.
	Status429 uint64 `json:"status_429"`
	Status5xx uint64 `json:"status_5xx"`
	// Other: anything else, such as another 4xx, a malformed response, a
	// TLS failure, or a local error like running out of ports.
	Other uint64 `json:"other"`
}

// Total is the sum of all kinds.
func (e ErrorCounts) Total() uint64 {
	return e.Timeout + e.Refused + e.Reset + e.EOF + e.Status429 + e.Status5xx + e.Other
}

func (e *ErrorCounts) add(o ErrorCounts) {
	e.Timeout += o.Timeout
	e.Refused += o.Refused
	e.Reset += o.Reset
	e.EOF += o.EOF
	e.Status429 += o.Status429
	e.Status5xx += o.Status5xx
	e.Other += o.Other
}

func (e *ErrorCounts) count(k errKind) {
	switch k {
	case kindTimeout:
		e.Timeout++
	case kindRefused:
		e.Refused++
	case kindReset:
		e.Reset++
	case kindEOF:
		e.EOF++
	default:
		e.Other++
	}
}

// AttackStats describes the attacker over its whole run, warm-up included.
// Every attempt ends up in exactly one of DialErrors, Admitted, Refused and
// Unsettled.
type AttackStats struct {
	Addr         netip.Addr `json:"addr"`
	Slowloris    int        `json:"slowloris_conns"`
	SlowRequests int        `json:"slow_request_conns"`
	// Elapsed is how long the attacker ran.
	Elapsed time.Duration `json:"elapsed_ns"`
	// Attempts counts connection attempts.
	Attempts uint64 `json:"attempts"`
	// DialErrors counts attempts whose connect failed or timed out.
	DialErrors uint64 `json:"dial_errors"`
	// Admitted counts connections the server answered, or kept open past
	// Config.Grace.
	Admitted uint64 `json:"admitted"`
	// Refused counts connections the server closed or reset within the
	// grace without answering: a refusal at accept time.
	Refused uint64 `json:"refused"`
	// Unsettled counts connections still within their grace, unanswered,
	// when the run ended.
	Unsettled uint64 `json:"unsettled"`
	// Answered counts connections that got a response; Answered429 those
	// whose response was a 429.
	Answered    uint64 `json:"answered"`
	Answered429 uint64 `json:"answered_429"`
	// PeakHeld is the most admitted connections open at one time.
	PeakHeld int64 `json:"peak_held"`
	// Reconnects counts attempts that replaced an ended connection, and
	// ReconnectsPerSec divides them by Elapsed.
	Reconnects       uint64  `json:"reconnects"`
	ReconnectsPerSec float64 `json:"reconnects_per_s"`
}

// CPUStats is CPU time (user plus system) used during the measured window,
// read from /proc at 10 ms resolution.
type CPUStats struct {
	// PID is the process measured: Config.CPUPID.
	PID    int           `json:"pid"`
	Target time.Duration `json:"target_ns"`
	// TargetPer1k is Target per 1000 legitimate requests (0 with none).
	TargetPer1k time.Duration `json:"target_per_1k_ns"`
	// Self is the load generator's own CPU time, to tell whether it, rather
	// than the target, was the bottleneck.
	Self time.Duration `json:"self_ns"`
}

// Comparison sets an attacked run against a baseline run of the same
// legitimate clients.
type Comparison struct {
	BaseGoodput float64       `json:"base_goodput_per_s"`
	Goodput     float64       `json:"goodput_per_s"`
	BaseP99     time.Duration `json:"base_p99_ns"`
	P99         time.Duration `json:"p99_ns"`
	// GoodputRatio is Goodput / BaseGoodput: 1 means the attack cost the
	// legitimate clients nothing. It is 0 when BaseGoodput is 0.
	GoodputRatio float64 `json:"goodput_ratio"`
	// P99Ratio is P99 / BaseP99. It is 0 when either is 0 (no successes).
	P99Ratio float64 `json:"p99_ratio"`
}

// Compare computes the goodput and p99 ratios of attacked against base.
func Compare(base, attacked Report) Comparison {
	c := Comparison{
		BaseGoodput: base.Legit.GoodputPerSec,
		Goodput:     attacked.Legit.GoodputPerSec,
		BaseP99:     base.Legit.P99,
		P99:         attacked.Legit.P99,
	}
	if c.BaseGoodput > 0 {
		c.GoodputRatio = c.Goodput / c.BaseGoodput
	}
	if c.BaseP99 > 0 && c.P99 > 0 {
		c.P99Ratio = float64(c.P99) / float64(c.BaseP99)
	}
	return c
}

// Meets reports whether the goodput ratio is at least minGoodput and the p99
// ratio at most maxP99; a zero bound is not checked. A ratio of 0 (undefined)
// never meets a bound that is checked.
func (c Comparison) Meets(minGoodput, maxP99 float64) bool {
	if minGoodput > 0 && (c.GoodputRatio == 0 || c.GoodputRatio < minGoodput) {
		return false
	}
	if maxP99 > 0 && (c.P99Ratio == 0 || c.P99Ratio > maxP99) {
		return false
	}
	return true
}

// WriteTable writes r as an aligned two-column table and returns the first
// write error.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, row := range r.rows() {
		fmt.Fprintf(tw, "%s\t%s\n", row[0], row[1])
	}
	return tw.Flush()
}

func (r *Report) rows() [][2]string {
	l := &r.Legit
	mode := "fresh connection per request"
	if l.KeepAlive {
		mode = "keep-alive"
	}
	rows := [][2]string{
		{"scenario", string(r.Scenario)},
		{"target", r.Target},
		{"duration", fmtDur(r.Duration) + warmupNote(r.Warmup)},
		{"legitimate clients", fmt.Sprintf("%d addresses × %d connections, %s, timeout %v", l.Clients, l.ConnsPerClient, mode, l.Timeout)},
		{"  requests", fmt.Sprintf("%d (%.1f/s)", l.Requests, l.RequestsPerSec)},
		{"  successes", fmt.Sprintf("%d (%.2f%%)", l.Successes, 100*l.SuccessRate)},
		{"  goodput", fmt.Sprintf("%.1f/s", l.GoodputPerSec)},
		{"  latency", fmt.Sprintf("p50 %s  p99 %s  p99.9 %s  max %s", fmtDur(l.P50), fmtDur(l.P99), fmtDur(l.P999), fmtDur(l.Max))},
		{"  errors", fmtErrors(l.Errors)},
		{"  connections opened", fmt.Sprint(l.ConnsOpened)},
	}
	if a := r.Attack; a != nil {
		rows = append(rows,
			[2]string{"attacker", fmt.Sprintf("%v: %d slowloris + %d slow-request connections, %s", a.Addr, a.Slowloris, a.SlowRequests, fmtDur(a.Elapsed))},
			[2]string{"  attempts", fmt.Sprintf("%d (reconnects %d, %.1f/s)", a.Attempts, a.Reconnects, a.ReconnectsPerSec)},
			[2]string{"  admitted", fmt.Sprint(a.Admitted)},
			[2]string{"  refused", fmt.Sprint(a.Refused)},
			[2]string{"  dial errors", fmt.Sprint(a.DialErrors)},
			[2]string{"  unsettled at end", fmt.Sprint(a.Unsettled)},
			[2]string{"  answered", fmt.Sprintf("%d (429: %d)", a.Answered, a.Answered429)},
			[2]string{"  peak held at once", fmt.Sprint(a.PeakHeld)},
		)
	}
	if c := r.CPU; c != nil {
		rows = append(rows, [2]string{fmt.Sprintf("cpu of pid %d", c.PID),
			fmt.Sprintf("%s (%s per 1k requests); siege itself %s", fmtDur(c.Target), fmtDur(c.TargetPer1k), fmtDur(c.Self))})
	}
	return append(rows, [2]string{"open-file limit", fmt.Sprint(r.FileLimit)})
}

// WriteComparison writes base and attacked side by side with their ratios.
func WriteComparison(w io.Writer, base, attacked *Report) error {
	c := Compare(*base, *attacked)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "\t%s\t%s\tratio\n", base.Scenario, attacked.Scenario)
	fmt.Fprintf(tw, "goodput\t%.1f/s\t%.1f/s\t%.4f\n", c.BaseGoodput, c.Goodput, c.GoodputRatio)
	fmt.Fprintf(tw, "p99\t%s\t%s\t%.2f\n", fmtDur(c.BaseP99), fmtDur(c.P99), c.P99Ratio)
	fmt.Fprintf(tw, "success rate\t%.2f%%\t%.2f%%\t\n", 100*base.Legit.SuccessRate, 100*attacked.Legit.SuccessRate)
	return tw.Flush()
}

func warmupNote(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return " after " + fmtDur(d) + " of attack alone"
}

func fmtErrors(e ErrorCounts) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d: timeout %d, refused %d, reset %d, eof %d, 429 %d, 5xx %d, other %d",
		e.Total(), e.Timeout, e.Refused, e.Reset, e.EOF, e.Status429, e.Status5xx, e.Other)
	return b.String()
}

// fmtDur rounds d to three significant digits or so, for reading.
func fmtDur(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d >= 10*time.Millisecond:
		return d.Round(100 * time.Microsecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}
