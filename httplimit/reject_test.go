package httplimit_test

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/httplimit"
	"github.com/seed-a07d1050/portcullis/limit"
)

// refusedResponse holds one request in the gate and returns the response
// to a second one from the same client.
func refusedResponse(t *testing.T, cfg httplimit.Config) (*http.Response, string) {
	t.Helper()
	cfg.Permits = 1
	l := newLimiter(t, cfg)
	g := newGate()
	ts := startServer(t, l.Wrap(g))
	c := clientFrom(t, "127.0.0.2")
	held := holdOne(t, c, ts.URL, g)
	resp, err := c.Get(ts.URL + "/second")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	g.release <- struct{}{}
	<-held
	expectIdle(t, l)
	return resp, string(body)
}

func TestRefusalResponse(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cfg        httplimit.Config
		status     int
		retryAfter string
		body       string
	}{
		{"default", httplimit.Config{}, 429, "1", "Too Many Requests\n"},
		{"status and retry after rounded up", httplimit.Config{Status: 503, RetryAfter: 2500 * time.Millisecond}, 503, "3", "Service Unavailable\n"},
		{"no retry after", httplimit.Config{RetryAfter: -1}, 429, "", "Too Many Requests\n"},
		{"custom response", httplimit.Config{Reject: func(w http.ResponseWriter, r *http.Request, key string, err error) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTeapot)
			io.WriteString(w, `{"key":"`+key+`","limited":`+map[bool]string{true: "true", false: "false"}[errors.Is(err, limit.ErrLimited)]+`}`)
		}}, 418, "", `{"key":"127.0.0.2","limited":true}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := refusedResponse(t, tc.cfg)
			if resp.StatusCode != tc.status || resp.Header.Get("Retry-After") != tc.retryAfter || body != tc.body {
				t.Errorf("got %d Retry-After %q body %q; want %d %q %q",
					resp.StatusCode, resp.Header.Get("Retry-After"), body, tc.status, tc.retryAfter, tc.body)
			}
			if tc.cfg.Reject == nil && resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
				t.Errorf("Content-Type %q", resp.Header.Get("Content-Type"))
			}
		})
	}
}

func TestOnRejectAndLog(t *testing.T) {
	var gotKey, gotPath string
	var gotErr error
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	refusedResponse(t, httplimit.Config{
		Name:   "api",
		Logger: logger,
		OnReject: func(key string, r *http.Request, err error) {
			gotKey, gotPath, gotErr = key, r.URL.Path, err
		},
	})
	if gotKey != "127.0.0.2" || gotPath != "/second" || !errors.Is(gotErr, limit.ErrLimited) {
		t.Errorf("OnReject got %q %q %v", gotKey, gotPath, gotErr)
	}
	line := logs.String()
	for _, want := range []string{"request refused", "limiter=api", "key=127.0.0.2", "path=/second", "reason=refused", "suppressed=0"} {
		if !strings.Contains(line, want) {
			t.Errorf("log %q lacks %q", line, want)
		}
	}
}

// TestRefusalLogIsRateLimited refuses many requests in a burst: one line
// is logged, and the next one says how many were left out.
func TestRefusalLogIsRateLimited(t *testing.T) {
	var logs bytes.Buffer
	l := newLimiter(t, httplimit.Config{Policy: httplimit.Policy{Permits: 1}, Logger: slog.New(slog.NewTextHandler(&logs, nil)), LogEvery: time.Hour})
	g := newGate()
	ts := startServer(t, l.Wrap(g))
	c := clientFrom(t, "127.0.0.2")
	held := holdOne(t, c, ts.URL, g)
	for range 20 {
		if code, _ := getStatus(t.Context(), c, ts.URL); code != http.StatusTooManyRequests {
			t.Fatalf("status %d", code)
		}
	}
	g.release <- struct{}{}
	<-held
	if n := strings.Count(logs.String(), "request refused"); n != 1 {
		t.Errorf("%d refusal lines for 20 refusals within LogEvery, want 1", n)
	}
}
