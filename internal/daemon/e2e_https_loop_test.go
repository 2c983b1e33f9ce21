package daemon_test

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/daemon"
	"github.com/seed-a07d1050/portcullis/internal/evloop"
)

// httpsLoopConfig, served as https (onHTTPS), is a listener whose one
// route the event loops can serve, with a connection cap per client and a
// route limit.
const httpsLoopConfig = `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: secure
    protocol: http
    listen: "127.0.0.1:0"
    client_limit: {permits: 8}
    routes:
      - {name: app, upstreams: ["{{backend}}"], limit: {permits: 4}}
`

// tlsDial opens a TLS connection to addr from 127.0.0.X, offering protos
// by ALPN.
func tlsDial(t *testing.T, ip, addr string, protos ...string) *tls.Conn {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: waitLimit}
	c, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{RootCAs: sharedCert(t).Pool, ServerName: "127.0.0.1", NextProtos: protos})
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(waitLimit))
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes req on c and reads the answer through br.
func roundTrip(t *testing.T, c net.Conn, br *bufio.Reader, req string) (int, string) {
	t.Helper()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the answer to %q: %v", req, err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("reading the body of the answer to %q: %v", req, err)
	}
	return resp.StatusCode, string(b)
}

// TestHTTPSOnTheLoops checks that an https listener's HTTP/1.1
// connections are served on the event loops after Go's handshake: the
// loops hold the connection after its answers, the upstream hears the
// request came over TLS, a request the loops do not relay goes back to
// the server on the same TLS session, HTTP/2 connections stay with
// net/http's server, and every permit and slot comes back, also after a
// client that resets its connection while its request is upstream.
func TestHTTPSOnTheLoops(t *testing.T) {
	if !evloop.Supported() {
		t.Skip("no event loops on this system")
	}
	certFile, keyFile := certFiles(t)
	d := startDaemon(t, onHTTPS(httpsLoopConfig, certFile, keyFile))
	addr := d.srv.Addr("secure").String()

	c := tlsDial(t, "127.0.0.2", addr, "http/1.1")
	br := bufio.NewReader(c)
	for i := range 3 {
		code, body := roundTrip(t, c, br, "GET /headers HTTP/1.1\r\nHost: app.test\r\n\r\n")
		var got map[string]string
		if err := json.Unmarshal([]byte(body), &got); code != 200 || err != nil {
			t.Fatalf("request %d: %d %q (%v)", i+1, code, body, err)
		}
		if got["X-Forwarded-Proto"] != "https" {
			t.Errorf("request %d: the upstream got X-Forwarded-Proto %q, want https", i+1, got["X-Forwarded-Proto"])
		}
	}
	if held, adopted := daemon.LoopConnsOf(d.srv, "secure"); held != 1 || adopted != 1 {
		t.Fatalf("after three answers the loops hold %d connections and took %d, want 1 and 1", held, adopted)
	}

	// A request with a body is the server's: the connection goes back,
	// TLS session and all, and later requests are served there.
	code, body := roundTrip(t, c, br, "POST /posted HTTP/1.1\r\nHost: app.test\r\nContent-Length: 5\r\n\r\nhello")
	if code != 200 || body != "ok /posted\n" {
		t.Errorf("the POST given back: %d %q", code, body)
	}
	if code, body := roundTrip(t, c, br, "GET /after HTTP/1.1\r\nHost: app.test\r\n\r\n"); code != 200 || body != "ok /after\n" {
		t.Errorf("a GET after it: %d %q", code, body)
	}
	if held, _ := daemon.LoopConnsOf(d.srv, "secure"); held != 0 {
		t.Errorf("the loops hold %d connections after giving theirs back", held)
	}

	// HTTP/2 is net/http's.
	h2 := tlsDial(t, "127.0.0.3", addr, "h2", "http/1.1")
	if p := h2.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN chose %q, want h2", p)
	}
	h2.Close()
	if _, adopted := daemon.LoopConnsOf(d.srv, "secure"); adopted != 1 {
		t.Errorf("the loops took %d connections, want 1 (not the HTTP/2 one)", adopted)
	}

	// A reset while the request is upstream, on the loops.
	r := tlsDial(t, "127.0.0.4", addr, "http/1.1")
	rbr := bufio.NewReader(r)
	if code, _ := roundTrip(t, r, rbr, "GET /first HTTP/1.1\r\nHost: app.test\r\n\r\n"); code != 200 {
		t.Fatalf("first request: %d", code)
	}
	if _, err := io.WriteString(r, "GET /slow?ms=2000 HTTP/1.1\r\nHost: app.test\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	d.waitFor("the slow request upstream", func() bool { return d.backend.inFlight.Load() == 1 })
	tcp := r.NetConn().(*net.TCPConn)
	_ = tcp.SetLinger(0)
	tcp.Close()

	// Plain HTTP on the TLS port: Go's 400, no permit, the slot back.
	p := dialFrom(t, "127.0.0.5", addr)
	_ = p.SetDeadline(time.Now().Add(waitLimit))
	if _, err := io.WriteString(p, "GET / HTTP/1.1\r\nHost: app.test\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if got, _ := io.ReadAll(p); !strings.HasPrefix(string(got), "HTTP/1.0 400 Bad Request\r\n") {
		t.Errorf("plain HTTP on the https listener got %q, want Go's 400", got)
	}

	c.Close()
	d.waitFor("the loops empty", func() bool {
		held, _ := daemon.LoopConnsOf(d.srv, "secure")
		return held == 0
	})
	d.checkIdle()
	if _, adopted := daemon.LoopConnsOf(d.srv, "secure"); adopted != 2 {
		t.Errorf("the loops took %d connections, want 2", adopted)
	}
}
