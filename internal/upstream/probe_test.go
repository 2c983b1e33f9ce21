package upstream

import (
	"context"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t testing.TB) (client, server *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// idleCases are the states an idle connection can be found in, each made
// on a socket by the server's end and on a memConn by its server side.
var idleCases = []struct {
	name   string
	want   idleState
	socket func(s *net.TCPConn)
	mem    func(c *memConn)
}{
	{"nothing", idleOpen, func(*net.TCPConn) {}, func(*memConn) {}},
	{"stray bytes", idleUnsolicited,
		func(s *net.TCPConn) { io.WriteString(s, "HTTP/1.1 200 OK\r\n") },
		func(c *memConn) { c.srvWrite([]byte("HTTP/1.1 200 OK\r\n"), memWrite{}) }},
	{"one byte", idleUnsolicited,
		func(s *net.TCPConn) { io.WriteString(s, "x") },
		func(c *memConn) { c.srvWrite([]byte("x"), memWrite{}) }},
	{"408 then close", idleClosed,
		func(s *net.TCPConn) { io.WriteString(s, "HTTP/1.1 408 Request Timeout\r\n\r\n"); s.Close() },
		func(c *memConn) { c.srvWrite([]byte("HTTP/1.1 408 Request Timeout\r\n\r\n"), memWrite{}); c.srvClose() }},
	{"408, HTTP/1.0", idleClosed,
		func(s *net.TCPConn) { io.WriteString(s, "HTTP/1.0 408 Request Timeout\r\n\r\n") },
		func(c *memConn) { c.srvWrite([]byte("HTTP/1.0 408 Request Timeout\r\n\r\n"), memWrite{}) }},
	{"409 then close", idleUnsolicited,
		func(s *net.TCPConn) { io.WriteString(s, "HTTP/1.1 409 Conflict\r\n\r\n"); s.Close() },
		func(c *memConn) { c.srvWrite([]byte("HTTP/1.1 409 Conflict\r\n\r\n"), memWrite{}); c.srvClose() }},
	{"close", idleClosed,
		func(s *net.TCPConn) { s.Close() },
		func(c *memConn) { c.srvClose() }},
	{"reset", idleClosed,
		func(s *net.TCPConn) { s.SetLinger(0); s.Close() },
		func(c *memConn) { c.srvReset() }},
}

// TestIdleProbe checks the socket check on loopback TCP against each
// state, and the memConn's check, which the reuse fuzz target relies on,
// against the socket's.
func TestIdleProbe(t *testing.T) {
	if !canProbeSockets {
		t.Skip("no socket check on this system")
	}
	for _, tc := range idleCases {
		t.Run(tc.name, func(t *testing.T) {
			client, server := tcpPair(t)
			p := newSocketProber(client)
			if p == nil {
				t.Fatal("no prober for a TCP connection")
			}
			tc.socket(server)
			got := p.probeIdle()
			// Delivery on loopback is all but immediate; allow for a busy
			// machine before calling the state wrong.
			for deadline := time.Now().Add(5 * time.Second); got == idleOpen && tc.want != idleOpen && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
				got = p.probeIdle()
			}
			if got != tc.want {
				t.Fatalf("socket check: %d, want %d", got, tc.want)
			}
			if got := p.probeIdle(); got != tc.want {
				t.Fatalf("second socket check: %d, want %d: the check consumed something", got, tc.want)
			}

			n := newMemNet()
			nc, _ := n.dial(t.Context(), "tcp", "x")
			c := nc.(*memConn)
			n.mu.Lock()
			tc.mem(c)
			n.mu.Unlock()
			if got := c.probeIdle(); got != tc.want {
				t.Fatalf("memConn check: %d, want %d as on a socket", got, tc.want)
			}
		})
	}
}

// TestUncheckableConnNotKept gives the Transport connections that are not
// sockets and have no check of their own: none is ever kept idle.
func TestUncheckableConnNotKept(t *testing.T) {
	srv := newRawServer(t, serveFixed("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 0))
	var d net.Dialer
	tr := newTransport(t, Config{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		return struct{ net.Conn }{c}, err // hides SyscallConn
	}})
	for range 3 {
		resp, err := get(t, tr, srv.url())
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
	}
	if s := tr.Stats(); s.Dials != 3 || s.Idle != 0 {
		t.Fatalf("stats %+v, want 3 dials and nothing idle", s)
	}
}

// BenchmarkIdleProbe measures the check a request makes on the idle
// connection it takes ("control", what the Transport does) against the
// same peek through RawConn.Read, on an open loopback connection.
func BenchmarkIdleProbe(b *testing.B) {
	client, _ := tcpPair(b)
	b.Run("control", func(b *testing.B) {
		p := newSocketProber(client)
		b.ReportAllocs()
		for b.Loop() {
			if p.probeIdle() != idleOpen {
				b.Fatal("not open")
			}
		}
	})
	b.Run("read", func(b *testing.B) {
		p := newSocketProber(client).(*socketProber)
		peek := func(fd uintptr) bool { p.peek(fd); return true }
		b.ReportAllocs()
		for b.Loop() {
			p.raw.Read(peek)
			if p.err != syscall.EAGAIN {
				b.Fatal("not open")
			}
		}
	})
}
