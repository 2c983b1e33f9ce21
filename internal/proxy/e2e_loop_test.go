package proxy_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/evloop"
	"github.com/seed-a07d1050/portcullis/internal/proxy"
)

// TestLoopPanicGivesEverythingBack makes the event loops' exchange panic
// once its permits are taken, and again as it is about to write its
// answer: the client's connection ends, every permit comes back, and the
// daemon goes on serving, on the loops, as the server does after a
// handler's panic.
func TestLoopPanicGivesEverythingBack(t *testing.T) {
	for _, step := range []string{"begin", "reply"} {
		t.Run(step, func(t *testing.T) {
			restore := proxy.SetLoopPanicHook(func(s string, r *http.Request) {
				if s == step && r.URL.Path == "/boom" {
					panic("test: panic in the loop's " + s)
				}
			})
			defer restore()
			b := startRawBackend(t, map[string]string{
				"/boom": leanAnswers["/simple"], "/simple": leanAnswers["/simple"],
			})
			cfg := parseConfig(t, leanDiffConfig, "http://"+b.ln.Addr().String())
			cfg.Listeners[0].HTTP1Server = config.HTTP1ServerEventLoop
			srv := startQuiet(t, cfg)
			addr := srv.Addr("web").String()

			bad := dialFrom(t, "127.0.0.2", addr)
			defer bad.Close()
			_ = bad.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.WriteString(bad, "GET /boom HTTP/1.1\r\nHost: app.test\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			if n, err := bad.Read(make([]byte, 1)); err == nil {
				t.Fatalf("the connection whose exchange panicked read %d bytes, want its end", n)
			}
			if !waitUntil(func() bool { return srv.Snapshot().InUse() == 0 }) {
				t.Fatalf("after the panic, held: %+v", srv.Snapshot())
			}

			good := dialFrom(t, "127.0.0.2", addr)
			defer good.Close()
			_ = good.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.WriteString(good, "GET /simple HTTP/1.1\r\nHost: app.test\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(good), nil)
			if err != nil {
				t.Fatalf("a request after the panic: %v", err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("a request after the panic: status %d, want 200", resp.StatusCode)
			}
			good.Close()
			if !waitUntil(func() bool { return srv.Snapshot().InUse() == 0 }) {
				t.Errorf("at the end, held: %+v", srv.Snapshot())
			}
		})
	}
}

// TestLoopsTakeOnlyWhatTheyCanServe runs the default server (eventloop)
// on a listener whose only route the loops can serve, and on one whose
// only route has a rate limit (which the lean path does not take): the
// first listener's loops take the connection and hold it after its
// answers; the second's never take one (which would only be given back
// at its first request), its server serving it from the start.
func TestLoopsTakeOnlyWhatTheyCanServe(t *testing.T) {
	if !evloop.Supported() {
		t.Skip("no event loops on this system: eventloop serves as lean")
	}
	cases := []struct {
		name  string
		route string
		held  int // and adopted
	}{
		{"plain route", "", 1},
		{"rate-limited route", "        rate: {rate: 1000r/s, burst: 1000}\n", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := startRawBackend(t, map[string]string{"/simple": leanAnswers["/simple"]})
			cfg, err := config.Parse("test.yaml", []byte(strings.ReplaceAll(leanDiffConfig+tc.route,
				"{{backend}}", "http://"+b.ln.Addr().String())))
			if err != nil {
				t.Fatal(err)
			}
			srv := startQuiet(t, cfg)
			if got := proxy.HTTP1ServerOf(srv, "web"); got != config.HTTP1ServerEventLoop {
				t.Fatalf("default HTTP/1.1 server %q, want eventloop", got)
			}
			c := dialFrom(t, "127.0.0.2", srv.Addr("web").String())
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			br := bufio.NewReader(c)
			for i := range 2 {
				if _, err := io.WriteString(c, "GET /simple HTTP/1.1\r\nHost: app.test\r\n\r\n"); err != nil {
					t.Fatal(err)
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("request %d: %v", i+1, err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("request %d: status %d, want 200", i+1, resp.StatusCode)
				}
			}
			if held, adopted := proxy.LoopConnsOf(srv, "web"); held != tc.held || adopted != uint64(tc.held) {
				t.Errorf("after the answers the loops hold %d connections and took %d, want %d and %d",
					held, adopted, tc.held, tc.held)
			}
			c.Close()
			loopsEmpty := func() bool { held, _ := proxy.LoopConnsOf(srv, "web"); return held == 0 }
			if !waitUntil(func() bool { return loopsEmpty() && srv.Snapshot().InUse() == 0 }) {
				t.Errorf("after the client left: loops empty %v, held %+v", loopsEmpty(), srv.Snapshot())
			}
		})
	}
}

// startQuiet starts cfg's daemon, its logs discarded, and shuts it down
// when t ends.
func startQuiet(t *testing.T, cfg *config.Config) *proxy.Server {
	t.Helper()
	srv, err := proxy.Start(cfg, proxy.Options{LogOutput: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return srv
}
