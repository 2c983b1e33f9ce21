package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// The text forms of rates are read here rather than by package rate, so that config stays a
// leaf that imports none of the daemon's runtime packages: the daemon turns a RateValue and a
// RateLimit into rate's values when it builds the limiter (a differential test holds this
// parser to rate.ParseRate and rate.ParseLimit).

// A RateValue is a number of requests per period as the configuration writes it: "10r/s",
// "600r/m", "30r/h" or "unlimited". The zero RateValue is unset, and invalid where a rate is
// required; [UnlimitedRate] limits nothing. RateValues are comparable.
type RateValue struct {
	// Events is how many requests the rate allows per Per: 1 to 1e9, or -1 in
	// UnlimitedRate. Zero (with a zero Per) is the unset RateValue.
	Events int
	// Per is the period over which Events are allowed: a second, a minute or an hour in a
	// parsed value; zero in the unset RateValue and in UnlimitedRate.
	Per time.Duration
}

// UnlimitedRate is the RateValue written "unlimited": every request is admitted at once.
var UnlimitedRate = RateValue{Events: -1}

// maxRateEvents bounds RateValue.Events, as package rate bounds Rate.Events.
const maxRateEvents = 1_000_000_000

// rateUnits are the suffixes ParseRateValue reads and String writes.
var rateUnits = [...]struct {
	suffix string
	per    time.Duration
}{{"r/s", time.Second}, {"r/m", time.Minute}, {"r/h", time.Hour}}

// errNotARate is the problem of a text that has no rate unit at all.
var errNotARate = errors.New("is not a rate: write N r/s, N r/m or N r/h without spaces (10r/s, 600r/m), or unlimited")

// PerSecondRate returns n requests per second.
func PerSecondRate(n int) RateValue { return RateValue{Events: n, Per: time.Second} }

// IsZero reports whether r is the unset RateValue.
func (r RateValue) IsZero() bool { return r == RateValue{} }

// IsUnlimited reports whether r is UnlimitedRate.
func (r RateValue) IsUnlimited() bool { return r == UnlimitedRate }

// Interval returns Per/Events rounded up to the nanosecond; zero for the unset and the
// unlimited RateValue.
func (r RateValue) Interval() time.Duration {
	if r.Events <= 0 || r.Per <= 0 {
		return 0
	}
	return (r.Per + time.Duration(r.Events) - 1) / time.Duration(r.Events)
}

// ParseRateValue reads a rate as nginx's limit_req_zone writes it: a positive decimal count
// (leading zeros allowed) followed by "r/s", "r/m" or "r/h" without spaces, or "unlimited".
// Anything else is an error saying what is wrong, without quoting the input.
func ParseRateValue(s string) (RateValue, error) {
	if s == "unlimited" {
		return UnlimitedRate, nil
	}
	for _, u := range rateUnits {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			n, err := parseRateCount(num)
			if err != nil {
				return RateValue{}, err
			}
			return RateValue{Events: n, Per: u.per}, nil
		}
	}
	return RateValue{}, errNotARate
}

// parseRateCount reads the count of a rate: digits only, 1 to maxRateEvents.
func parseRateCount(num string) (int, error) {
	if num == "" {
		return 0, errors.New("the number of requests is missing")
	}
	if trimmed := strings.TrimLeft(num, "0"); trimmed != "" {
		num = trimmed
	}
	if len(num) > len(strconv.Itoa(maxRateEvents)) {
		return 0, fmt.Errorf("the number of requests must be at most %d", maxRateEvents)
	}
	n := 0
	for i := 0; i < len(num); i++ {
		c := num[i]
		if c < '0' || c > '9' {
			return 0, errors.New("the number of requests must be a positive decimal integer, with no spaces or signs")
		}
		n = 10*n + int(c-'0')
	}
	switch {
	case n == 0:
		return 0, errors.New("the number of requests must be positive")
	case n > maxRateEvents:
		return 0, fmt.Errorf("the number of requests must be at most %d", maxRateEvents)
	}
	return n, nil
}

// problem returns what is wrong with r as a usable rate, or "": the unset value, a count
// out of range, a period that is not positive or an interval under a nanosecond.
func (r RateValue) problem() string {
	switch {
	case r.IsUnlimited():
		return ""
	case r.IsZero():
		return "no rate set"
	case r.Events < 1 || r.Events > maxRateEvents:
		return fmt.Sprintf("Events must be in 1..%d (got %d)", maxRateEvents, r.Events)
	case r.Per <= 0:
		return fmt.Sprintf("Per must be positive (got %v)", r.Per)
	case time.Duration(r.Events) > r.Per:
		return fmt.Sprintf("%d events per %v is faster than one per nanosecond", r.Events, r.Per)
	}
	return ""
}

// hasText reports whether r has a text form: unset, unlimited, or a period of a second, a
// minute or an hour.
func (r RateValue) hasText() bool {
	if r.IsZero() || r.IsUnlimited() {
		return true
	}
	for _, u := range rateUnits {
		if r.Per == u.per && r.Events >= 1 && r.Events <= maxRateEvents {
			return true
		}
	}
	return false
}

// String returns r as ParseRateValue reads it ("10r/s", "unlimited"); "none" for the unset
// value; "N/period" ("3/1.5s") for a period no unit names, which ParseRateValue refuses.
func (r RateValue) String() string {
	switch {
	case r.IsZero():
		return "none"
	case r.IsUnlimited():
		return "unlimited"
	}
	for _, u := range rateUnits {
		if r.Per == u.per {
			return strconv.Itoa(r.Events) + u.suffix
		}
	}
	return strconv.Itoa(r.Events) + "/" + r.Per.String()
}

// MarshalText implements encoding.TextMarshaler with String's form. It fails for a value
// ParseRateValue could not read back.
func (r RateValue) MarshalText() ([]byte, error) {
	if !r.hasText() || r.IsZero() {
		return nil, fmt.Errorf("config: rate %v has no text form: its period must be a second, a minute or an hour", r)
	}
	return []byte(r.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseRateValue. On error *r is left
// unchanged.
func (r *RateValue) UnmarshalText(text []byte) error {
	v, err := ParseRateValue(string(text))
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// RateNoDelay, as [RateLimit.Delay], lets the whole burst through at once: nginx's nodelay.
const RateNoDelay = -1

// maxRateBurst bounds a burst, as package rate does.
const maxRateBurst = 1 << 30

// maxRateWindow bounds (burst+1) intervals, as package rate does, so that no sum of times
// overflows: about 73 years.
const maxRateWindow = math.MaxInt64 / 4

// A RateLimit is one key value's rate limit as an override writes it, in nginx limit_req's
// words: "100r/s burst=50", "10r/s burst=20 delay=5", "10r/s burst=20 nodelay",
// "unlimited". The zero RateLimit has no rate and is invalid.
type RateLimit struct {
	// Rate is the sustained rate.
	Rate RateValue
	// Burst is how many requests may arrive ahead of Rate, 0 to 2^30.
	Burst int
	// Delay is how many of the Burst early requests go through at once: zero delays every
	// one, RateNoDelay (-1) none. Other negative values are invalid.
	Delay int
}

// problem returns what is wrong with l as a usable limit, or "".
func (l RateLimit) problem() string {
	if p := l.Rate.problem(); p != "" {
		return p
	}
	switch {
	case l.Burst < 0 || l.Burst > maxRateBurst:
		return fmt.Sprintf("Burst must be in 0..%d (got %d)", maxRateBurst, l.Burst)
	case l.Delay < RateNoDelay:
		return fmt.Sprintf("Delay must be ≥ 0, or NoDelay (-1) (got %d)", l.Delay)
	case !spanFits(l.Rate, l.Burst):
		return fmt.Sprintf("Burst %d at %v spans more than %v", l.Burst, l.Rate, time.Duration(maxRateWindow))
	}
	return ""
}

// spanFits reports whether burst+1 intervals of r stay within maxRateWindow.
func spanFits(r RateValue, burst int) bool {
	iv := r.Interval()
	return iv <= 0 || int64(iv) <= maxRateWindow/int64(burst+1)
}

// ParseRateLimit reads an override: a rate (see [ParseRateValue]) followed by any of
// "burst=N", "delay=N" and "nodelay", one space apart, each at most once and not both delay
// and nodelay. The result must be a usable limit. Errors say what is wrong without quoting
// the input.
func ParseRateLimit(s string) (RateLimit, error) {
	fields := strings.Split(s, " ")
	r, err := ParseRateValue(fields[0])
	if err != nil {
		return RateLimit{}, err
	}
	l := RateLimit{Rate: r}
	seen := map[string]bool{}
	for _, f := range fields[1:] {
		name, val, hasVal := strings.Cut(f, "=")
		if seen[name] || (name == "nodelay" && seen["delay"]) || (name == "delay" && seen["nodelay"]) {
			return RateLimit{}, fmt.Errorf("%s given twice, or both delay and nodelay", name)
		}
		seen[name] = true
		switch {
		case name == "nodelay" && !hasVal:
			l.Delay = RateNoDelay
		case (name == "burst" || name == "delay") && hasVal:
			n, ok := parseSmallCount(val)
			if !ok || (name == "delay" && n == 0) {
				return RateLimit{}, fmt.Errorf("%s must be a decimal integer (delay at least 1)", name)
			}
			if name == "burst" {
				l.Burst = n
			} else {
				l.Delay = n
			}
		default:
			return RateLimit{}, errors.New("write burst=N, delay=N or nodelay, one space apart")
		}
	}
	if p := l.problem(); p != "" {
		return RateLimit{}, errors.New(p)
	}
	return l, nil
}

// parseSmallCount reads a decimal integer of at most 10 digits.
func parseSmallCount(s string) (int, bool) {
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

// String returns l as nginx writes it: "10r/s burst=20 delay=5", "10r/s burst=20 nodelay",
// "10r/s".
func (l RateLimit) String() string {
	s := l.Rate.String()
	if l.Burst > 0 {
		s += fmt.Sprintf(" burst=%d", l.Burst)
	}
	switch {
	case l.Delay == RateNoDelay || (l.Burst > 0 && l.Delay >= l.Burst):
		if l.Burst > 0 {
			s += " nodelay"
		}
	case l.Delay > 0:
		s += fmt.Sprintf(" delay=%d", l.Delay)
	}
	return s
}

// MarshalText implements encoding.TextMarshaler in ParseRateLimit's form, field for field,
// so that UnmarshalText gives back an equal RateLimit. It fails when the rate has no text
// form.
func (l RateLimit) MarshalText() ([]byte, error) {
	b, err := l.Rate.MarshalText()
	if err != nil {
		return nil, err
	}
	if l.Burst != 0 {
		b = fmt.Appendf(b, " burst=%d", l.Burst)
	}
	switch {
	case l.Delay == RateNoDelay:
		b = append(b, " nodelay"...)
	case l.Delay != 0:
		b = fmt.Appendf(b, " delay=%d", l.Delay)
	}
	return b, nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseRateLimit. On error *l is left
// unchanged.
func (l *RateLimit) UnmarshalText(text []byte) error {
	v, err := ParseRateLimit(string(text))
	if err != nil {
		return err
	}
	*l = v
	return nil
}
