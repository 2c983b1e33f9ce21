package daemon_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/daemon"
)

// TestCutShortBodyRelayedWhole has an upstream declare a body longer than
// it sends and close, and checks on every HTTP/1.1 server that the client
// receives the head and every byte the upstream sent, then the end of the
// connection, which tells it the answer is incomplete, and that nothing
// stays held. The fast and lean paths once sent only what had filled
// their write buffer (nothing at all of a body under 4 KiB, the head
// included) while the event loops sent everything, as nginx does.
func TestCutShortBodyRelayedWhole(t *testing.T) {
	const declared = 140000
	sizes := []int{0, 100, 4000, 5000, 36797, 70000}
	for _, server := range []config.HTTP1Server{config.HTTP1ServerFast, config.HTTP1ServerLean, config.HTTP1ServerEventLoop} {
		t.Run(string(server), func(t *testing.T) {
			b := startFuzzBackend(t)
			cfg := parseConfig(t, leanDiffConfig, "http://"+b.ln.Addr().String())
			cfg.Listeners[0].HTTP1Server = server
			srv, err := daemon.Start(cfg, daemon.Options{LogOutput: io.Discard})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			for _, size := range sizes {
				body := strings.Repeat("0123456789", size/10+1)[:size]
				answer := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s", declared, body)
				b.answer.Store(&answer)
				got := readToEnd(t, srv.Addr("web").String(), "GET /f HTTP/1.1\r\nHost: app.test\r\n\r\n")
				head, rest, ok := bytes.Cut(got, []byte("\r\n\r\n"))
				if !ok {
					t.Errorf("%d of %d bytes: no head reached the client: %q", size, declared, got)
					continue
				}
				if !bytes.Contains(head, []byte(fmt.Sprintf("Content-Length: %d", declared))) {
					t.Errorf("%d of %d bytes: head %q does not declare the upstream's length", size, declared, head)
				}
				if string(rest) != body {
					t.Errorf("%d of %d bytes: the client received %d bytes of body", size, declared, len(rest))
				}
			}
			if !waitUntil(func() bool { return srv.Snapshot().InUse() == 0 }) {
				t.Errorf("permits or connections still held: %+v", srv.Snapshot())
			}
		})
	}
}

// readToEnd sends request on a new connection to addr and returns every
// byte received until the server ends the connection; it fails t when the
// connection is not ended within 3 s.
func readToEnd(t *testing.T, addr, request string) []byte {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("reading to the end of the connection: %v (after %d bytes)", err, len(got))
	}
	return got
}
