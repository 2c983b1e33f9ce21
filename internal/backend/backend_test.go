package backend_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/net/websocket"

	"github.com/seed-a07d1050/portcullis/internal/backend"
	"github.com/seed-a07d1050/portcullis/internal/waitfor"
)

func startServer(t *testing.T, cfg backend.Config) *backend.Server {
	t.Helper()
	s, err := backend.StartConfig("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatalf("StartConfig: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

var client = &http.Client{Timeout: 5 * time.Second}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading body: %v", url, err)
	}
	return resp.StatusCode, string(body)
}

func TestPaths(t *testing.T) {
	s := startServer(t, backend.Config{MaxSlow: time.Second, MaxBytes: 1 << 20})
	tests := []struct {
		name     string
		path     string
		status   int
		body     string // exact, unless bodyLen is set
		contains string
		bodyLen  int
	}{
		{name: "hello", path: "/", status: 200, body: backend.HelloBody},
		{name: "hello with query", path: "/?x=1", status: 200, body: backend.HelloBody},
		{name: "unknown path", path: "/nope", status: 404, contains: "404"},
		{name: "slow zero", path: "/slow?ms=0", status: 200, body: "slept 0 ms\n"},
		{name: "slow short", path: "/slow?ms=20", status: 200, body: "slept 20 ms\n"},
		{name: "slow at bound", path: "/slow?ms=1000", status: 200, body: "slept 1000 ms\n"},
		{name: "slow missing ms", path: "/slow", status: 400, contains: "missing"},
		{name: "slow not a number", path: "/slow?ms=abc", status: 400, contains: "[0, 1000]"},
		{name: "slow negative", path: "/slow?ms=-1", status: 400, contains: "[0, 1000]"},
		{name: "slow over bound", path: "/slow?ms=1001", status: 400, contains: "[0, 1000]"},
		{name: "bytes zero", path: "/bytes?n=0", status: 200, bodyLen: 0},
		{name: "bytes one", path: "/bytes?n=1", status: 200, body: "a"},
		{name: "bytes several chunks", path: "/bytes?n=100000", status: 200, bodyLen: 100000},
		{name: "bytes at bound", path: "/bytes?n=1048576", status: 200, bodyLen: 1 << 20},
		{name: "bytes over bound", path: "/bytes?n=1048577", status: 400, contains: "[0, 1048576]"},
		{name: "bytes overflow", path: "/bytes?n=99999999999999999999", status: 400, contains: "[0, 1048576]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, body := get(t, s.URL()+tc.path)
			if status != tc.status {
				t.Fatalf("status = %d, want %d (body %q)", status, tc.status, body)
			}
			switch {
			case tc.body != "":
				if body != tc.body {
					t.Errorf("body = %q, want %q", body, tc.body)
				}
			case tc.contains != "":
				if !strings.Contains(body, tc.contains) {
					t.Errorf("body = %q, want it to contain %q", body, tc.contains)
				}
			default:
				if len(body) != tc.bodyLen {
					t.Errorf("body length = %d, want %d", len(body), tc.bodyLen)
				}
				for i := range len(body) {
					if want := byte('a' + i%(32<<10)%26); body[i] != want {
						t.Fatalf("body[%d] = %q, want %q", i, body[i], want)
					}
				}
			}
		})
	}
	if got := s.Handler().Requests(); got != uint64(len(tests)) {
		t.Errorf("Requests() = %d, want %d", got, len(tests))
	}
}

// TestDelayAndSlowTiming runs the handler in a synctest bubble, so the waits
// are exact in fake time.
func TestDelayAndSlowTiming(t *testing.T) {
	tests := []struct {
		name  string
		delay time.Duration
		path  string
		want  time.Duration
	}{
		{name: "no delay", path: "/", want: 0},
		{name: "2ms delay", delay: 2 * time.Millisecond, path: "/", want: 2 * time.Millisecond},
		{name: "slow", path: "/slow?ms=250", want: 250 * time.Millisecond},
		{name: "delay plus slow", delay: 2 * time.Millisecond, path: "/slow?ms=250", want: 252 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h, err := backend.New(backend.Config{Delay: tc.delay})
				if err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest("GET", tc.path, nil))
				if got := time.Since(start); got != tc.want {
					t.Errorf("took %v, want %v", got, tc.want)
				}
				if rec.Code != 200 {
					t.Errorf("status = %d, want 200", rec.Code)
				}
			})
		})
	}
}

// TestContextEndsWait checks that /slow and the delay stop waiting when the
// client goes away, and then write nothing.
func TestContextEndsWait(t *testing.T) {
	tests := []struct {
		name  string
		delay time.Duration
		path  string
	}{
		{name: "slow", path: "/slow?ms=60000"},
		{name: "delay", delay: time.Hour, path: "/"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h, err := backend.New(backend.Config{Delay: tc.delay})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
				defer cancel()
				start := time.Now()
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest("GET", tc.path, nil).WithContext(ctx))
				if got := time.Since(start); got != 100*time.Millisecond {
					t.Errorf("returned after %v, want 100ms", got)
				}
				if rec.Body.Len() != 0 {
					t.Errorf("wrote %q after the client left", rec.Body.String())
				}
				if h.InFlight() != 0 {
					t.Errorf("InFlight() = %d, want 0", h.InFlight())
				}
			})
		})
	}
}

func TestSlowReleasedWhenClientLeaves(t *testing.T) {
	s := startServer(t, backend.Config{})
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", s.URL()+"/slow?ms=60000", nil)
	if _, err := client.Do(req); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do = %v, want a deadline error", err)
	}
	waitfor.Within(t, 2*time.Second, "no request in flight", func() bool { return s.Handler().InFlight() == 0 })
}

func TestWebSocketEcho(t *testing.T) {
	s := startServer(t, backend.Config{Delay: time.Millisecond})
	ws := dialWS(t, s)
	defer ws.Close()
	for _, msg := range []string{"ping", "second message", strings.Repeat("x", 3000)} {
		if err := websocket.Message.Send(ws, msg); err != nil {
			t.Fatalf("Send: %v", err)
		}
		var got string
		if err := websocket.Message.Receive(ws, &got); err != nil {
			t.Fatalf("Receive: %v", err)
		}
		if got != msg {
			t.Fatalf("echo = %q, want %q", got, msg)
		}
	}
	if n := s.Handler().InFlight(); n != 1 {
		t.Errorf("InFlight() with an open WebSocket = %d, want 1", n)
	}
	ws.Close()
	waitfor.Within(t, 2*time.Second, "no request in flight", func() bool { return s.Handler().InFlight() == 0 })
}

func TestWebSocketNeedsHijack(t *testing.T) {
	h, err := backend.New(backend.Config{})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder() // not an http.Hijacker, like an HTTP/2 stream
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/ws", nil))
	if rec.Code != http.StatusHTTPVersionNotSupported {
		t.Errorf("status = %d, want 505", rec.Code)
	}
}

func TestWebSocketWithoutUpgrade(t *testing.T) {
	s := startServer(t, backend.Config{})
	status, _ := get(t, s.URL()+"/ws")
	if status != http.StatusBadRequest {
		t.Errorf("plain GET /ws: status = %d, want 400", status)
	}
}

// TestCloseEndsEverything holds a slow request and a WebSocket open, closes
// the server, and checks that both end and nothing is left running.
func TestCloseEndsEverything(t *testing.T) {
	s, err := backend.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ws := dialWS(t, s)
	defer ws.Close()
	slowDone := make(chan error, 1)
	go func() {
		resp, err := client.Get(s.URL() + "/slow?ms=60000")
		if err == nil {
			resp.Body.Close()
		}
		slowDone <- err
	}()
	waitfor.Within(t, 2*time.Second, "two requests in flight", func() bool { return s.Handler().InFlight() == 2 })

	start := time.Now()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Close took %v", took)
	}
	if n := s.Handler().InFlight(); n != 0 {
		t.Errorf("InFlight() after Close = %d, want 0", n)
	}
	select {
	case err := <-slowDone:
		if err == nil {
			t.Error("slow request succeeded across Close")
		}
	case <-time.After(2 * time.Second):
		t.Fatal("slow request still waiting 2s after Close")
	}
	var msg string
	_ = ws.SetReadDeadline(time.Now().Add(2 * time.Second))
	if err := websocket.Message.Receive(ws, &msg); err == nil || isTimeout(err) {
		t.Errorf("WebSocket read after Close = %v, want the connection closed", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
	if _, err := net.DialTimeout("tcp", s.Addr(), time.Second); err == nil {
		t.Error("listener still accepts after Close")
	}
}

func TestInvalidConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  backend.Config
	}{
		{name: "negative delay", cfg: backend.Config{Delay: -1}},
		{name: "negative max slow", cfg: backend.Config{MaxSlow: -time.Second}},
		{name: "negative max bytes", cfg: backend.Config{MaxBytes: -1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := backend.New(tc.cfg); !errors.Is(err, backend.ErrInvalidConfig) {
				t.Errorf("New = %v, want ErrInvalidConfig", err)
			}
			if _, err := backend.StartConfig("127.0.0.1:0", tc.cfg); !errors.Is(err, backend.ErrInvalidConfig) {
				t.Errorf("StartConfig = %v, want ErrInvalidConfig", err)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := backend.Serve(ln, tc.cfg); !errors.Is(err, backend.ErrInvalidConfig) {
				t.Errorf("Serve = %v, want ErrInvalidConfig", err)
			}
			if _, err := ln.Accept(); err == nil {
				t.Error("Serve left the listener open after a config error")
			}
		})
	}
}

func TestStartBadAddress(t *testing.T) {
	if _, err := backend.Start("256.0.0.1:0"); err == nil || !strings.HasPrefix(err.Error(), "backend: listen:") {
		t.Errorf("Start(bad address) = %v, want a backend: listen error", err)
	}
}

func dialWS(t *testing.T, s *backend.Server) *websocket.Conn {
	t.Helper()
	cfg, err := websocket.NewConfig("ws://"+s.Addr()+"/ws", "http://localhost/")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Dialer = &net.Dialer{Timeout: 2 * time.Second}
	ws, err := websocket.DialConfig(cfg)
	if err != nil {
		t.Fatalf("websocket dial: %v", err)
	}
	return ws
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
