package ratetext

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// NoDelay, as [Limit.Delay], lets the whole burst through at once:
// nginx's nodelay.
const NoDelay = -1

// MaxBurst bounds Limit.Burst.
const MaxBurst = 1 << 30

// MaxWindow bounds (Burst+1) intervals, so that no sum of times overflows:
// about 73 years.
const MaxWindow = math.MaxInt64 / 4

// A Limit is a rate limit in nginx limit_req's words: requests conform at
// Rate; up to Burst more may arrive early; of those, the first Delay go
// through at once. The zero Limit has no Rate and is invalid.
type Limit struct {
	// Rate is the sustained rate.
	Rate Rate
	// Burst is how many requests may arrive ahead of Rate, 0 to MaxBurst.
	Burst int
	// Delay is how many of the Burst early requests go through at once:
	// zero delays every one, NoDelay (-1) none. Other negative values are
	// invalid.
	Delay int
}

// Problem returns what makes l unusable, naming the field, or "".
func (l Limit) Problem() string {
	if p := l.Rate.Problem(); p != "" {
		return p
	}
	switch {
	case l.Burst < 0 || l.Burst > MaxBurst:
		return fmt.Sprintf("Burst must be in 0..%d (got %d)", MaxBurst, l.Burst)
	case l.Delay < NoDelay:
		return fmt.Sprintf("Delay must be ≥ 0, or NoDelay (-1) (got %d)", l.Delay)
	case !SpanFits(l.Rate, l.Burst):
		return fmt.Sprintf("Burst %d at %v spans more than %v", l.Burst, l.Rate, time.Duration(MaxWindow))
	}
	return ""
}

// SpanFits reports whether burst+1 intervals of r stay within MaxWindow.
func SpanFits(r Rate, burst int) bool {
	iv := r.Interval()
	return iv <= 0 || int64(iv) <= MaxWindow/int64(burst+1)
}

// A LimitError is what ParseLimit found wrong with a limit's text. Its
// Error is the problem alone; Word and the flags let a caller say more.
type LimitError struct {
	// Word is the word at fault: the rate, or an option; empty when the
	// words are fine but the limit they make is not (Invalid).
	Word string
	// InRate says the first word is not a rate; Err is ParseRate's error.
	InRate bool
	// Unknown says Word is not burst=N, delay=N or nodelay.
	Unknown bool
	// Invalid says the limit is out of range; Err is its Problem.
	Invalid bool
	Err     error
}

func (e *LimitError) Error() string { return e.Err.Error() }
func (e *LimitError) Unwrap() error { return e.Err }

// ParseLimit reads a limit: a rate (see [ParseRate]) followed by any of
// "burst=N", "delay=N" and "nodelay", one space apart, each at most once
// and not both delay and nodelay; N is a decimal integer (delay at least 1,
// as nginx requires). The result must be usable (Problem). Every error is
// a *LimitError.
func ParseLimit(s string) (Limit, error) {
	fields := strings.Split(s, " ")
	r, err := ParseRate(fields[0])
	if err != nil {
		return Limit{}, &LimitError{Word: fields[0], InRate: true, Err: err}
	}
	l := Limit{Rate: r}
	seen := map[string]bool{}
	for _, f := range fields[1:] {
		name, val, hasVal := strings.Cut(f, "=")
		if seen[name] || (name == "nodelay" && seen["delay"]) || (name == "delay" && seen["nodelay"]) {
			return Limit{}, &LimitError{Word: f, Err: fmt.Errorf("%s given twice, or both delay and nodelay", name)}
		}
		seen[name] = true
		switch {
		case name == "nodelay" && !hasVal:
			l.Delay = NoDelay
		case (name == "burst" || name == "delay") && hasVal:
			n, ok := parseSmall(val)
			if !ok || (name == "delay" && n == 0) {
				return Limit{}, &LimitError{Word: f, Err: fmt.Errorf("%s must be a decimal integer (delay at least 1)", name)}
			}
			if name == "burst" {
				l.Burst = n
			} else {
				l.Delay = n
			}
		default:
			return Limit{}, &LimitError{Word: f, Unknown: true, Err: errors.New("write burst=N, delay=N or nodelay, one space apart")}
		}
	}
	if p := l.Problem(); p != "" {
		return Limit{}, &LimitError{Invalid: true, Err: errors.New(p)}
	}
	return l, nil
}

// parseSmall reads a decimal integer of at most 10 digits.
func parseSmall(s string) (int, bool) {
	if s == "" || len(s) > 10 {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = 10*n + int(s[i]-'0')
	}
	return n, true
}

// String returns l as nginx writes it: "10r/s burst=20 delay=5", "10r/s
// burst=20 nodelay", "10r/s" (no burst), leaving out a delay that makes no
// difference.
func (l Limit) String() string {
	s := l.Rate.String()
	if l.Burst > 0 {
		s += fmt.Sprintf(" burst=%d", l.Burst)
	}
	switch {
	case l.Delay == NoDelay || (l.Burst > 0 && l.Delay >= l.Burst):
		if l.Burst > 0 {
			s += " nodelay"
		}
	case l.Delay > 0:
		s += fmt.Sprintf(" delay=%d", l.Delay)
	}
	return s
}

// MarshalText implements encoding.TextMarshaler in ParseLimit's form,
// field for field, so that UnmarshalText gives back an equal Limit: unlike
// String, it writes a delay or nodelay that makes no difference. It fails
// when the Rate has no text form.
func (l Limit) MarshalText() ([]byte, error) {
	b, err := l.Rate.MarshalText()
	if err != nil {
		return nil, err
	}
	if l.Burst != 0 {
		b = fmt.Appendf(b, " burst=%d", l.Burst)
	}
	switch {
	case l.Delay == NoDelay:
		b = append(b, " nodelay"...)
	case l.Delay != 0:
		b = fmt.Appendf(b, " delay=%d", l.Delay)
	}
	return b, nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseLimit. On
// error *l is left unchanged.
func (l *Limit) UnmarshalText(text []byte) error {
	v, err := ParseLimit(string(text))
	if err != nil {
		return err
	}
	*l = v
	return nil
}
