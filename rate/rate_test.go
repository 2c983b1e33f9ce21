package rate_test

import (
	"strings"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/rate"
)

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want rate.Rate
		iv   time.Duration
	}{
		{"10r/s", rate.PerSecond(10), 100 * time.Millisecond},
		{"1r/s", rate.PerSecond(1), time.Second},
		{"600r/m", rate.PerMinute(600), 100 * time.Millisecond},
		{"1r/m", rate.PerMinute(1), time.Minute},
		{"30r/h", rate.Rate{Events: 30, Per: time.Hour}, 2 * time.Minute},
		{"3r/s", rate.PerSecond(3), 333333334 * time.Nanosecond}, // rounded up: never faster than asked
		{"1000000000r/s", rate.PerSecond(1e9), time.Nanosecond},
		{"unlimited", rate.Unlimited, 0},
		{"007r/m", rate.PerMinute(7), 8571428572 * time.Nanosecond}, // leading zeros, as nginx; rounded up
	} {
		got, err := rate.ParseRate(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			continue
		}
		if got.Interval() != tc.iv {
			t.Errorf("%v.Interval() = %v, want %v", got, got.Interval(), tc.iv)
		}
		if got.String() != strings.TrimLeft(tc.in, "0") {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), tc.in)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("%v.Validate() = %v", got, err)
		}
	}
}

func TestParseRateRejects(t *testing.T) {
	for _, in := range []string{
		"", "r/s", "0r/s", "-1r/s", "+1r/s", "10", "10r", "10r/d", "10 r/s", " 10r/s",
		"10r/s ", "1.5r/s", "1_0r/s", "1000000001r/s", "99999999999999999999r/s",
		"10R/S", "unlimited ", "Unlimited", "0x10r/s", "١٠r/s",
	} {
		if r, err := rate.ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) = %v, want an error", in, r)
		} else if !strings.HasPrefix(err.Error(), "rate: ") {
			t.Errorf("ParseRate(%q) error %q lacks the package prefix", in, err)
		}
	}
}

func TestRateTextRoundTrip(t *testing.T) {
	var r rate.Rate
	if err := r.UnmarshalText([]byte("600r/m")); err != nil || r != rate.PerMinute(600) {
		t.Fatalf("UnmarshalText = %v, %v", r, err)
	}
	if err := r.UnmarshalText([]byte("fast")); err == nil || r != rate.PerMinute(600) {
		t.Fatalf("a failed UnmarshalText changed the rate to %v (err %v)", r, err)
	}
	b, err := rate.Rate{Events: 3, Per: 1500 * time.Millisecond}.MarshalText()
	if err == nil {
		t.Fatalf("MarshalText of a rate per 1.5s = %q, want an error", b)
	}
}

func TestLimitValidate(t *testing.T) {
	for _, tc := range []struct {
		l  rate.Limit
		ok bool
	}{
		{rate.Limit{Rate: rate.PerSecond(10)}, true},
		{rate.Limit{Rate: rate.PerSecond(10), Burst: 20, Delay: 5}, true},
		{rate.Limit{Rate: rate.PerSecond(10), Burst: 20, Delay: rate.NoDelay}, true},
		{rate.Limit{Rate: rate.Unlimited}, true},
		{rate.Limit{}, false},
		{rate.Limit{Rate: rate.PerSecond(10), Burst: -1}, false},
		{rate.Limit{Rate: rate.PerSecond(10), Delay: -2}, false},
		{rate.Limit{Rate: rate.Rate{Events: 1, Per: -time.Second}}, false},
		{rate.Limit{Rate: rate.Rate{Events: 10, Per: time.Nanosecond}}, false},
		{rate.Limit{Rate: rate.Rate{Events: 1, Per: 1000 * time.Hour}, Burst: 1 << 30}, false},
	} {
		if err := tc.l.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v.Validate() = %v, want ok=%v", tc.l, err, tc.ok)
		}
	}
	if s := (rate.Limit{Rate: rate.PerSecond(10), Burst: 20, Delay: 5}).String(); s != "10r/s burst=20 delay=5" {
		t.Errorf("String = %q", s)
	}
	if s := (rate.Limit{Rate: rate.PerSecond(10), Burst: 20, Delay: rate.NoDelay}).String(); s != "10r/s burst=20 nodelay" {
		t.Errorf("String = %q", s)
	}
}

// FuzzParseRate: ParseRate never panics, accepts only what it documents,
// and what it accepts round-trips through String and Validate.
func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"10r/s", "600r/m", "30r/h", "unlimited", "", "0r/s", "1.5r/s", "999999999999r/s", "r/s", "10r/sr/s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := rate.ParseRate(s)
		if err != nil {
			if r != (rate.Rate{}) {
				t.Fatalf("ParseRate(%q) failed but returned %v", s, r)
			}
			return
		}
		if back, err := rate.ParseRate(r.String()); err != nil || back != r {
			t.Fatalf("ParseRate(%q) = %v, whose String %q reads back as %v, %v", s, r, r.String(), back, err)
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("ParseRate(%q) = %v, which does not validate: %v", s, r, err)
		}
		if !r.IsUnlimited() && r.Interval() <= 0 {
			t.Fatalf("ParseRate(%q) has interval %v", s, r.Interval())
		}
	})
}

func TestParseLimit(t *testing.T) {
	for in, want := range map[string]rate.Limit{
		"10r/s":                  {Rate: rate.PerSecond(10)},
		"10r/s burst=20":         {Rate: rate.PerSecond(10), Burst: 20},
		"10r/s burst=20 delay=5": {Rate: rate.PerSecond(10), Burst: 20, Delay: 5},
		"10r/s burst=20 nodelay": {Rate: rate.PerSecond(10), Burst: 20, Delay: rate.NoDelay},
		"600r/m nodelay":         {Rate: rate.PerMinute(600), Delay: rate.NoDelay},
	} {
		got, err := rate.ParseLimit(in)
		if err != nil || got != want {
			t.Errorf("ParseLimit(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "10r/s ", "10r/s  burst=2", "10r/s burst", "10r/s burst=-1", "10r/s delay=0",
		"10r/s burst=2 burst=3", "10r/s delay=2 nodelay", "10r/s nodelay delay=2", "10r/s nodelay=1", "10r/s fast",
		"burst=2", "10r/s burst=99999999999", "10r/s burst=1073741825", "1r/h burst=1073741824"} {
		if l, err := rate.ParseLimit(in); err == nil {
			t.Errorf("ParseLimit(%q) = %+v, want an error", in, l)
		}
	}
}

// A Limit reads from and writes to text (a YAML value) in ParseLimit's
// form; a failed read leaves the Limit as it was, and a Limit whose rate
// has no text form does not write.
func TestLimitText(t *testing.T) {
	want := rate.Limit{Rate: rate.PerSecond(100), Burst: 50, Delay: rate.NoDelay}
	var l rate.Limit
	if err := l.UnmarshalText([]byte("100r/s burst=50 nodelay")); err != nil || l != want {
		t.Fatalf("UnmarshalText = %+v, %v; want %+v", l, err, want)
	}
	if b, err := l.MarshalText(); err != nil || string(b) != "100r/s burst=50 nodelay" {
		t.Fatalf("MarshalText = %q, %v", b, err)
	}
	if err := l.UnmarshalText([]byte("100r/s brust=5")); err == nil || l != want {
		t.Fatalf("UnmarshalText of a bad limit = %v, and changed the Limit to %+v", err, l)
	}
	for _, l := range []rate.Limit{
		{Rate: rate.PerSecond(10), Delay: rate.NoDelay},
		{Rate: rate.PerSecond(10), Burst: 2, Delay: 5},
		{Rate: rate.Unlimited, Burst: 3},
		{Rate: rate.PerMinute(1)},
	} {
		b, err := l.MarshalText()
		var back rate.Limit
		if err == nil {
			err = back.UnmarshalText(b)
		}
		if err != nil || back != l {
			t.Errorf("%+v wrote %q, which reads back as %+v, %v", l, b, back, err)
		}
	}
	odd := rate.Limit{Rate: rate.Rate{Events: 3, Per: 1500 * time.Millisecond}}
	if b, err := odd.MarshalText(); err == nil {
		t.Fatalf("MarshalText of %v = %q, want an error", odd.Rate, b)
	}
}

// FuzzParseLimit: ParseLimit never panics, and what it accepts is valid
// and reads back the same from its String.
func FuzzParseLimit(f *testing.F) {
	for _, s := range []string{"10r/s", "10r/s burst=20 delay=5", "10r/s burst=20 nodelay", "1r/m burst=0", "10r/s delay=30 burst=2", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := rate.ParseLimit(s)
		if err != nil {
			return
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("ParseLimit(%q) = %+v, invalid: %v", s, l, err)
		}
		back, err := rate.ParseLimit(l.String())
		if err != nil {
			t.Fatalf("ParseLimit(%q).String() = %q does not parse: %v", s, l.String(), err)
		}
		if back.Rate != l.Rate || back.Burst != l.Burst || effectiveDelay(back) != effectiveDelay(l) {
			t.Fatalf("ParseLimit(%q) = %+v; its String %q reads back as %+v", s, l, l.String(), back)
		}
		text, err := l.MarshalText()
		var exact rate.Limit
		if err == nil {
			err = exact.UnmarshalText(text)
		}
		if err != nil || exact != l {
			t.Fatalf("ParseLimit(%q) = %+v; its MarshalText %q reads back as %+v, %v", s, l, text, exact, err)
		}
	})
}

// effectiveDelay is how many early requests go at once: a delay of the
// burst or more is nodelay.
func effectiveDelay(l rate.Limit) int {
	if l.Delay == rate.NoDelay || l.Delay >= l.Burst {
		return l.Burst
	}
	return l.Delay
}
