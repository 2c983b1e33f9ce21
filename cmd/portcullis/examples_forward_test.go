package main

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/backend"
	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/daemon"
)

// TestExampleForwardConfig loads examples/forward.yaml as `portcullis run
// --config` would, starts it on free ports, and uses it with the user it
// ships with: loopback (let through for the test only) is reached, the
// metadata service is refused, a client without credentials gets 407.
func TestExampleForwardConfig(t *testing.T) {
	cfg, err := config.Load("../../examples/forward.yaml")
	if err != nil {
		t.Fatal(err)
	}
	l := &cfg.Listeners[0]
	l.Listen, cfg.Admin.Listen = "127.0.0.1:0", "127.0.0.1:0"
	l.Forward.Destinations.Allow = append(l.Forward.Destinations.Allow, netip.MustParsePrefix("127.0.0.0/8"))
	srv, err := daemon.Start(cfg, daemon.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	b, err := backend.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	addr := srv.Addr("egress").String()
	demo := viaProxy(addr, "demo", "demo-password")
	// The example's hash has bcrypt's cost 10, as users should make theirs:
	// under the race detector on a busy machine, its one check takes
	// seconds.
	demo.Timeout = time.Minute
	if st := status(t, demo, b.URL()+"/"); st != http.StatusOK {
		t.Fatalf("the example's user: %d", st)
	}
	if st := status(t, viaProxy(addr, "", ""), b.URL()+"/"); st != http.StatusProxyAuthRequired {
		t.Fatalf("without credentials: %d, want 407", st)
	}
	c, err := net.DialTimeout("tcp", addr, waitLimit)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(waitLimit))
	_, _ = io.WriteString(c, "CONNECT 169.254.169.254:443 HTTP/1.1\r\nHost: 169.254.169.254:443\r\nProxy-Authorization: Basic ZGVtbzpkZW1vLXBhc3N3b3Jk\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "cloud metadata service") {
		t.Fatalf("CONNECT to the metadata service: %d %s", resp.StatusCode, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	_ = srv.Shutdown(ctx)
}
