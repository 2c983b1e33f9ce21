package limit_test

import (
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/limit"
)

// Every number of permits reads the same way: zero the default,
// Unlimited no limit, below it an error naming the field.
func TestPolicyValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    limit.Policy[string]
		want string // "" for valid
	}{
		{"zero", limit.Policy[string]{}, ""},
		{"unlimited", limit.Policy[string]{Permits: limit.Unlimited, Overrides: map[string]int{"a": limit.Unlimited, "b": 0}}, ""},
		{"largest", limit.Policy[string]{Permits: limit.MaxPermits}, ""},
		{"permits below -1", limit.Policy[string]{Permits: -2}, "limit: Permits must be ≥ -1 (Unlimited) (got -2)"},
		{"permits too large", limit.Policy[string]{Permits: limit.MaxPermits + 1}, "Permits must be at most"},
		{"override below -1", limit.Policy[string]{Overrides: map[string]int{"batch": -3}}, `limit: Overrides["batch"] must be in -1..`},
		{"negative queue", limit.Policy[string]{QueueSize: -1}, "QueueSize must not be negative (got -1)"},
		{"negative timeout", limit.Policy[string]{QueueTimeout: -1}, "QueueTimeout must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.p.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.want)
			}
			l, err := limit.New(limit.Config[string]{Policy: tc.p})
			if (err == nil) != (tc.want == "") {
				t.Fatalf("New() error = %v, want one only when Validate fails", err)
			}
			if l != nil {
				l.Close()
			}
		})
	}
}

// Overrides give listed keys their own permits and win over PermitsFor;
// zero means Permits, Unlimited no limit; a PermitsFor answer below
// Unlimited, which cannot fail, is read as unlimited.
func TestPolicyOverrides(t *testing.T) {
	l := newLimiter(t, limit.Config[string]{Policy: limit.Policy[string]{
		Permits:   1,
		Overrides: map[string]int{"batch": 3, "plain": 0, "health": limit.Unlimited, "func": 2},
		PermitsFor: func(key string) int {
			switch key {
			case "func":
				return 9 // Overrides wins
			case "odd":
				return -7
			case "two":
				return 2
			}
			return 0
		},
	}})
	for key, want := range map[string]int{"batch": 3, "plain": 1, "func": 2, "two": 2, "other": 1, "health": 50, "odd": 50} {
		var held []limit.Permit[string]
		for {
			p, err := l.TryAcquire(key)
			if err != nil {
				break
			}
			held = append(held, p)
			if len(held) == 50 {
				break
			}
		}
		if len(held) != want {
			t.Errorf("key %q got %d permits, want %d", key, len(held), want)
		}
		for _, p := range held {
			p.Release()
		}
	}
	assertIdle(t, l)
}

// New copies the Overrides map: changing it afterwards changes nothing.
func TestPolicyOverridesCopied(t *testing.T) {
	overrides := map[string]int{"batch": 2}
	l := newLimiter(t, limit.Config[string]{Policy: limit.Policy[string]{Permits: 1, Overrides: overrides}})
	overrides["batch"] = 5
	a, _ := l.TryAcquire("batch")
	b, _ := l.TryAcquire("batch")
	if _, err := l.TryAcquire("batch"); err == nil {
		t.Error("a third permit was granted after the caller's map changed")
	}
	a.Release()
	b.Release()
	assertIdle(t, l)
}

// PermitsOf answers what a Limiter built from the same Policy grants: the
// number of TryAcquires of the key that succeed, or Unlimited.
func TestPolicyPermitsOf(t *testing.T) {
	small := func(key string) int {
		switch key {
		case "f3":
			return 3
		case "fu":
			return limit.Unlimited
		case "fbig":
			return limit.MaxPermits + 5 // clamped to unlimited
		}
		return 0 // Permits
	}
	p := limit.Policy[string]{Permits: 2, Overrides: map[string]int{"o1": 1, "o0": 0, "f3": 4}, PermitsFor: small}
	for _, tc := range []struct {
		p    limit.Policy[string]
		key  string
		want int
	}{
		{p, "other", 2},
		{p, "o1", 1},
		{p, "o0", 2},
		{p, "f3", 4}, // Overrides wins over PermitsFor
		{limit.Policy[string]{Permits: 2, PermitsFor: small}, "f3", 3},
		{limit.Policy[string]{Permits: 2, PermitsFor: small}, "fu", limit.Unlimited},
		{limit.Policy[string]{Permits: 2, PermitsFor: small}, "fbig", limit.Unlimited},
		{limit.Policy[string]{}, "k", limit.DefaultPermits},
		{limit.Policy[string]{Permits: limit.Unlimited}, "k", limit.Unlimited},
	} {
		t.Run(tc.key, func(t *testing.T) {
			if got := tc.p.PermitsOf(tc.key); got != tc.want {
				t.Fatalf("PermitsOf(%q) = %d, want %d", tc.key, got, tc.want)
			}
			l, err := limit.New(limit.Config[string]{Policy: tc.p})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			granted := 0
			for granted < 100 {
				if _, err := l.TryAcquire(tc.key); err != nil {
					break
				}
				granted++
			}
			if want := tc.want; want == limit.Unlimited && granted != 100 || want != limit.Unlimited && granted != want {
				t.Fatalf("the Limiter granted %d of %q; PermitsOf says %d", granted, tc.key, tc.want)
			}
		})
	}
}
