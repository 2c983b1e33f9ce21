package rate

import "time"

// A Verdict says what became of a request, and names the events an
// [Observer] is told of.
type Verdict uint8

// The verdicts of a decision, and the other events of a limiter.
const (
	// Admitted: the request conforms and may proceed now.
	Admitted Verdict = iota + 1
	// Delayed: the request is within the burst and may proceed after
	// Decision.Delay.
	Delayed
	// Refused: the request is over the rate and its burst; it was not
	// counted.
	Refused
	// ShadowDelayed: in shadow mode, a request that would have been
	// delayed proceeds now; it was counted as a delayed one would be.
	ShadowDelayed
	// ShadowRefused: in shadow mode, a request that would have been
	// refused proceeds; like a refusal, it was not counted.
	ShadowRefused
	// Cancelled (an event, never a verdict): a caller gave back a request
	// it had been admitted for, before it proceeded.
	Cancelled
	// StoreFailed (an event, never a verdict): the shared Store could not
	// decide and the request was refused with ErrStore.
	StoreFailed
)

var verdictNames = [...]string{
	Admitted:      "admitted",
	Delayed:       "delayed",
	Refused:       "refused",
	ShadowDelayed: "shadow_delayed",
	ShadowRefused: "shadow_refused",
	Cancelled:     "cancelled",
	StoreFailed:   "store_failed",
}

// String returns the verdict's name in snake case, as used in metric
// labels.
func (v Verdict) String() string {
	if int(v) < len(verdictNames) && verdictNames[v] != "" {
		return verdictNames[v]
	}
	return "unknown"
}

// A Decision is a limiter's answer for one request, computed from the
// key's real state at that moment. It is a small value that costs no
// allocation.
type Decision struct {
	// Verdict is Admitted, Delayed, Refused, ShadowDelayed or
	// ShadowRefused.
	Verdict Verdict

	// Delay is how long the caller must wait before the request proceeds:
	// positive only for Delayed.
	Delay time.Duration

	// RetryAfter is, for Refused and ShadowRefused, how long until a
	// request of the key would be admitted (at once or delayed); zero
	// otherwise.
	RetryAfter time.Duration

	// Reset is how long until the key is back to a fresh state, its whole
	// burst available, if no other request arrives. Zero for an
	// unlimited key.
	Reset time.Duration

	// The key's policy, for Remaining, Burst and Interval.
	window, interval int64
}

// Allowed reports whether the request may proceed (after Delay): every
// verdict but Refused.
func (d Decision) Allowed() bool { return d.Verdict != Refused }

// Shadowed reports whether the request proceeds only because of shadow
// mode: enforcing, it would have been refused or delayed.
func (d Decision) Shadowed() bool { return d.Verdict == ShadowRefused || d.Verdict == ShadowDelayed }

// Remaining returns how many more requests of the key would be admitted
// (at once or delayed) if they arrived now, after this one; -1 for an
// unlimited key.
func (d Decision) Remaining() int {
	if d.interval == 0 {
		return -1
	}
	return max(int((d.window-int64(d.Reset))/d.interval), 0)
}

// Interval returns the key's interval, 1/rate; zero for an unlimited key.
func (d Decision) Interval() time.Duration { return time.Duration(d.interval) }

// Burst returns the key's burst; zero for an unlimited key.
func (d Decision) Burst() int {
	if d.interval == 0 {
		return 0
	}
	return int(d.window/d.interval) - 1
}

// decide applies the GCRA to a key whose TAT is tat (0 or ≤ now: fresh) at
// now, and returns the decision and the new TAT (unchanged on refusal).
func (p *policy) decide(tat, now int64, shadow bool) (Decision, int64) {
	if p.interval == 0 {
		return Decision{Verdict: Admitted}, tat
	}
	if tat < now {
		tat = now
	}
	next := tat + p.interval
	d := Decision{window: p.window, interval: p.interval}
	if next-now > p.window {
		d.Verdict, d.Reset = Refused, time.Duration(tat-now)
		d.RetryAfter = time.Duration(tat - now - (p.window - p.interval))
		if shadow {
			d.Verdict = ShadowRefused
		}
		return d, tat
	}
	d.Verdict, d.Reset = Admitted, time.Duration(next-now)
	if wait := next - now - p.free; wait > 0 {
		d.Verdict, d.Delay = Delayed, time.Duration(wait)
		if shadow {
			d.Verdict, d.Delay = ShadowDelayed, 0
		}
	}
	return d, next
}

// fromAhead turns a Store's answer into a decision: ahead is how far the
// key's cluster-wide TAT is past now after an admission (admitted) or as
// it stands (refused).
func (p *policy) fromAhead(ahead int64, shadow, admitted bool) Decision {
	ahead = max(ahead, 0)
	d := Decision{Reset: time.Duration(ahead), window: p.window, interval: p.interval}
	if !admitted {
		d.Verdict = Refused
		if retry := ahead - (p.window - p.interval); retry > 0 {
			d.RetryAfter = time.Duration(retry)
		}
		if shadow {
			d.Verdict = ShadowRefused
		}
		return d
	}
	d.Verdict = Admitted
	if wait := ahead - p.free; wait > 0 {
		d.Verdict, d.Delay = Delayed, time.Duration(wait)
		if shadow {
			d.Verdict, d.Delay = ShadowDelayed, 0
		}
	}
	return d
}
