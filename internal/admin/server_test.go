package admin_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a07d1050/portcullis/internal/admin"
	"github.com/seed-a07d1050/portcullis/internal/exchange"
	"github.com/seed-a07d1050/portcullis/internal/livepage"
)

// /readyz is 503 with the reason while the daemon is not ready, and 200
// while it is, saying so when the cluster is degraded (a degraded cluster
// stays in its load balancer). /healthz is 200 whatever the state.
func TestReadyz(t *testing.T) {
	src := newSource()
	s := startAdmin(t, src, nil)
	for _, tc := range []struct {
		name     string
		ready    bool
		why      string
		degraded []string
		want     int
		body     string
	}{
		{"ready", true, "ready", nil, http.StatusOK, "ready\n"},
		{"draining", false, "draining", nil, http.StatusServiceUnavailable, "draining\n"},
		{"a listener down", false, "listener web is down: bind: address in use", []string{"limits"}, http.StatusServiceUnavailable, "listener web is down: bind: address in use\n"},
		{"degraded", true, "ready", []string{"conns", "limits"}, http.StatusOK, "ready; cluster degraded (conns,limits): limits decide by on_error\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src.mu.Lock()
			src.ready, src.why, src.degraded = tc.ready, tc.why, tc.degraded
			src.mu.Unlock()
			resp, body := get(t, s, "/readyz")
			if resp.StatusCode != tc.want || body != tc.body {
				t.Errorf("/readyz: %d %q, want %d %q", resp.StatusCode, body, tc.want, tc.body)
			}
			if resp, body := get(t, s, "/healthz"); resp.StatusCode != http.StatusOK || body != "ok\n" {
				t.Errorf("/healthz: %d %q", resp.StatusCode, body)
			}
		})
	}
}

// /metrics exports the Source's collectors (read at each scrape), the
// fixed collectors, the request metrics and the Go and process
// collectors.
func TestMetrics(t *testing.T) {
	src := newSource()
	fixed := prometheus.NewGauge(prometheus.GaugeOpts{Name: "portcullis_test_fixed", Help: "A fixed collector."})
	fixed.Set(7)
	s, err := admin.Start(admin.Config{
		Addr: "127.0.0.1:0", Source: src, Metrics: exchange.NewMetrics(),
		Collectors: []prometheus.Collector{fixed}, Log: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	src.counter.Add(3)
	resp, body := get(t, s, "/metrics")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d", resp.StatusCode)
	}
	for _, want := range []string{"portcullis_test_source_total 3\n", "portcullis_test_fixed 7\n", "go_goroutines ", "process_open_fds "} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	src.counter.Add(1)
	if _, body := get(t, s, "/metrics"); !strings.Contains(body, "portcullis_test_source_total 4\n") {
		t.Error("a second scrape did not read the Source again")
	}
}

// Close ends the live page's event streams, so that it does not wait for
// their clients, and frees the address.
func TestCloseEndsEventStreams(t *testing.T) {
	s, err := admin.Start(admin.Config{Addr: "127.0.0.1:0", Source: newSource(), Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.Addr().String()+livepage.EventsPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("events: %d", resp.StatusCode)
	}
	closed := make(chan struct{})
	go func() {
		s.Close()
		close(closed)
	}()
	buf := make([]byte, 4096)
	for {
		if _, err := resp.Body.Read(buf); err != nil {
			if ctx.Err() != nil {
				t.Fatal("the event stream was not ended by Close")
			}
			break
		}
	}
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("Close did not return")
	}
	ln, err := net.Listen("tcp", s.Addr().String())
	if err != nil {
		t.Fatalf("the address after Close: %v", err)
	}
	_ = ln.Close()
}

// Start fails with an error saying what it was doing, and leaves nothing
// open: an address in use, no Source.
func TestStartErrors(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	s, err := admin.Start(admin.Config{Addr: taken.Addr().String(), Source: newSource()})
	if s != nil || err == nil || !strings.HasPrefix(err.Error(), "admin: listen: ") {
		t.Errorf("an address in use: %v, %v; want an admin: listen: error", s, err)
	}
	var opErr *net.OpError
	if !errors.As(err, &opErr) {
		t.Errorf("the listen error is not wrapped: %v", err)
	}
	if s, err := admin.Start(admin.Config{Addr: "127.0.0.1:0"}); s != nil || err == nil {
		t.Errorf("no Source: %v, %v; want an error", s, err)
	}
}
