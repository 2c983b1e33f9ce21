package floorproxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/backend"
)

// startBackend starts a backend that answers after delay and a listener
// for a floor in front of it, both closed when t ends (the listener
// perhaps twice), and returns the backend's address and the listener.
func startBackend(t *testing.T, delay time.Duration) (string, net.Listener) {
	t.Helper()
	be, err := backend.StartConfig("127.0.0.1:0", backend.Config{Delay: delay})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return be.Addr(), ln
}

func startFloor(t *testing.T, probe bool) string {
	t.Helper()
	upstream, ln := startBackend(t, 0)
	done := make(chan struct{})
	go func() { _ = Serve(ln, upstream, probe); close(done) }()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

// TestRelaysKeepAliveRequests: several requests on one connection each get
// the backend's whole answer.
func TestRelaysKeepAliveRequests(t *testing.T) {
	for _, probe := range []bool{false, true} {
		t.Run(fmt.Sprintf("probe=%v", probe), func(t *testing.T) {
			getWhole(t, startFloor(t, probe), "GET / HTTP/1.1\r\nHost: floor.test\r\n\r\n", 3)
		})
	}
}

// getWhole sends req count times on one connection to addr and fails t
// unless each gets a 200 with its whole, non-empty body.
func getWhole(t *testing.T, addr, req string, count int) {
	t.Helper()
	c := dialFor(t, addr)
	defer c.Close()
	br := bufio.NewReader(c)
	for i := range count {
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 || int64(len(body)) != resp.ContentLength || len(body) == 0 {
			t.Fatalf("request %d: %d, %d of %d body bytes, %v", i, resp.StatusCode, len(body), resp.ContentLength, err)
		}
	}
}

// TestClosesOnWhatItDoesNotRelay: a request with a body is not relayed;
// the connection is closed instead.
func TestClosesOnWhatItDoesNotRelay(t *testing.T) {
	expectClosed(t, startFloor(t, false), "POST / HTTP/1.1\r\nHost: floor.test\r\nContent-Length: 2\r\n\r\nhi")
}

// dialFor dials addr with a deadline of 10 s on the connection.
func dialFor(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

// expectClosed sends req on a new connection to addr and fails t unless
// the connection is closed without an answer.
func expectClosed(t *testing.T, addr, req string) {
	t.Helper()
	c := dialFor(t, addr)
	defer c.Close()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(c); err != nil || len(got) != 0 {
		t.Errorf("%q: read %q, %v; want the connection closed without an answer", req, got, err)
	}
}

func TestContentLength(t *testing.T) {
	for _, tc := range []struct {
		head string
		want int
		ok   bool
	}{
		{"HTTP/1.1 200 OK\r\nContent-Length: 12", 12, true},
		{"HTTP/1.1 200 OK\r\ncontent-length:  0 ", 0, true},
		{"HTTP/1.1 200 OK\r\nContent-Type: text/plain", 0, false},
		{"HTTP/1.1 200 OK\r\nContent-Length: x", 0, false},
		{"HTTP/1.1 200 OK\r\nContent-Length: -1", 0, false},
	} {
		n, err := contentLength([]byte(tc.head))
		if (err == nil) != tc.ok || n != tc.want {
			t.Errorf("contentLength(%q) = %d, %v", strings.ReplaceAll(tc.head, "\r\n", " | "), n, err)
		}
	}
}
