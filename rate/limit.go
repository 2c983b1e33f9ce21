package rate

import (
	"errors"
	"fmt"
	"math"

	"github.com/seed-a07d1050/portcullis/internal/ratetext"
)

// NoDelay, as [Limit.Delay], admits every request within the burst at once,
// as nginx's limit_req nodelay.
const NoDelay = ratetext.NoDelay

// A Limit is one key's rate limit, with nginx limit_req's meaning: requests
// conform at Rate; up to Burst more may arrive early; of those, the first
// Delay are admitted at once and the rest are spaced out at Rate (see
// [Decision.Delay]). The zero Limit has no Rate and is invalid where a
// limit is required.
type Limit struct {
	// Rate is the sustained rate. The zero Rate is invalid; [Unlimited]
	// admits everything.
	Rate Rate

	// Burst is how many requests may arrive ahead of Rate: nginx's burst.
	// Zero means none: a request that comes less than one interval after
	// the previous one is refused. It must be in 0..2^30.
	Burst int

	// Delay is how many of the Burst early requests are admitted at once;
	// the rest are admitted with a delay that spaces them out at Rate.
	// Zero, nginx's default, delays every early request; N > 0 is nginx's
	// delay=N; [NoDelay] (-1) is nginx's nodelay: the whole burst at once.
	// A Delay of Burst or more is the same as NoDelay. Other negative
	// values are invalid.
	Delay int
}

// Validate reports whether l is a usable limit, naming the bad field.
func (l Limit) Validate() error {
	if p := l.text().Problem(); p != "" {
		return errors.New("rate: " + p)
	}
	return nil
}

// text returns l as package ratetext's Limit, which reads and writes it.
func (l Limit) text() ratetext.Limit {
	return ratetext.Limit{Rate: ratetext.Rate(l.Rate), Burst: l.Burst, Delay: l.Delay}
}

// String returns l as nginx would write it: "10r/s burst=20 delay=5",
// "10r/s burst=20 nodelay", "10r/s" (no burst).
func (l Limit) String() string { return l.text().String() }

// MarshalText implements encoding.TextMarshaler in ParseLimit's form,
// field for field, so that UnmarshalText gives back an equal Limit: unlike
// String, it writes a delay or nodelay that makes no difference (a delay
// of the burst or more, a nodelay without burst). It fails for a Limit
// whose Rate has no text form (a period other than a second, a minute or
// an hour).
func (l Limit) MarshalText() ([]byte, error) {
	if _, err := l.Rate.MarshalText(); err != nil {
		return nil, err
	}
	return l.text().MarshalText()
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseLimit, so
// that a configuration can write a limit as "100r/s burst=50 nodelay". On
// error *l is left unchanged.
func (l *Limit) UnmarshalText(text []byte) error {
	v, err := ParseLimit(string(text))
	if err != nil {
		return err
	}
	*l = v
	return nil
}

// policy is a Limit in the form the limiter computes with, in nanoseconds.
// A key's state is its theoretical arrival time (TAT): the time at which
// it is back to a fresh state if nothing more arrives. A request arriving at
// now moves it to max(TAT, now) + interval; ahead = TAT - now after that.
type policy struct {
	interval int64 // T; 0 means unlimited
	window   int64 // (Burst+1)·T: the most ahead may be after an admission
	free     int64 // (Delay+1)·T: ahead up to which no delay is imposed
}

// policyOf converts a Limit that passed Validate.
func policyOf(l Limit) policy {
	t := int64(l.Rate.Interval())
	if t == 0 {
		return policy{}
	}
	p := policy{interval: t, window: int64(l.Burst+1) * t, free: math.MaxInt64}
	if l.Delay != NoDelay && l.Delay < l.Burst {
		p.free = int64(l.Delay+1) * t
	}
	return p
}

func (p *policy) unlimited() bool { return p.interval == 0 }

// ParseLimit reads a limit in the words of nginx's limit_req, as String
// writes it: a rate (see [ParseRate]) followed by any of "burst=N",
// "delay=N" and "nodelay", separated by single spaces, each at most once
// and not both delay=N and nodelay: "10r/s", "10r/s burst=20 delay=5",
// "10r/s burst=20 nodelay". N is a decimal integer (burst ≥ 0, delay ≥ 1,
// as nginx requires). The result is validated; anything else is an error
// that quotes the input.
func ParseLimit(s string) (Limit, error) {
	t, err := ratetext.ParseLimit(s)
	var e *ratetext.LimitError
	if errors.As(err, &e) {
		switch {
		case e.InRate:
			_, err = ParseRate(e.Word)
		case e.Unknown:
			err = fmt.Errorf("unknown word %q: %w", e.Word, e.Err)
		case e.Invalid:
			err = fmt.Errorf("rate: %w", e.Err)
		}
		return Limit{}, fmt.Errorf("rate: limit %q: %w", s, err)
	}
	return Limit{Rate: Rate(t.Rate), Burst: t.Burst, Delay: t.Delay}, nil
}
