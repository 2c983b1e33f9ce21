package grpclimit_test

import (
	"log/slog"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/seed-a07d1050/portcullis/grpclimit"
	"github.com/seed-a07d1050/portcullis/internal/logtest"
)

// A library logs only where it is told to: with a nil Logger a refused
// call is answered and counted but written nowhere, not to slog's default
// logger; with a Logger it is written there.
func TestRefusalLoggedOnlyToAGivenLogger(t *testing.T) {
	given := &logtest.Recorder{}
	for _, tc := range []struct {
		name   string
		logger *slog.Logger
	}{{"nil Logger", nil}, {"given Logger", slog.New(given)}} {
		t.Run(tc.name, func(t *testing.T) {
			def := logtest.CaptureDefault(t)
			l, err := grpclimit.New(grpclimit.Config{Policy: grpclimit.Policy{Permits: 1}, Logger: tc.logger, LogEvery: -1})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			svc := newService()
			addr := serve(t, svc, nil, grpclimit.ServerOptions(l)...)
			cc := dialFrom(t, "127.0.0.2", addr)
			running := startUnary(callCtx(t), cc, "")
			waitFor(t, "one call running", func() bool { return inUse(l) == 1 })
			wantCode(t, result(t, startUnary(callCtx(t), cc, "")), codes.ResourceExhausted)
			svc.open()
			if err := result(t, running); err != nil {
				t.Fatal(err)
			}
			waitIdle(t, l)
			if lines := def.Lines(); len(lines) != 0 {
				t.Errorf("slog's default logger got %q", lines)
			}
			refusal := func(s string) bool { return strings.Contains(s, "call refused") }
			if got := slices.ContainsFunc(given.Lines(), refusal); got != (tc.logger != nil) {
				t.Errorf("refusal in the given logger: %v, want %v (%q)", got, tc.logger != nil, given.Lines())
			}
		})
	}
}
