package daemon_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"github.com/seed-a07d1050/portcullis/internal/testcert"
)

func TestTrustedProxyHeadersAndKeys(t *testing.T) { bothServers(t, testTrustedProxyHeadersAndKeys) }

func testTrustedProxyHeadersAndKeys(t *testing.T) {
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    max_conns_per_client: 2
    trusted_proxies: [127.0.0.5/32]
    routes:
      - name: slow
        path_prefix: /slow
        upstreams: ["{{backend}}"]
        limit: {permits: 1}
      - name: rest
        upstreams: ["{{backend}}"]
`)
	headers := func(from string, sent map[string]string) map[string]string {
		t.Helper()
		req, _ := http.NewRequest("GET", d.url("web", "/headers"), nil)
		for k, v := range sent {
			req.Header.Set(k, v)
		}
		resp, err := d.client(from).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		got := map[string]string{}
		if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	spoof := map[string]string{
		"X-Forwarded-For": "203.0.113.9", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "evil.example",
		"Forwarded": "for=203.0.113.9", "X-Real-Ip": "203.0.113.9",
	}
	t.Run("untrusted peer's headers are replaced", func(t *testing.T) {
		got := headers("127.0.0.2", spoof)
		want := map[string]string{"X-Forwarded-For": "127.0.0.2", "X-Forwarded-Proto": "http", "Forwarded": "", "X-Real-Ip": "127.0.0.2"}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s = %q, want %q", k, got[k], v)
			}
		}
		if h := got["X-Forwarded-Host"]; strings.Contains(h, "evil") {
			t.Errorf("X-Forwarded-Host = %q, the client's own", h)
		}
	})
	t.Run("trusted peer's chain is extended", func(t *testing.T) {
		got := headers("127.0.0.5", spoof)
		if got["X-Forwarded-For"] != "203.0.113.9, 127.0.0.5" || got["X-Real-Ip"] != "203.0.113.9" ||
			got["X-Forwarded-Proto"] != "https" || got["X-Forwarded-Host"] != "evil.example" {
			t.Errorf("headers from the trusted proxy: %v", got)
		}
	})
	t.Run("trusted peer is exempt from the connection cap", func(t *testing.T) {
		addr := d.srv.Addr("web").String()
		for range 4 {
			dialFrom(t, "127.0.0.5", addr)
		}
		d.waitFor("4 connections of the proxy", func() bool { return d.listener("web").Connections.Open >= 4 })
		if st, _, _ := get(t, d.client("127.0.0.5"), d.url("web", "/")); st != http.StatusOK {
			t.Fatalf("fifth connection of the trusted proxy: %d", st)
		}
	})
	t.Run("route limits count the client behind the proxy", func(t *testing.T) {
		c := d.client("127.0.0.5")
		send := func(client string) <-chan result {
			req, _ := http.NewRequest("GET", d.url("web", "/slow?ms=1500"), nil)
			req.Header.Set("X-Forwarded-For", client)
			ch := make(chan result, 1)
			go func() {
				resp, err := c.Do(req)
				if err != nil {
					ch <- result{err: err}
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				ch <- result{status: resp.StatusCode}
			}()
			return ch
		}
		a := send("198.51.100.1")
		d.waitFor("first client's permit", func() bool { return d.route("web", "slow").Limit.Totals.InUse == 1 })
		b := send("198.51.100.2")
		again := send("198.51.100.1")
		if r := await(t, again); r.status != http.StatusTooManyRequests {
			t.Errorf("same client behind the proxy: %d, want 429", r.status)
		}
		for _, ch := range []<-chan result{a, b} {
			if r := await(t, ch); r.status != http.StatusOK {
				t.Errorf("distinct clients behind the proxy: %d %v, want 200", r.status, r.err)
			}
		}
	})
}

func TestTCPListenerCapsAtAccept(t *testing.T) {
	echo := startEcho(t)
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: db
    protocol: tcp
    listen: "127.0.0.1:0"
    upstream: "`+echo+`"
    max_conns_per_client: 2
`)
	addr := d.srv.Addr("db").String()
	roundTrip := func(c net.Conn, msg string) (string, error) {
		_ = c.SetDeadline(time.Now().Add(waitLimit))
		if _, err := c.Write([]byte(msg + "\n")); err != nil {
			return "", err
		}
		return bufio.NewReader(c).ReadString('\n')
	}
	var held []net.Conn
	for i := range 2 {
		c := dialFrom(t, "127.0.0.2", addr)
		if got, err := roundTrip(c, "hello"); err != nil || got != "hello\n" {
			t.Fatalf("connection %d: %q %v", i, got, err)
		}
		held = append(held, c)
	}
	if got, err := roundTrip(dialFrom(t, "127.0.0.2", addr), "third"); err == nil {
		t.Fatalf("third connection of the client echoed %q over a cap of 2", got)
	}
	if got, err := roundTrip(dialFrom(t, "127.0.0.3", addr), "other"); err != nil || got != "other\n" {
		t.Fatalf("another client: %q %v", got, err)
	}
	if n := d.listener("db").Connections.Refused.ClientCap; n != 1 {
		t.Fatalf("client_cap refusals %d, want 1", n)
	}
	// A half-close reaches the upstream and the echo's end comes back.
	cw := held[0].(*net.TCPConn)
	_ = cw.CloseWrite()
	if rest, err := io.ReadAll(held[0]); err != nil || len(rest) != 0 {
		t.Fatalf("after half-close: %q %v, want a clean end", rest, err)
	}
	for _, c := range held {
		c.Close()
	}
	d.waitFor("slots back", func() bool { return d.listener("db").Connections.Open <= 1 })
	if got, err := roundTrip(dialFrom(t, "127.0.0.2", addr), "again"); err != nil || got != "again\n" {
		t.Fatalf("after closing, the client connects again: %q %v", got, err)
	}
}

// selfSigned writes a new certificate for 127.0.0.1 and its key into a
// temporary directory of the test.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	c, err := testcert.New()
	if err != nil {
		t.Fatal(err)
	}
	if certFile, keyFile, err = c.WriteFiles(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, c.Pool
}

func TestHTTPSWithHTTP2(t *testing.T) { bothServers(t, testHTTPSWithHTTP2) }

func testHTTPSWithHTTP2(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t)
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: tls
    protocol: https
    listen: "127.0.0.1:0"
    max_conns_per_client: 1
    tls: {cert_file: "`+certFile+`", key_file: "`+keyFile+`"}
    routes:
      - upstreams: ["{{backend}}"]
        limit: {permits: 3}
`)
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	tr := &http.Transport{DialContext: dialer.DialContext, TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	c := &http.Client{Transport: tr, Timeout: waitLimit}
	d.mu.Lock()
	d.clients = append(d.clients, c)
	d.mu.Unlock()
	url := "https://" + d.srv.Addr("tls").String()
	if st, _, _ := get(t, c, url+"/"); st != http.StatusOK {
		t.Fatalf("first https request: %d", st)
	}
	// Then several requests at once share the one HTTP/2 connection the
	// cap allows.
	var chans []<-chan result
	for range 3 {
		ch := make(chan result, 1)
		go func() {
			resp, err := c.Get(url + "/headers")
			if err != nil {
				ch <- result{err: err}
				return
			}
			defer resp.Body.Close()
			var h map[string]string
			_ = json.NewDecoder(resp.Body).Decode(&h)
			if resp.Proto != "HTTP/2.0" || h["X-Forwarded-Proto"] != "https" {
				t.Errorf("proto %s, X-Forwarded-Proto %q; want HTTP/2.0 and https", resp.Proto, h["X-Forwarded-Proto"])
			}
			ch <- result{status: resp.StatusCode}
		}()
		chans = append(chans, ch)
	}
	for _, ch := range chans {
		if r := await(t, ch); r.err != nil || r.status != http.StatusOK {
			t.Fatalf("https request: %d %v", r.status, r.err)
		}
	}
	// A second connection of the same client is closed before the handshake.
	conn, err := tls.DialWithDialer(dialer, "tcp", d.srv.Addr("tls").String(), &tls.Config{RootCAs: pool})
	if err == nil {
		conn.Close()
		t.Fatal("second TLS connection of the client completed its handshake over a cap of 1")
	}
	if n := d.listener("tls").Connections.Refused.ClientCap; n != 1 {
		t.Fatalf("client_cap refusals %d, want 1", n)
	}
}

func TestWebSocketThroughTheProxyHoldsAPermit(t *testing.T) {
	bothServers(t, testWebSocketThroughTheProxyHoldsAPermit)
}

func testWebSocketThroughTheProxyHoldsAPermit(t *testing.T) {
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - name: ws
        path_prefix: /ws
        upstreams: ["{{backend}}"]
        limit: {permits: 1}
`)
	dial := func() (*websocket.Conn, error) {
		cfg, err := websocket.NewConfig("ws://"+d.srv.Addr("web").String()+"/ws", "http://localhost/")
		if err != nil {
			t.Fatal(err)
		}
		cfg.Dialer = &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: waitLimit}
		return websocket.DialConfig(cfg)
	}
	ws, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	_ = ws.SetDeadline(time.Now().Add(waitLimit))
	for _, msg := range []string{"one", "two"} {
		if err := websocket.Message.Send(ws, msg); err != nil {
			t.Fatal(err)
		}
		var got string
		if err := websocket.Message.Receive(ws, &got); err != nil || got != msg {
			t.Fatalf("echo %q %v, want %q", got, err, msg)
		}
	}
	if n := d.route("web", "ws").Limit.Totals.InUse; n != 1 {
		t.Fatalf("open WebSocket holds %d permits, want 1", n)
	}
	if second, err := dial(); err == nil {
		second.Close()
		t.Fatal("second WebSocket admitted over a limit of 1")
	}
	ws.Close()
	d.waitFor("the tunnel's permit back", func() bool { return d.route("web", "ws").Limit.Totals.InUse == 0 })
}

// startEcho starts a TCP server on loopback that echoes what it reads, for
// tcp listeners to proxy to, and returns its address. It stops with the test.
func startEcho(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

// Streams reach the client as the upstream sends them: server-sent events
// and bodies of unknown length are flushed at once, whatever else the
// proxy buffers. A known-length body is not held back past its end.
func TestStreamsAreNotBuffered(t *testing.T) { bothServers(t, testStreamsAreNotBuffered) }

func testStreamsAreNotBuffered(t *testing.T) {
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - upstreams: ["{{backend}}"]
`)
	for _, tc := range []struct{ name, query string }{
		{"server-sent events", "type=text/event-stream"},
		{"unknown length", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", d.url("web", "/stream?"+tc.query), nil)
			resp, err := d.client("127.0.0.2").Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			// The upstream holds the rest of the body until the client
			// goes, so this read returns only if the proxy flushed.
			line, err := bufio.NewReader(resp.Body).ReadString('\n')
			if err != nil || line != "first part\n" {
				t.Fatalf("first part = %q, %v; want it before the stream ends", line, err)
			}
		})
	}
}

// With syn_filter, a client holding its connection cap cannot even
// complete a handshake, while others are served; the metrics show it.
func TestSYNFilterListener(t *testing.T) { bothServers(t, testSYNFilterListener) }

func testSYNFilterListener(t *testing.T) {
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    max_conns_per_client: 2
    syn_filter: true
    routes:
      - upstreams: ["{{backend}}"]
`)
	addr := d.srv.Addr("web").String()
	held := []net.Conn{dialFrom(t, "127.0.0.2", addr), dialFrom(t, "127.0.0.2", addr)}
	metric := `portcullis_connections_syn_filtered_keys{listener="web"} 1`
	d.waitFor("the filter to hold 127.0.0.2", func() bool {
		_, body, _ := get(t, d.client("127.0.0.9"), d.adminURL("/metrics"))
		return strings.Contains(body, metric)
	})
	if !synDropped("127.0.0.2", addr) {
		t.Fatal("a third connection from 127.0.0.2 was established; want its SYN dropped")
	}
	if status, _, _ := get(t, d.client("127.0.0.3"), d.url("web", "/")); status != http.StatusOK {
		t.Fatalf("another client got %d, want 200", status)
	}
	for _, c := range held {
		c.Close()
	}
	if status, _, _ := get(t, d.client("127.0.0.2"), d.url("web", "/")); status != http.StatusOK {
		t.Fatalf("127.0.0.2 after closing its connections got %d, want 200", status)
	}
}

// TestWebSocketOwnPermitsWithAccessLog runs a WebSocket through a route
// with tunnel_permits and the access log on: once switched, the socket
// holds a tunnel permit only, so a page load beside it is served under
// permits 1, and a fake upgrade the upstream answers 200 counts as an
// ordinary exchange.
func TestWebSocketOwnPermitsWithAccessLog(t *testing.T) {
	bothServers(t, testWebSocketOwnPermitsWithAccessLog)
}

func testWebSocketOwnPermitsWithAccessLog(t *testing.T) {
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
log: {access_log: true}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - name: app
        upstreams: ["{{backend}}"]
        limit: {permits: 1, tunnel_permits: 1}
`)
	cfg, err := websocket.NewConfig("ws://"+d.srv.Addr("web").String()+"/ws", "http://localhost/")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Dialer = &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: waitLimit}
	ws, err := websocket.DialConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_ = ws.SetDeadline(time.Now().Add(waitLimit))
	if err := websocket.Message.Send(ws, "one"); err != nil {
		t.Fatal(err)
	}
	var got string
	if err := websocket.Message.Receive(ws, &got); err != nil || got != "one" {
		t.Fatalf("echo %q %v", got, err)
	}
	l := d.route("web", "app").Limit
	if l.Totals.InUse != 1 || len(l.TunnelsBusy) != 1 || len(l.Busy) != 0 {
		t.Fatalf("limit with an open socket: %+v, want one tunnel and no exchange", l)
	}
	if st, _, _ := get(t, d.client("127.0.0.2"), d.url("web", "/")); st != http.StatusOK {
		t.Errorf("page load beside the socket: %d, want 200 (the socket holds a tunnel permit only)", st)
	}
	ws.Close()
	d.waitFor("the socket's permit back", func() bool { return d.route("web", "app").Limit.Totals.InUse == 0 })
	// A fake upgrade: the backend's "/" ignores Upgrade and answers 200
	// after a while; meanwhile it holds the client's one exchange permit
	// (and a tunnel permit, until its answer shows it is no tunnel).
	c := dialFrom(t, "127.0.0.2", d.srv.Addr("web").String())
	fmt.Fprint(c, "GET /?ms=1500 HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	d.waitFor("the fake upgrade to hold its permits", func() bool { return d.route("web", "app").Limit.Totals.InUse == 2 })
	if st, _, _ := get(t, d.client("127.0.0.2"), d.url("web", "/")); st != http.StatusTooManyRequests {
		t.Errorf("page load beside a fake upgrade: %d, want 429", st)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("fake upgrade answer: %v %v", resp, err)
	}
	resp.Body.Close()
	c.Close()
}
