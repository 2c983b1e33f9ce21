package httplimit_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"github.com/seed-a07d1050/portcullis/httplimit"
	"github.com/seed-a07d1050/portcullis/limit/limittest"
)

// echoWS is a WebSocket server that echoes until the client closes.
var echoWS = websocket.Handler(func(ws *websocket.Conn) { io.Copy(ws, ws) })

// dialWS opens a WebSocket to ts from ip and checks that it echoes.
func dialWS(t *testing.T, serverURL, ip string) (*websocket.Conn, error) {
	t.Helper()
	cfg, err := websocket.NewConfig(strings.Replace(serverURL, "http", "ws", 1)+"/ws", "http://localhost/")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Dialer = dialerFrom(ip)
	ws, err := websocket.DialConfig(cfg)
	if err != nil {
		return nil, err
	}
	ws.SetDeadline(time.Now().Add(waitLimit))
	if _, err := ws.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(ws, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo: %q %v", buf, err)
	}
	return ws, nil
}

func mustDialWS(t *testing.T, serverURL, ip string) *websocket.Conn {
	t.Helper()
	ws, err := dialWS(t, serverURL, ip)
	if err != nil {
		t.Fatalf("dial from %s: %v", ip, err)
	}
	return ws
}

// wsAndPlain serves echoWS on /ws and a quick 200 elsewhere.
func wsAndPlain(l *httplimit.Limiter) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/ws", echoWS)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {})
	return l.Wrap(mux)
}

func TestWebSocketHoldsPermitUntilClose(t *testing.T) {
	l := newLimiter(t, httplimit.Config{Policy: httplimit.Policy{Permits: 1}})
	ts := startServer(t, wsAndPlain(l))
	ws := mustDialWS(t, ts.URL, "127.0.0.2")
	// The handler has long passed the 101; the socket still holds the permit.
	if got := l.Totals().InUse; got != 1 {
		t.Errorf("%d in use with the socket open, want 1", got)
	}
	if _, err := dialWS(t, ts.URL, "127.0.0.2"); err == nil || !strings.Contains(err.Error(), "bad status") {
		t.Errorf("second socket from the same client: %v, want refused", err)
	}
	if code, _ := getStatus(t.Context(), clientFrom(t, "127.0.0.2"), ts.URL); code != http.StatusTooManyRequests {
		t.Errorf("plain request beside the socket: %d, want 429 (shared permits)", code)
	}
	other := mustDialWS(t, ts.URL, "127.0.0.3")
	other.Close()
	ws.Close()
	expectIdle(t, l)
}

func TestWebSocketReleaseTunnels(t *testing.T) {
	l := newLimiter(t, httplimit.Config{Policy: httplimit.Policy{Permits: 1}, ReleaseTunnels: true})
	ts := startServer(t, wsAndPlain(l))
	ws := mustDialWS(t, ts.URL, "127.0.0.2")
	expectIdle(t, l) // released after the 101, the socket still open
	ws2 := mustDialWS(t, ts.URL, "127.0.0.2")
	ws.Close()
	ws2.Close()
	if tot := l.Totals(); tot.Granted != 2 || tot.Refused != 0 {
		t.Errorf("totals %+v, want 2 granted", tot)
	}
}

// TestWebSocketFailedHandshakeNotEstablished refuses the handshake (no
// Origin): the tunnel is never established, and its permit comes back when
// the server closes the connection.
func TestWebSocketFailedHandshakeNotEstablished(t *testing.T) {
	l := newLimiter(t, httplimit.Config{Policy: httplimit.Policy{Permits: 1}, ReleaseTunnels: true})
	ts := startServer(t, wsAndPlain(l))
	conn, err := dialerFrom("127.0.0.2").Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(waitLimit))
	fmt.Fprint(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	status, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || !strings.HasPrefix(status, "HTTP/1.1 403") {
		t.Fatalf("status line %q %v, want 403", status, err)
	}
	expectIdle(t, l)
}

func TestTunnelPermitsSeparate(t *testing.T) {
	l := newLimiter(t, httplimit.Config{Policy: httplimit.Policy{Permits: 1}, TunnelPermits: 1})
	ts := startServer(t, wsAndPlain(l))
	ws := mustDialWS(t, ts.URL, "127.0.0.2")
	c := clientFrom(t, "127.0.0.2")
	if code, _ := getStatus(t.Context(), c, ts.URL); code != http.StatusOK {
		t.Errorf("page load beside a socket: %d, want 200 (own permits)", code)
	}
	if _, err := dialWS(t, ts.URL, "127.0.0.2"); err == nil {
		t.Error("second socket admitted over TunnelPermits 1")
	}
	s := l.Snapshot(0)
	if len(s.Tunnels.Keys) != 1 || s.Tunnels.Keys[0].InUse != 1 || s.Tunnels.Keys[0].Refused != 1 || len(s.Exchanges.Keys) != 0 {
		t.Errorf("snapshot %+v, want one tunnel in use with one refusal and no exchange", s)
	}
	ws.Close()
	expectIdle(t, l)
	// Granted: each socket's exchange permit until its answer (2), the
	// page load (1) and the first socket's tunnel permit (1).
	if tot := l.Totals(); tot.Granted != 4 || tot.Refused != 1 {
		t.Errorf("summed totals %+v, want 4 granted, 1 refused", tot)
	}
}

// TestFakeUpgradeCountsAsExchange sends upgrade requests that the handler
// answers with a plain 200, as an upstream ignoring the Upgrade header
// does: with separate tunnel permits, each still counts against the
// exchange limit while it runs, so that the Upgrade header is no way
// around it, and gives its tunnel permit back as soon as its answer shows
// it is no tunnel.
func TestFakeUpgradeCountsAsExchange(t *testing.T) {
	l := newLimiter(t, httplimit.Config{Policy: httplimit.Policy{Permits: 1}, TunnelPermits: 8})
	answered := make(chan struct{})
	release := make(chan struct{})
	h := l.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		answered <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	ts := startServer(t, h)
	conn, err := dialerFrom("127.0.0.2").Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "GET /big HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	select {
	case <-answered:
	case <-time.After(waitLimit):
		t.Fatal("the fake upgrade was not served")
	}
	s := l.Snapshot(0)
	if len(s.Exchanges.Keys) != 1 || s.Exchanges.Keys[0].InUse != 1 || len(s.Tunnels.Keys) != 0 {
		t.Errorf("snapshot %+v, want one exchange in use and no tunnel", s)
	}
	c := clientFrom(t, "127.0.0.2")
	if code, _ := getStatus(t.Context(), c, ts.URL+"/other"); code != http.StatusTooManyRequests {
		t.Errorf("plain request beside a fake upgrade: %d, want 429 (Permits 1)", code)
	}
	close(release)
	expectIdle(t, l)
}

// TestEstablishedTunnelExemptFromReclaim holds a socket and a slow plain
// request past ReclaimAfter (fake time): only the plain request's permit
// is reclaimed, and its exchange ended; the socket lives on.
func TestEstablishedTunnelExemptFromReclaim(t *testing.T) {
	clock := limittest.NewClock()
	l := newLimiter(t, httplimit.Config{Policy: httplimit.Policy{Permits: 2, ReclaimAfter: time.Minute}, Clock: clock})
	g := newGate()
	mux := http.NewServeMux()
	mux.Handle("/ws", echoWS)
	mux.Handle("/", g)
	ts := startServer(t, l.Wrap(mux))
	ws := mustDialWS(t, ts.URL, "127.0.0.2")
	held := holdOne(t, clientFrom(t, "127.0.0.2"), ts.URL, g)
	clock.Advance(2 * time.Minute)
	waitFor(t, "a reclaim", func() bool { return l.Totals().Reclaimed == 1 })
	if got := l.Totals(); got.InUse != 1 || got.Reclaimed != 1 {
		t.Errorf("totals %+v, want the socket still in use", got)
	}
	select {
	case <-held: // the reclaim ended the plain exchange
	case <-time.After(waitLimit):
		t.Fatal("the reclaimed exchange went on")
	}
	if _, err := ws.Write([]byte("ping")); err != nil {
		t.Fatalf("the socket after the reclaim: %v", err)
	}
	ws.Close()
	expectIdle(t, l)
}

// connectEcho answers CONNECT by hijacking, saying 200, and echoing in a
// goroutine: the handler returns at once, the tunnel lives on.
func connectEcho(w http.ResponseWriter, r *http.Request) {
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if r.Host == "forbidden:443" {
		brw.WriteString("HTTP/1.1 403 Forbidden\r\n\r\n")
		brw.Flush()
		conn.Close()
		return
	}
	brw.WriteString("HTTP/1.1 200 Connection established\r\n\r\n")
	brw.Flush()
	go func() {
		defer conn.Close()
		io.Copy(conn, brw)
	}()
}

// dialCONNECT sends CONNECT host from ip and returns the connection and the
// status line.
func dialCONNECT(t *testing.T, addr, ip, host string) (net.Conn, *bufio.Reader, string) {
	t.Helper()
	conn, err := dialerFrom(ip).Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(waitLimit))
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", host, host)
	br := bufio.NewReader(conn)
	status, err := br.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return conn, br, status
}

func TestCONNECTTunnelHeldUntilClose(t *testing.T) {
	l := newLimiter(t, httplimit.Config{Policy: httplimit.Policy{Permits: 1, ReclaimAfter: time.Minute}})
	ts := startServer(t, l.Wrap(http.HandlerFunc(connectEcho)))
	addr := ts.Listener.Addr().String()

	conn, br, status := dialCONNECT(t, addr, "127.0.0.2", "example.com:443")
	if !strings.HasPrefix(status, "HTTP/1.1 200") {
		t.Fatalf("status %q", status)
	}
	br.ReadString('\n') // the empty line
	fmt.Fprint(conn, "hello\n")
	if echo, err := br.ReadString('\n'); err != nil || echo != "hello\n" {
		t.Fatalf("echo %q %v", echo, err)
	}
	if got := l.Totals().InUse; got != 1 {
		t.Errorf("%d in use with the tunnel open (the handler returned), want 1", got)
	}
	if _, _, status := dialCONNECT(t, addr, "127.0.0.2", "example.org:443"); !strings.HasPrefix(status, "HTTP/1.1 429") {
		t.Errorf("second tunnel: %q, want 429", status)
	}
	conn.Close()
	expectIdle(t, l)

	// A refused CONNECT (403) is never established; closing releases it.
	if _, _, status := dialCONNECT(t, addr, "127.0.0.2", "forbidden:443"); !strings.HasPrefix(status, "HTTP/1.1 403") {
		t.Errorf("forbidden: %q", status)
	}
	expectIdle(t, l)
}

// TestTunnelWriterKeepsInterfaces checks, on a real HTTP/1 server, that the
// writer a tunnel handler gets still flushes, reads from, and answers
// ResponseController calls.
func TestTunnelWriterKeepsInterfaces(t *testing.T) {
	l := newLimiter(t, httplimit.Config{Policy: httplimit.Policy{Permits: 1}})
	result := make(chan string, 1)
	ts := startServer(t, l.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, isFlusher := w.(http.Flusher)
		_, isReaderFrom := w.(io.ReaderFrom)
		rc := http.NewResponseController(w)
		deadlineErr := rc.SetWriteDeadline(time.Now().Add(waitLimit))
		w.WriteHeader(http.StatusOK) // a 2xx to CONNECT establishes the tunnel
		flushErr := rc.Flush()
		n, copyErr := io.Copy(w, strings.NewReader("tunnel data\n"))
		result <- fmt.Sprint(isFlusher, isReaderFrom, deadlineErr, flushErr, n, copyErr)
	})))
	_, br, status := dialCONNECT(t, ts.Listener.Addr().String(), "127.0.0.2", "example.com:443")
	if !strings.HasPrefix(status, "HTTP/1.1 200") {
		t.Fatalf("status %q", status)
	}
	if got, want := <-result, "true true <nil> <nil> 12 <nil>"; got != want {
		t.Errorf("flusher, readerfrom, deadline, flush, copy = %s; want %s", got, want)
	}
	var lines []string
	for len(lines) < 10 {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("after %q: %v", lines, err)
		}
		if lines = append(lines, line); line == "tunnel data\n" {
			break
		}
	}
	expectIdle(t, l)
}

// TestUpgradeAnsweredBeforeHijack writes 101 through the ResponseWriter,
// then hijacks, as some WebSocket libraries do: with ReleaseTunnels the
// permit comes back at the 101.
func TestUpgradeAnsweredBeforeHijack(t *testing.T) {
	l := newLimiter(t, httplimit.Config{Policy: httplimit.Policy{Permits: 1}, ReleaseTunnels: true})
	ts := startServer(t, l.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Upgrade", "echo")
		w.Header().Set("Connection", "Upgrade")
		w.WriteHeader(http.StatusSwitchingProtocols)
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		go func() {
			defer conn.Close()
			io.Copy(conn, brw)
		}()
	})))
	conn, err := dialerFrom("127.0.0.2").Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(waitLimit))
	fmt.Fprint(conn, "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
	br := bufio.NewReader(conn)
	if status, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(status, "HTTP/1.1 101") {
		t.Fatalf("status %q %v", status, err)
	}
	expectIdle(t, l) // released at the 101, the connection still open
	fmt.Fprint(conn, "still here\n")
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line == "still here\n" {
			break
		}
	}
}

// TestForgottenHijackedConnReleased hijacks an upgrade, answers 101 and
// drops the connection without closing it, a handler bug: the permit comes
// back when the connection is garbage collected.
func TestForgottenHijackedConnReleased(t *testing.T) {
	l := newLimiter(t, httplimit.Config{Policy: httplimit.Policy{Permits: 1}})
	ts := startServer(t, l.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
	})))
	conn, err := dialerFrom("127.0.0.2").Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(waitLimit))
	fmt.Fprint(conn, "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
	if status, err := bufio.NewReader(conn).ReadString('\n'); err != nil || !strings.HasPrefix(status, "HTTP/1.1 101") {
		t.Fatalf("status %q %v", status, err)
	}
	waitFor(t, "the forgotten connection's permit", func() bool {
		runtime.GC()
		return l.Totals().InUse == 0
	})
}

// TestWebSocketClientResetReleases resets an open socket's TCP connection
// from the client side: the server's read fails, the handler ends, the
// hijacked connection is closed and the permit comes back.
func TestWebSocketClientResetReleases(t *testing.T) {
	l := newLimiter(t, httplimit.Config{Policy: httplimit.Policy{Permits: 1}})
	ts := startServer(t, wsAndPlain(l))
	cfg, err := websocket.NewConfig(strings.Replace(ts.URL, "http", "ws", 1)+"/ws", "http://localhost/")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := dialerFrom("127.0.0.2").Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(waitLimit))
	if _, err := websocket.NewClient(cfg, conn); err != nil {
		t.Fatal(err)
	}
	if got := l.Totals().InUse; got != 1 {
		t.Fatalf("%d in use with the socket open, want 1", got)
	}
	conn.(*net.TCPConn).SetLinger(0)
	conn.Close()
	expectIdle(t, l)
}
