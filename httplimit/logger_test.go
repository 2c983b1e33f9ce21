package httplimit_test

import (
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/httplimit"
	"github.com/seed-a07d1050/portcullis/internal/logtest"
	"github.com/seed-a07d1050/portcullis/rate"
)

// A library logs only where it is told to: with a nil Logger a refusal is
// answered and counted but written nowhere, not to slog's default logger;
// with a Logger it is written there.
func TestRefusalLoggedOnlyToAGivenLogger(t *testing.T) {
	given := &logtest.Recorder{}
	for _, tc := range []struct {
		name   string
		logger *slog.Logger
	}{{"nil Logger", nil}, {"given Logger", slog.New(given)}} {
		t.Run(tc.name, func(t *testing.T) {
			def := logtest.CaptureDefault(t)
			resp, _ := refusedResponse(t, httplimit.Config{Logger: tc.logger, LogEvery: -1})
			if resp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("status %d, want 429", resp.StatusCode)
			}
			if lines := def.Lines(); len(lines) != 0 {
				t.Errorf("slog's default logger got %q", lines)
			}
			refusal := func(s string) bool { return strings.Contains(s, "request refused") }
			if got := slices.ContainsFunc(given.Lines(), refusal); got != (tc.logger != nil) {
				t.Errorf("refusal in the given logger: %v, want %v (%q)", got, tc.logger != nil, given.Lines())
			}
		})
	}
}

// The same holds for the rate limiter.
func TestRateRefusalLoggedOnlyToAGivenLogger(t *testing.T) {
	given := &logtest.Recorder{}
	for _, tc := range []struct {
		name   string
		logger *slog.Logger
	}{{"nil Logger", nil}, {"given Logger", slog.New(given)}} {
		t.Run(tc.name, func(t *testing.T) {
			def := logtest.CaptureDefault(t)
			l, err := httplimit.NewRate(httplimit.RateConfig{Rate: rate.PerMinute(1), Delay: rate.NoDelay, Logger: tc.logger, LogEvery: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			ts := startServer(t, l.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
			c := clientFrom(t, "127.0.0.2")
			for i, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
				if code, err := getStatus(t.Context(), c, ts.URL); err != nil || code != want {
					t.Fatalf("request %d: %d %v, want %d", i+1, code, err, want)
				}
			}
			if lines := def.Lines(); len(lines) != 0 {
				t.Errorf("slog's default logger got %q", lines)
			}
			refusal := func(s string) bool { return strings.Contains(s, "request refused") }
			if got := slices.ContainsFunc(given.Lines(), refusal); got != (tc.logger != nil) {
				t.Errorf("refusal in the given logger: %v, want %v (%q)", got, tc.logger != nil, given.Lines())
			}
		})
	}
}
