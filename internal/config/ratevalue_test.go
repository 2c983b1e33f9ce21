package config_test

import (
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/rate"
)

// rateTexts are rate and limit texts, good and bad, on which config's parser must agree
// with package rate's.
var rateTexts = []string{
	"10r/s", "600r/m", "30r/h", "unlimited", "0010r/s", "1000000000r/s", "1r/h",
	"", "0r/s", "10 r/s", "10r/d", "-1r/s", "+1r/s", "1_0r/s", "2000000000r/s", "99999999999r/s", "r/s", "fast",
	"10r/s burst=20", "10r/s burst=20 delay=5", "10r/s burst=20 nodelay", "unlimited burst=3",
	"10r/s burst=0", "10r/s delay=0", "10r/s  burst=2", "10r/s burst=2 burst=3", "10r/s nodelay delay=2",
	"10r/s brust=5", "10r/s burst=", "10r/s burst=x", "10r/s nodelay=1", "1r/h burst=1000000",
	"1r/h burst=10000", "10r/s burst=1073741825", "10r/s burst=9999999999", "10r/s delay=3 nodelay",
}

// TestRateTextsAgreeWithPackageRate holds config's reading of rate texts to package rate's:
// both go through internal/ratetext (rate's fuzz targets fuzz it), and this checks that
// neither side's conversions lose a value: the same texts are accepted, to the same values,
// and written back the same way.
func TestRateTextsAgreeWithPackageRate(t *testing.T) {
	for _, s := range rateTexts {
		checkRateText(t, s)
	}
}

func checkRateText(t *testing.T, s string) {
	cr, cerr := config.ParseRateValue(s)
	rr, rerr := rate.ParseRate(s)
	if (cerr == nil) != (rerr == nil) {
		t.Fatalf("rate %q: config says %v, rate says %v", s, cerr, rerr)
	}
	if cerr == nil && (cr.Events != rr.Events || cr.Per != rr.Per || cr.String() != rr.String()) {
		t.Fatalf("rate %q: config reads %+v (%s), rate %+v (%s)", s, cr, cr, rr, rr)
	}
	cl, cerr := config.ParseRateLimit(s)
	rl, rerr := rate.ParseLimit(s)
	if (cerr == nil) != (rerr == nil) {
		t.Fatalf("limit %q: config says %v, rate says %v", s, cerr, rerr)
	}
	if cerr != nil {
		return
	}
	if cl.Rate.Events != rl.Rate.Events || cl.Rate.Per != rl.Rate.Per || cl.Burst != rl.Burst || cl.Delay != rl.Delay {
		t.Fatalf("limit %q: config reads %+v, rate %+v", s, cl, rl)
	}
	cb, cerr := cl.MarshalText()
	rb, rerr := rl.MarshalText()
	if string(cb) != string(rb) || (cerr == nil) != (rerr == nil) || cl.String() != rl.String() {
		t.Fatalf("limit %q: config writes %q/%s (%v), rate %q/%s (%v)", s, cb, cl, cerr, rb, rl, rerr)
	}
}
