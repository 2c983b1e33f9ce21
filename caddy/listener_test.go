package caddyportcullis_test

import (
	"crypto/tls"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/seed-a07d1050/portcullis/internal/testcert"
)

// Two test-only listener wrappers count what reaches them: one placed
// before portcullis counts every socket accepted, one placed after it (and
// before tls) counts the connections handed to TLS and those from which
// TLS read a byte, the ClientHello.
var (
	socketsAccepted atomic.Int64
	reachedTLS      atomic.Int64
	tlsBytesRead    atomic.Int64 // connections TLS read at least one byte from
)

func init() {
	caddy.RegisterModule(acceptCounter{})
	caddy.RegisterModule(tlsReadCounter{})
}

type acceptCounter struct{}

func (acceptCounter) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "caddy.listeners.test_count_accepts", New: func() caddy.Module { return new(acceptCounter) }}
}
func (acceptCounter) UnmarshalCaddyfile(*caddyfile.Dispenser) error { return nil }
func (acceptCounter) WrapListener(ln net.Listener) net.Listener {
	return countingListener{ln, func(c net.Conn) net.Conn { socketsAccepted.Add(1); return c }}
}

type tlsReadCounter struct{}

func (tlsReadCounter) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "caddy.listeners.test_count_tls_reads", New: func() caddy.Module { return new(tlsReadCounter) }}
}
func (tlsReadCounter) UnmarshalCaddyfile(*caddyfile.Dispenser) error { return nil }
func (tlsReadCounter) WrapListener(ln net.Listener) net.Listener {
	return countingListener{ln, func(c net.Conn) net.Conn {
		reachedTLS.Add(1)
		return &firstReadConn{Conn: c}
	}}
}

type countingListener struct {
	net.Listener
	wrap func(net.Conn) net.Conn
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.wrap(c), nil
}

// firstReadConn counts itself in tlsBytesRead on its first read of a byte.
type firstReadConn struct {
	net.Conn
	read atomic.Bool
}

func (c *firstReadConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && c.read.CompareAndSwap(false, true) {
		tlsBytesRead.Add(1)
	}
	return n, err
}

// A client over its connection cap is closed at accept, before TLS reads
// a byte of its ClientHello; other clients are served, and a slot comes
// back when a connection closes.
func TestListenerCapsBeforeTLS(t *testing.T) {
	dir := t.TempDir()
	cert, err := testcert.New()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := cert.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	port := itoa(freePort(t))
	c := startCaddy(t, dir, `{
	GLOBAL
	servers {
		listener_wrappers {
			test_count_accepts
			portcullis {
				name edge
				per_client 2
			}
			test_count_tls_reads
			tls
		}
	}
}

https://127.0.0.1:`+port+` {
	bind 127.0.0.1
	tls {dir}/cert.pem {dir}/key.pem
	respond "hello"
}
`)
	socketsAccepted.Store(0)
	reachedTLS.Store(0)
	tlsBytesRead.Store(0)
	addr := "127.0.0.1:" + port
	tlsCfg := &tls.Config{RootCAs: cert.Pool, ServerName: "127.0.0.1"}

	dialTLS := func(src string) (*tls.Conn, error) {
		d := &net.Dialer{Timeout: waitTimeout, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		return tls.DialWithDialer(d, "tcp", addr, tlsCfg)
	}
	var held []*tls.Conn
	for range 2 {
		conn, err := dialTLS("127.0.0.2")
		if err != nil {
			t.Fatalf("handshake within the cap: %v", err)
		}
		held = append(held, conn)
		t.Cleanup(func() { conn.Close() })
	}
	if got := serveOne(t, held[0]); !strings.Contains(got, "hello") {
		t.Fatalf("response %q", got)
	}

	// The third connection of 127.0.0.2: its ClientHello is never read.
	d := &net.Dialer{Timeout: waitTimeout, LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	raw, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(waitTimeout))
	if err := tls.Client(raw, tlsCfg).Handshake(); err == nil {
		t.Fatal("a handshake over the cap succeeded")
	}
	if got := socketsAccepted.Load(); got != 3 {
		t.Fatalf("%d sockets accepted, want 3", got)
	}
	if got, read := reachedTLS.Load(), tlsBytesRead.Load(); got != 2 || read != 2 {
		t.Fatalf("%d connections reached TLS and %d had a byte read, want 2 and 2: the refused one got to TLS", got, read)
	}

	// Another client is served meanwhile.
	other, err := dialTLS("127.0.0.3")
	if err != nil {
		t.Fatalf("another client: %v", err)
	}
	defer other.Close()
	if tlsBytesRead.Load() != 3 {
		t.Fatalf("%d handshakes read, want 3", tlsBytesRead.Load())
	}

	snap := c.limits(t).Listeners["edge"]
	if len(snap) != 1 || snap[0].Address != addr {
		t.Fatalf("listener snapshot %+v, want one socket on %s", snap, addr)
	}
	if st := snap[0].Stats; st.Refused.ClientCap != 1 || st.Open != 3 {
		t.Fatalf("listener stats %+v, want 1 refused at the client cap and 3 open", st)
	}
	if cl := snap[0].Clients; len(cl) != 2 || cl[0].Key != "127.0.0.2" || cl[0].InUse != 2 {
		t.Fatalf("clients %+v, want 127.0.0.2 holding 2", cl)
	}
	metrics := c.adminGet(t, "/metrics")
	want := `portcullis_connections_refused_total{address="` + addr + `",listener="edge",reason="client_cap"} 1`
	if !strings.Contains(metrics, want) {
		t.Fatalf("metrics lack %s", want)
	}

	// A closed connection gives its slot back.
	held[1].Close()
	waitFor(t, "the slot back", func() bool { return c.limits(t).Listeners["edge"][0].Stats.Open == 2 })
	again, err := dialTLS("127.0.0.2")
	if err != nil {
		t.Fatalf("after a close: %v", err)
	}
	again.Close()
}

// serveOne sends one request on conn and returns the response.
func serveOne(t testing.TB, conn net.Conn) string {
	t.Helper()
	_ = conn.SetDeadline(time.Now().Add(waitTimeout))
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetDeadline(time.Time{})
	return string(buf[:n])
}
