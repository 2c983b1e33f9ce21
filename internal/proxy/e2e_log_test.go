package proxy_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/proxy"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestAccessLogAndJSONLogs(t *testing.T) { bothServers(t, testAccessLogAndJSONLogs) }

func testAccessLogAndJSONLogs(t *testing.T) {
	b := startBackend(t)
	cfg := parseConfig(t, `
log: {format: json, level: info, access_log: true}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - upstreams: ["{{backend}}"]
`, b.URL())
	var out syncBuffer
	srv, err := proxy.Start(cfg, proxy.Options{LogOutput: &out})
	if err != nil {
		t.Fatal(err)
	}
	c := clientFrom("127.0.0.2")
	if st, _, _ := get(t, c, "http://"+srv.Addr("web").String()+"/teapot?ms=1"); st != http.StatusOK {
		t.Fatalf("status %d", st)
	}
	c.CloseIdleConnections()
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	var access string
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Contains(line, `"msg":"access"`) {
			access = line
		}
	}
	for _, want := range []string{`"path":"/teapot"`, `"status":200`, `"client":"127.0.0.2:`, `"listener":"web"`} {
		if !strings.Contains(access, want) {
			t.Errorf("access line lacks %s: %q", want, access)
		}
	}
	if !strings.HasPrefix(strings.TrimSpace(out.String()), "{") {
		t.Errorf("log is not JSON: %q", out.String())
	}
}
