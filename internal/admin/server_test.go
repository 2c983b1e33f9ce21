package admin_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a07d1050/portcullis/internal/admin"
	"github.com/seed-a07d1050/portcullis/internal/config"
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
	s.Close() // a second Close returns at once
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
	if s, err := admin.Start(admin.Config{Source: newSource()}); s != nil || err == nil {
		t.Errorf("no address: %v, %v; want an error", s, err)
	}
}

// The live page counts each listener's exchanges by status class, summed
// over its routes, and lists every upstream error series above zero, from
// the same counters /metrics exports; a listener without series (tcp) has
// no counts.
func TestLiveRequestCounts(t *testing.T) {
	m := exchange.NewMetrics()
	m.Requests.WithLabelValues("web", "api", "2xx").Add(5)
	m.Requests.WithLabelValues("web", "", "4xx").Add(2)
	m.Requests.WithLabelValues("web", "static", "2xx").Add(1)
	m.UpErrors.WithLabelValues("web", "static", "timeout").Add(3)
	m.UpErrors.WithLabelValues("web", "api", "refused").Add(1)
	m.UpErrors.WithLabelValues("web", "api", "reset") // zero: not listed
	src := newSource()
	src.listeners = []admin.Listener{
		{Config: &config.Listener{Name: "web", Protocol: config.ProtocolHTTP}, Addr: "127.0.0.1:80", Conns: connListener(t, 4, 0)},
		{Config: &config.Listener{Name: "raw", Protocol: config.ProtocolTCP}, Addr: "127.0.0.1:81", Conns: connListener(t, 4, 0)},
	}
	s, err := admin.Start(admin.Config{Addr: "127.0.0.1:0", Source: src, Metrics: m, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f := nextFrame(t, s, func(f livepage.Frame) bool { return len(f.Listeners) == 2 })
	web, raw := f.Listeners[0], f.Listeners[1]
	if raw.Requests != nil {
		t.Errorf("tcp listener's requests: %+v, want none", raw.Requests)
	}
	if web.Requests == nil || web.Requests.Total != 8 {
		t.Fatalf("web's requests: %+v, want 8 in all", web.Requests)
	}
	var classes []string
	for _, c := range web.Requests.Classes {
		classes = append(classes, c.Name+"="+strconv.FormatUint(c.Count, 10))
	}
	if got, want := strings.Join(classes, " "), "1xx=0 2xx=6 3xx=0 4xx=2 499=0 5xx=0"; got != want {
		t.Errorf("web's classes: %s, want %s", got, want)
	}
	var up []string
	for _, u := range f.Upstream {
		up = append(up, u.ID+"="+strconv.FormatUint(u.Count, 10))
	}
	if got, want := strings.Join(up, " "), "web/api/refused=1 web/static/timeout=3"; got != want {
		t.Errorf("upstream errors: %s, want %s", got, want)
	}
}
