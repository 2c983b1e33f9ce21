package daemon_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/daemon"
)

// A configuration file naming a retired HTTP/1.x server (lean, fast) starts
// the listener in the eventloop mode, the default, and the daemon logs a
// WARN naming the listener, the old value and what it now means, at start
// and again on a reload that names one; the listener serves throughout.
func TestRetiredHTTP1ServerRunsEventLoop(t *testing.T) {
	b := startBackend(t)
	text := func(server string) *config.Config {
		t.Helper()
		cfg, err := config.Parse("p.yaml", []byte(`
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    http1_server: `+server+`
    routes: [{upstreams: ["`+b.URL()+`"]}]
`))
		if err != nil {
			t.Fatalf("config: %v", err)
		}
		return cfg
	}
	var logs syncBuffer
	srv, err := daemon.Start(text("lean"), daemon.Options{LogOutput: &logs})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	warned := func(old string) int {
		n := 0
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, "level=WARN") && strings.Contains(line, "listener=web") &&
				strings.Contains(line, "setting=http1_server") &&
				strings.Contains(line, old+" is no longer a mode and now means eventloop, the default") {
				n++
			}
		}
		return n
	}
	check := func(when string) {
		t.Helper()
		if got := daemon.HTTP1ServerOf(srv, "web"); got != config.HTTP1ServerEventLoop {
			t.Errorf("%s: served by %q, want eventloop", when, got)
		}
		res, err := http.Get("http://" + srv.Addr("web").String() + "/")
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Errorf("%s: status %d, want 200", when, res.StatusCode)
		}
	}
	check("at start")
	if n := warned("lean"); n != 1 {
		t.Errorf("at start: %d warnings about lean, want 1; logs:\n%s", n, logs.String())
	}
	cfg := text("fast")
	cfg.Listeners[0].Listen = srv.Addr("web").String()
	if err := srv.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	check("after a reload")
	if n := warned("fast"); n != 1 {
		t.Errorf("after a reload: %d warnings about fast, want 1; logs:\n%s", n, logs.String())
	}
}
