package quicadmit

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/quic-go/quic-go"

	"github.com/seed-a07d1050/portcullis/internal/logtest"
)

// A library logs only where it is told to: with a nil Logger a refusal and
// Retry turning on are counted but written nowhere, not to slog's default
// logger; with a Logger they are written there.
func TestLogsOnlyToAGivenLogger(t *testing.T) {
	given := &logtest.Recorder{}
	for _, tc := range []struct {
		name   string
		logger *slog.Logger
	}{{"nil Logger", nil}, {"given Logger", slog.New(given)}} {
		t.Run(tc.name, func(t *testing.T) {
			def := logtest.CaptureDefault(t)
			d := newHookDriver(t, Config{RetryThresholdMin: 1, RetryThresholdMax: 1, MaxInProgress: 1, Logger: tc.logger})
			d.arrive() // in progress: 1, the threshold; Retry turns on
			if _, err := d.c.ConnContext(context.Background(), &quic.ClientInfo{RemoteAddr: testAddr}); err == nil {
				t.Fatal("admitted over MaxInProgress")
			}
			if s := d.c.Snapshot(); s.Refused != 1 {
				t.Fatalf("Refused %d, want 1", s.Refused)
			}
			if lines := def.Lines(); len(lines) != 0 {
				t.Errorf("slog's default logger got %q", lines)
			}
			for _, want := range []string{"quicadmit: refusing", "quicadmit: Retry on"} {
				logged := slices.ContainsFunc(given.Lines(), func(s string) bool { return strings.Contains(s, want) })
				if logged != (tc.logger != nil) {
					t.Errorf("%q in the given logger: %v, want %v (%q)", want, logged, tc.logger != nil, given.Lines())
				}
			}
		})
	}
}
