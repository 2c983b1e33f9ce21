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
