// Package ratetext reads and writes rates and rate limits in the words of
// nginx's limit_req: "10r/s", "600r/m", "100r/s burst=50 nodelay". It is
// the one parser behind package rate (whose Rate and Limit convert to and
// from its values) and behind the daemon's configuration, which must not
// import the limiter to read its own file.
//
// Its errors say what is wrong without quoting the text: each caller
// quotes it, or names the file and line it came from, in its own way.
package ratetext

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A Rate is a number of events per period. The zero Rate is unset;
// [Unlimited] limits nothing.
type Rate struct {
	// Events is how many events the rate allows per Per: 1 to MaxEvents,
	// or -1 in Unlimited. Zero (with a zero Per) is the unset Rate.
	Events int
	// Per is the period over which Events are allowed: positive, or zero
	// in the unset Rate and in Unlimited.
	Per time.Duration
}

// Unlimited is the Rate written "unlimited".
var Unlimited = Rate{Events: -1}

// MaxEvents bounds Rate.Events, so that the text stays short and the
// interval at least a nanosecond for every unit.
const MaxEvents = 1_000_000_000

// units are the suffixes ParseRate reads and String writes: nginx's r/s
// and r/m, and r/h for slow rates such as login attempts.
var units = [...]struct {
	suffix string
	per    time.Duration
}{{"r/s", time.Second}, {"r/m", time.Minute}, {"r/h", time.Hour}}

// ErrNotARate is ParseRate's error for a text with no rate unit.
var ErrNotARate = errors.New("is not a rate: write N r/s, N r/m or N r/h without spaces (10r/s, 600r/m), or unlimited")

// PerSecond returns n events per second.
func PerSecond(n int) Rate { return Rate{Events: n, Per: time.Second} }

// IsZero reports whether r is the unset Rate.
func (r Rate) IsZero() bool { return r == Rate{} }

// IsUnlimited reports whether r is Unlimited.
func (r Rate) IsUnlimited() bool { return r == Unlimited }

// Interval returns Per/Events rounded up to the nanosecond, so that the
// rate is never exceeded; zero for the unset and the unlimited Rate.
func (r Rate) Interval() time.Duration {
	if r.Events <= 0 || r.Per <= 0 {
		return 0
	}
	return (r.Per + time.Duration(r.Events) - 1) / time.Duration(r.Events)
}

// ParseRate reads a rate as nginx's limit_req_zone writes it: a positive
// decimal count (leading zeros allowed, as nginx allows them) followed by
// "r/s", "r/m" or "r/h" without spaces, or "unlimited". Anything else is
// ErrNotARate or an error about the count.
func ParseRate(s string) (Rate, error) {
	if s == "unlimited" {
		return Unlimited, nil
	}
	for _, u := range units {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			n, err := parseCount(num)
			if err != nil {
				return Rate{}, err
			}
			return Rate{Events: n, Per: u.per}, nil
		}
	}
	return Rate{}, ErrNotARate
}

// parseCount reads the count of a rate: digits only, 1 to MaxEvents.
func parseCount(num string) (int, error) {
	if num == "" {
		return 0, errors.New("the number of requests is missing")
	}
	if trimmed := strings.TrimLeft(num, "0"); trimmed != "" {
		num = trimmed
	}
	if len(num) > len(strconv.Itoa(MaxEvents)) {
		return 0, fmt.Errorf("the number of requests must be at most %d", MaxEvents)
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
	case n > MaxEvents:
		return 0, fmt.Errorf("the number of requests must be at most %d", MaxEvents)
	}
	return n, nil
}

// Problem returns what makes r unusable as a limit, or "": the unset
// Rate, a count out of range, a period that is not positive, or an
// interval under a nanosecond.
func (r Rate) Problem() string {
	switch {
	case r.IsUnlimited():
		return ""
	case r.IsZero():
		return "no rate set"
	case r.Events < 1 || r.Events > MaxEvents:
		return fmt.Sprintf("Events must be in 1..%d (got %d)", MaxEvents, r.Events)
	case r.Per <= 0:
		return fmt.Sprintf("Per must be positive (got %v)", r.Per)
	case time.Duration(r.Events) > r.Per:
		return fmt.Sprintf("%d events per %v is faster than one per nanosecond", r.Events, r.Per)
	}
	return ""
}

// HasText reports whether ParseRate can read back what String writes of
// r: the unlimited Rate, or a count in range per second, minute or hour.
func (r Rate) HasText() bool {
	if r.IsUnlimited() {
		return true
	}
	for _, u := range units {
		if r.Per == u.per && r.Events >= 1 && r.Events <= MaxEvents {
			return true
		}
	}
	return false
}

// String returns r as ParseRate reads it ("10r/s", "unlimited"); "none"
// for the unset Rate; "N/period" ("3/1.5s") for a period no unit names,
// which ParseRate refuses.
func (r Rate) String() string {
	switch {
	case r.IsZero():
		return "none"
	case r.IsUnlimited():
		return "unlimited"
	}
	for _, u := range units {
		if r.Per == u.per {
			return strconv.Itoa(r.Events) + u.suffix
		}
	}
	return strconv.Itoa(r.Events) + "/" + r.Per.String()
}

// MarshalText implements encoding.TextMarshaler with String's form. It
// fails for a Rate that ParseRate could not read back.
func (r Rate) MarshalText() ([]byte, error) {
	if !r.HasText() {
		return nil, fmt.Errorf("rate %v has no text form: its period must be a second, a minute or an hour", r)
	}
	return []byte(r.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseRate. On
// error *r is left unchanged.
func (r *Rate) UnmarshalText(text []byte) error {
	v, err := ParseRate(string(text))
	if err != nil {
		return err
	}
	*r = v
	return nil
}
