package limit_test

import (
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/logtest"
	"github.com/seed-a07d1050/portcullis/limit"
	"github.com/seed-a07d1050/portcullis/limit/limittest"
)

// A library logs only where it is told to: with a nil Logger a reclaimed
// permit is counted but written nowhere, not to slog's default logger; with
// a Logger its WARN is written there.
func TestReclaimLoggedOnlyToAGivenLogger(t *testing.T) {
	given := &logtest.Recorder{}
	for _, tc := range []struct {
		name   string
		logger *slog.Logger
	}{{"nil Logger", nil}, {"given Logger", slog.New(given)}} {
		t.Run(tc.name, func(t *testing.T) {
			def := logtest.CaptureDefault(t)
			clock := limittest.NewClock()
			l := newLimiter(t, limit.Config[string]{Policy: limit.Policy[string]{Permits: 1}, Clock: clock, Logger: tc.logger})
			stuck, err := l.TryAcquire("k")
			if err != nil {
				t.Fatal(err)
			}
			clock.Advance(limit.DefaultReclaimAfter)
			if n := l.Reclaim(); n != 1 {
				t.Fatalf("Reclaim() = %d, want 1", n)
			}
			stuck.Release() // does nothing: the permit was taken back
			assertIdle(t, l)
			if lines := def.Lines(); len(lines) != 0 {
				t.Errorf("slog's default logger got %q", lines)
			}
			reclaimed := func(s string) bool { return strings.HasPrefix(s, "WARN reclaimed a permit") }
			if got := slices.ContainsFunc(given.Lines(), reclaimed); got != (tc.logger != nil) {
				t.Errorf("reclaim in the given logger: %v, want %v (%q)", got, tc.logger != nil, given.Lines())
			}
		})
	}
}
