package http1

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// serve starts srv on a loopback listener and returns its address; the
// server is closed when the test ends.
func serve(t *testing.T, srv *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return after Close")
		}
	})
	return ln.Addr().String()
}

// dial connects to addr with a 10 s deadline on everything, so that no
// test can hang.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// roundTrip writes raw on c and reads one response.
func roundTrip(t *testing.T, c net.Conn, br *bufio.Reader, raw, method string) (*http.Response, string) {
	t.Helper()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	return readResponse(t, br, method)
}

func readResponse(t *testing.T, br *bufio.Reader, method string) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read response body: %v", err)
	}
	return resp, string(b)
}

// waitClosed reads from c until EOF or an error and returns what it read
// and how long that took; it fails the test after limit.
func waitClosed(t *testing.T, c net.Conn, limit time.Duration) (string, time.Duration) {
	t.Helper()
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(limit))
	b, err := io.ReadAll(c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("connection still open after %v (read %q)", limit, b)
	}
	return string(b), time.Since(start)
}

// plainConn hides every method of a connection but net.Conn's, so that
// the server finds no socket under it and watches for the client going
// away with a background read.
type plainConn struct{ net.Conn }

// plainListener hands out plainConns.
type plainListener struct{ net.Listener }

func (l plainListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return plainConn{c}, nil
}

// servePlain is serve over a plainListener.
func servePlain(t *testing.T, srv *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(plainListener{ln}) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

const get = "GET / HTTP/1.1\r\nHost: x\r\n\r\n"

func getPath(p string) string { return "GET " + p + " HTTP/1.1\r\nHost: x\r\n\r\n" }

// leave makes the client of c go away as how says: "close", "reset" (a
// close with linger 0) or "half-close" (a shutdown of its sending side).
func leave(c net.Conn, how string) {
	switch how {
	case "close":
		_ = c.Close()
	case "reset":
		_ = c.(*net.TCPConn).SetLinger(0)
		_ = c.Close()
	case "half-close":
		_ = c.(*net.TCPConn).CloseWrite()
	}
}
