package rate

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A Rate is a number of events per period, such as 10 per second. The zero
// Rate means "not set"; [Unlimited] means no limit at all. Rates are
// comparable values.
type Rate struct {
	// Events is how many events the rate allows per Per: at least 1, or -1
	// in [Unlimited]. Zero (with a zero Per) is the unset Rate.
	Events int
	// Per is the period over which Events are allowed: positive, or zero
	// in the unset Rate and in [Unlimited].
	Per time.Duration
}

// Unlimited is the Rate that never refuses: a key under it is admitted at
// once and holds no state. Its text form is "unlimited".
var Unlimited = Rate{Events: -1}

// maxEvents bounds Rate.Events, so that the text form stays short and the
// interval stays at least one nanosecond for every unit.
const maxEvents = 1_000_000_000

// PerSecond returns n events per second.
func PerSecond(n int) Rate { return Rate{Events: n, Per: time.Second} }

// PerMinute returns n events per minute.
func PerMinute(n int) Rate { return Rate{Events: n, Per: time.Minute} }

// IsZero reports whether r is the unset Rate.
func (r Rate) IsZero() bool { return r == Rate{} }

// IsUnlimited reports whether r is [Unlimited].
func (r Rate) IsUnlimited() bool { return r == Unlimited }

// Interval returns the time between two events at rate r, Per/Events,
// rounded up to the nanosecond so that the rate is never exceeded; zero for
// the unset and the unlimited Rate.
func (r Rate) Interval() time.Duration {
	if r.Events <= 0 || r.Per <= 0 {
		return 0
	}
	return (r.Per + time.Duration(r.Events) - 1) / time.Duration(r.Events)
}

// Validate reports whether r is a usable limit: [Unlimited], or at least
// one event per positive period with an interval of at least one
// nanosecond. The unset Rate is an error.
func (r Rate) Validate() error {
	switch {
	case r.IsUnlimited():
		return nil
	case r.IsZero():
		return errors.New("rate: no rate set")
	case r.Events < 1 || r.Events > maxEvents:
		return fmt.Errorf("rate: Events must be in 1..%d (got %d)", maxEvents, r.Events)
	case r.Per <= 0:
		return fmt.Errorf("rate: Per must be positive (got %v)", r.Per)
	case time.Duration(r.Events) > r.Per:
		return fmt.Errorf("rate: %d events per %v is faster than one per nanosecond", r.Events, r.Per)
	}
	return nil
}

// units are the suffixes ParseRate reads and String writes: nginx's r/s
// and r/m, and r/h for slow rates such as login attempts.
var units = [...]struct {
	suffix string
	per    time.Duration
}{
	{"r/s", time.Second},
	{"r/m", time.Minute},
	{"r/h", time.Hour},
}

// ParseRate reads a rate written as nginx's limit_req_zone writes it: a
// positive decimal integer of requests (leading zeros allowed) followed by
// "r/s" (per second),
// "r/m" (per minute) or "r/h" (per hour), with no spaces: "10r/s",
// "600r/m", "30r/h". "unlimited" gives [Unlimited]. Anything else, an empty
// string included, is an error that quotes the input; the count must be in
// 1..1e9.
func ParseRate(s string) (Rate, error) {
	if s == "unlimited" {
		return Unlimited, nil
	}
	for _, u := range units {
		num, ok := strings.CutSuffix(s, u.suffix)
		if !ok {
			continue
		}
		n, err := parseCount(num)
		if err != nil {
			return Rate{}, fmt.Errorf("rate: %q: %w", s, err)
		}
		return Rate{Events: n, Per: u.per}, nil
	}
	return Rate{}, fmt.Errorf("rate: %q is not a rate: write N r/s, N r/m or N r/h without spaces (10r/s, 600r/m), or unlimited", s)
}

// parseCount reads the decimal count of a rate: digits only (no sign, no
// spaces, no underscores; leading zeros allowed, as nginx allows them),
// 1..maxEvents.
func parseCount(num string) (int, error) {
	if num == "" {
		return 0, errors.New("the number of requests is missing")
	}
	if trimmed := strings.TrimLeft(num, "0"); trimmed != "" {
		num = trimmed
	}
	if len(num) > len(strconv.Itoa(maxEvents)) {
		return 0, fmt.Errorf("the number of requests must be at most %d", maxEvents)
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
	case n > maxEvents:
		return 0, fmt.Errorf("the number of requests must be at most %d", maxEvents)
	}
	return n, nil
}

// MustParseRate is ParseRate for rates known to be valid, such as
// constants in code. It panics on error.
func MustParseRate(s string) Rate {
	r, err := ParseRate(s)
	if err != nil {
		panic(err)
	}
	return r
}

// String returns r in the form ParseRate reads when its period is a
// second, a minute or an hour ("10r/s", "unlimited"); other periods are
// written as "N/period" ("3/1.5s"), which ParseRate rejects. The unset Rate
// is "none".
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
	s := r.String()
	if _, err := ParseRate(s); err != nil {
		return nil, fmt.Errorf("rate: %v has no text form: its period must be a second, a minute or an hour", r)
	}
	return []byte(s), nil
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
