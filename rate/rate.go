package rate

import (
	"errors"
	"fmt"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/ratetext"
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
func (r Rate) Interval() time.Duration { return ratetext.Rate(r).Interval() }

// Validate reports whether r is a usable limit: [Unlimited], or at least
// one event per positive period with an interval of at least one
// nanosecond. The unset Rate is an error.
func (r Rate) Validate() error {
	if p := ratetext.Rate(r).Problem(); p != "" {
		return errors.New("rate: " + p)
	}
	return nil
}

// ParseRate reads a rate written as nginx's limit_req_zone writes it: a
// positive decimal integer of requests (leading zeros allowed) followed by
// "r/s" (per second),
// "r/m" (per minute) or "r/h" (per hour), with no spaces: "10r/s",
// "600r/m", "30r/h". "unlimited" gives [Unlimited]. Anything else, an empty
// string included, is an error that quotes the input; the count must be in
// 1..1e9.
func ParseRate(s string) (Rate, error) {
	r, err := ratetext.ParseRate(s)
	switch {
	case errors.Is(err, ratetext.ErrNotARate):
		return Rate{}, fmt.Errorf("rate: %q %w", s, err)
	case err != nil:
		return Rate{}, fmt.Errorf("rate: %q: %w", s, err)
	}
	return Rate(r), nil
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
func (r Rate) String() string { return ratetext.Rate(r).String() }

// MarshalText implements encoding.TextMarshaler with String's form. It
// fails for a Rate that ParseRate could not read back.
func (r Rate) MarshalText() ([]byte, error) {
	if !ratetext.Rate(r).HasText() {
		return nil, fmt.Errorf("rate: %v has no text form: its period must be a second, a minute or an hour", r)
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
