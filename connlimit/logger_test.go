package connlimit

import (
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/logtest"
)

// A library logs only where it is told to: with a nil Logger a refusal is
// counted but written nowhere, not to slog's default logger; with a Logger
// it is written there.
func TestRefusalLoggedOnlyToAGivenLogger(t *testing.T) {
	given := &logtest.Recorder{}
	for _, tc := range []struct {
		name   string
		logger *slog.Logger
	}{{"nil Logger", nil}, {"given Logger", slog.New(given)}} {
		t.Run(tc.name, func(t *testing.T) {
			def := logtest.CaptureDefault(t)
			l := newTestListener(t, nil, Config{Policy: Policy{Permits: 1}, Logger: tc.logger})
			echoServer(t, l)
			dialFrom(t, "127.0.0.5", l.Addr())
			waitFor(t, "the first connection", func() bool { return l.Stats().Open == 1 })
			dialFrom(t, "127.0.0.5", l.Addr())
			waitFor(t, "the refusal", func() bool { return l.Stats().Refused.ClientCap == 1 })
			// The refusal is counted before it is logged: wait for the
			// line where one is due.
			refusal := func(s string) bool { return strings.Contains(s, "connlimit: connection refused") }
			if tc.logger != nil {
				waitFor(t, "the refusal's line in the given logger", func() bool { return slices.ContainsFunc(given.Lines(), refusal) })
			} else if slices.ContainsFunc(given.Lines(), refusal) {
				t.Errorf("refusal in the given logger, which this listener was not given: %q", given.Lines())
			}
			if lines := def.Lines(); len(lines) != 0 {
				t.Errorf("slog's default logger got %q", lines)
			}
		})
	}
}
