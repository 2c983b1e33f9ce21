package rate_test

import (
	"testing"

	"github.com/seed-a07d1050/portcullis/limit/limittest"
	"github.com/seed-a07d1050/portcullis/rate"
)

// AllowQuiet takes a request only when it may proceed at once, counted
// as Allow counts it; a request the limiter would delay, refuse or let
// through in shadow mode leaves the key's state and the totals as they
// were, so that the Allow that follows decides exactly as if the quiet
// request had not been made.
func TestAllowQuiet(t *testing.T) {
	cases := []struct {
		name string
		cfg  rate.Config[string]
		// before is how many requests of "k" Allow admits first.
		before int
		want   bool
		// then is what Allow answers right after the quiet request.
		then rate.Verdict
	}{
		{"fresh key", rate.Config[string]{Rate: rate.PerSecond(1)}, 0, true, rate.Refused},
		{"within the burst, nodelay", rate.Config[string]{Rate: rate.PerSecond(1), Burst: 2, Delay: rate.NoDelay}, 1, true, rate.Admitted},
		{"would be delayed", rate.Config[string]{Rate: rate.PerSecond(1), Burst: 2}, 1, false, rate.Delayed},
		{"would be refused", rate.Config[string]{Rate: rate.PerSecond(1)}, 1, false, rate.Refused},
		{"shadow, over the rate", rate.Config[string]{Rate: rate.PerSecond(1), Shadow: true}, 1, false, rate.ShadowRefused},
		{"shadow, within the rate", rate.Config[string]{Rate: rate.PerSecond(1), Shadow: true}, 0, true, rate.ShadowRefused},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := limittest.NewClock()
			tc.cfg.Clock = clock
			l, err := rate.New(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			for i := range tc.before {
				if d := l.Allow("k"); !d.Allowed() {
					t.Fatalf("request %d before: %v", i, d.Verdict)
				}
			}
			before := l.Totals()
			if would := l.WouldAllow("k"); would != tc.want || l.Totals() != before {
				t.Fatalf("WouldAllow = %v (want %v), totals %+v → %+v", would, tc.want, before, l.Totals())
			}
			d, ok := l.AllowQuiet("k")
			if ok != tc.want {
				t.Fatalf("AllowQuiet = %v (%v), want %v", ok, d.Verdict, tc.want)
			}
			after := l.Totals()
			if ok && (d.Verdict != rate.Admitted || d.Delay != 0 || after.Admitted != before.Admitted+1) {
				t.Errorf("quiet admission: %+v, admitted %d → %d", d, before.Admitted, after.Admitted)
			}
			if !ok && after != before {
				t.Errorf("a quiet refusal changed the totals: %+v → %+v", before, after)
			}
			if got := l.Allow("k").Verdict; got != tc.then {
				t.Errorf("Allow after it: %v, want %v", got, tc.then)
			}
		})
	}
}

func TestAllowQuietAfterCloseAndWithAStore(t *testing.T) {
	l, err := rate.New(rate.Config[string]{Rate: rate.PerSecond(10)})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if _, ok := l.AllowQuiet("k"); ok {
		t.Error("AllowQuiet admitted after Close")
	}
	st := &fakeStore{ok: true}
	ls, err := rate.New(rate.Config[string]{Rate: rate.PerSecond(10), Store: st})
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Close()
	if _, ok := ls.AllowQuiet("k"); ok {
		t.Error("AllowQuiet admitted on a Store's behalf")
	}
	if tot := ls.Totals(); tot != (rate.Totals{}) || st.reserves+st.tries != 0 {
		t.Errorf("a quiet refusal with a Store was counted (%+v) or asked the Store (%d times)", tot, st.reserves+st.tries)
	}
}
