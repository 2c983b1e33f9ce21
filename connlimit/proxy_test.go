package connlimit

import (
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/proxyproto"
)

func proxyHeader(t testing.TB, version int, src, dst string) []byte {
	t.Helper()
	h := proxyproto.Header{Command: proxyproto.Proxy, Transport: proxyproto.Stream,
		Source: netip.MustParseAddrPort(src), Destination: netip.MustParseAddrPort(dst)}
	var b []byte
	var err error
	if version == 1 {
		b, err = h.AppendV1(nil)
	} else {
		b, err = h.AppendV2(nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// acceptOne returns the next connection l admits, failing after waitTimeout.
func acceptOne(t testing.TB, l *Listener) *Conn {
	t.Helper()
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := l.Accept()
		ch <- result{c, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("Accept: %v", r.err)
		}
		t.Cleanup(func() { r.c.Close() })
		return r.c.(*Conn)
	case <-time.After(waitTimeout):
		t.Fatal("Accept returned nothing")
		return nil
	}
}

func readN(t testing.TB, c net.Conn, n int) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(waitTimeout))
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("read %d bytes: %v", n, err)
	}
	return string(b)
}

func TestProxyProtocolKeying(t *testing.T) {
	l := newTestListener(t, nil, Config{Policy: Policy{Permits: 1}, Trusted: mustProxySet("127.0.0.5"), ProxyProtocol: true})
	tests := []struct {
		name    string
		src     string
		payload []byte
		key     string
		remote  string
		exempt  bool
	}{
		{"v1 names an IPv4 client", "127.0.0.5", proxyHeader(t, 1, "192.0.2.7:1234", "198.51.100.1:443"), "192.0.2.7", "192.0.2.7:1234", false},
		{"v2 names an IPv6 client", "127.0.0.5", proxyHeader(t, 2, "[2001:db8:1:2::7]:1234", "[2001:db8::1]:443"), "2001:db8:1:2::/64", "[2001:db8:1:2::7]:1234", false},
		{"v2 LOCAL is the proxy's own", "127.0.0.5", []byte("\r\n\r\n\x00\r\nQUIT\n\x20\x00\x00\x00"), "127.0.0.5", "", true},
		{"v1 UNKNOWN is the proxy's own", "127.0.0.5", []byte("PROXY UNKNOWN\r\n"), "127.0.0.5", "", true},
		{"untrusted peer's header is data", "127.0.0.6", nil, "127.0.0.6", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := dialFrom(t, tc.src, l.Addr())
			msg := "app bytes"
			if tc.payload == nil {
				msg = "PROXY TCP4 192.0.2.9 192.0.2.1 1 2\r\n" // not ours to parse
			}
			if _, err := c.Write(append(tc.payload, msg...)); err != nil {
				t.Fatal(err)
			}
			conn := acceptOne(t, l)
			if conn.Key() != mustKey(tc.key) || conn.Exempt() != tc.exempt {
				t.Fatalf("Key, Exempt = %v, %v; want %s, %v", conn.Key(), conn.Exempt(), tc.key, tc.exempt)
			}
			if tc.remote != "" && conn.RemoteAddr().String() != tc.remote {
				t.Fatalf("RemoteAddr = %v, want %s", conn.RemoteAddr(), tc.remote)
			}
			if tc.remote == "" && conn.RemoteAddr().String() != c.LocalAddr().String() {
				t.Fatalf("RemoteAddr = %v, want the peer %v", conn.RemoteAddr(), c.LocalAddr())
			}
			if got := readN(t, conn, len(msg)); got != msg {
				t.Fatalf("application read %q, want %q", got, msg)
			}
			_, hasHeader := conn.ProxyHeader()
			if hasHeader != (tc.payload != nil) {
				t.Fatalf("ProxyHeader present = %v", hasHeader)
			}
			if tc.exempt {
				return
			}
			// The client holds its one slot: the same client again is
			// refused, through the same proxy or not.
			again := dialFrom(t, tc.src, l.Addr())
			again.Write(tc.payload)
			mustBeRefused(t, again)
		})
	}
	if s := l.Stats(); s.Refused.ClientCap != 3 || s.Exempt != 2 {
		t.Fatalf("stats = %+v; want 3 client-cap refusals and 2 exempt", s)
	}
}

func TestProxyProtocolRefusals(t *testing.T) {
	l := newTestListener(t, nil, Config{Trusted: mustProxySet("127.0.0.5"), ProxyProtocol: true, ProxyHeaderTimeout: 200 * time.Millisecond})
	tests := []struct {
		name  string
		send  []byte
		close bool // close the write side after sending
		want  func(Refused) uint64
	}{
		{"bad v1", []byte("PROXY TCP4 nonsense\r\n"), false, func(r Refused) uint64 { return r.ProxyHeaderBad }},
		{"bad v2", []byte("\r\n\r\n\x00\r\nQUIT\n\x21\x11\x00\x01x"), false, func(r Refused) uint64 { return r.ProxyHeaderBad }},
		{"too long", []byte("PROXY TCP6 " + string(make([]byte, 120))), false, func(r Refused) uint64 { return r.ProxyHeaderBad }},
		{"truncated", []byte("PROXY TCP4 192.0.2.1"), true, func(r Refused) uint64 { return r.ProxyHeaderBad }},
		{"missing", []byte("GET / HTTP/1.1\r\n\r\n"), false, func(r Refused) uint64 { return r.ProxyHeaderMissing }},
		{"closed at once", nil, true, func(r Refused) uint64 { return r.ProxyHeaderMissing }},
		{"slow", []byte("PROXY TCP4 192.0.2.1"), false, func(r Refused) uint64 { return r.ProxyHeaderSlow }},
	}
	served := make(chan net.Conn, 1)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			served <- c
		}
	}()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.want(l.Stats().Refused)
			c := dialFrom(t, "127.0.0.5", l.Addr())
			c.Write(tc.send)
			if tc.close {
				c.CloseWrite()
			}
			c.SetReadDeadline(time.Now().Add(waitTimeout))
			if n, err := c.Read(make([]byte, 1)); err == nil {
				t.Fatalf("refused connection read %d bytes", n)
			}
			waitFor(t, "the refusal to be counted", func() bool { return tc.want(l.Stats().Refused) == before+1 })
		})
	}
	select {
	case c := <-served:
		t.Fatalf("Accept returned %v", c.RemoteAddr())
	default:
	}
	checkDrained(t, l)
}

// A trusted peer that never sends its header must not hold up the accept
// loop: another client is served well before the header deadline.
func TestSlowHeaderDoesNotBlockAccept(t *testing.T) {
	l := newTestListener(t, nil, Config{Trusted: mustProxySet("127.0.0.5"), ProxyProtocol: true, ProxyHeaderTimeout: time.Minute})
	echoServer(t, l)
	dialFrom(t, "127.0.0.5", l.Addr()) // sends nothing
	waitFor(t, "the header read to start", func() bool { return l.Stats().Pending == 1 })
	start := time.Now()
	mustServe(t, dialFrom(t, "127.0.0.6", l.Addr()), "127.0.0.6")
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("served after %v: the accept loop waited for the header", d)
	}
	// Closing the listener interrupts the pending read at once.
	l.Close()
	if s := l.Stats(); s.Pending != 0 || s.Refused.Shutdown != 1 {
		t.Fatalf("after Close: %+v; want nothing pending, 1 shutdown refusal", s)
	}
}
