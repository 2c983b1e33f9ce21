package admin_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a07d1050/portcullis/connlimit"
	"github.com/seed-a07d1050/portcullis/internal/admin"
	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/livepage"
	"github.com/seed-a07d1050/portcullis/internal/waitfor"
)

const (
	token      = "0123456789abcdef0123456789abcdef"
	tokenLater = "fedcba9876543210fedcba9876543210"
)

// source is a daemon as the admin listener reads it, set by each test.
type source struct {
	mu        sync.Mutex
	listeners []admin.Listener
	ready     bool
	why       string
	degraded  []string
	counter   prometheus.Counter
}

var _ admin.Source = (*source)(nil)

func newSource() *source {
	return &source{ready: true, why: "ready", counter: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "portcullis_test_source_total", Help: "A counter the test source exports.",
	})}
}

func (s *source) Listeners() []admin.Listener {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listeners
}

func (s *source) Collect(ch chan<- prometheus.Metric) { s.counter.Collect(ch) }

func (s *source) Ready() (bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready, s.why
}

func (s *source) Degraded() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.degraded
}

func (s *source) Redis(context.Context) *livepage.Redis { return nil }

// startAdmin starts an admin listener on loopback reading src, with auth
// as the token in force, and closes it at the end of the test.
func startAdmin(t *testing.T, src admin.Source, auth *atomic.Pointer[admin.Auth]) *admin.Server {
	t.Helper()
	s, err := admin.Start(admin.Config{Addr: "127.0.0.1:0", Source: src, Auth: auth, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// authOf loads tok the way the daemon does, from a token file.
func authOf(t *testing.T, tok string) *admin.Auth {
	t.Helper()
	file := filepath.Join(t.TempDir(), "admin.token")
	if err := os.WriteFile(file, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := admin.LoadAuth(config.Admin{TokenFile: file})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// client is an HTTP client that does not follow redirects, with a time
// limit on every request.
var client = &http.Client{
	Timeout:       10 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// do sends req and returns the response with its body read.
func do(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: body: %v", req.Method, req.URL.Path, err)
	}
	return resp, string(body)
}

// get sends GET path to s with the given headers (name, value pairs).
func get(t *testing.T, s *admin.Server, path string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+s.Addr().String()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return do(t, req)
}

// connListener is a connlimit.Listener on loopback with n connections
// from 127.0.0.1 accepted and held; they are closed at the end of the
// test, when the counts are checked back to zero.
func connListener(t *testing.T, permits, n int) *connlimit.Listener {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := connlimit.NewListener(raw, connlimit.Config{Policy: connlimit.Policy{Permits: permits}})
	if err != nil {
		_ = raw.Close()
		t.Fatal(err)
	}
	var held []net.Conn
	t.Cleanup(func() {
		for _, c := range held {
			_ = c.Close()
		}
		_ = ln.Close()
		if !waitfor.Until(10*time.Second, func() bool { return ln.Stats().Open == 0 }) {
			t.Errorf("connections still open after the test: %+v", ln.Stats())
		}
	})
	for range n {
		c, err := net.DialTimeout("tcp", raw.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		a, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, a)
	}
	return ln
}
