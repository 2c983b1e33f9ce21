package http1

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/httplimit"
	"github.com/seed-a07d1050/portcullis/internal/testcert"
	uptransport "github.com/seed-a07d1050/portcullis/internal/upstream"
	"github.com/seed-a07d1050/portcullis/internal/waitfor"
)

// TestTLSWithHTTP2Handoff serves one TLS listener the way the daemon's
// https listeners will: HTTP/1.1 by this package, and connections whose
// ALPN chose h2 handed to net/http's server through a Handoff. The same
// handler answers both.
func TestTLSWithHTTP2Handoff(t *testing.T) {
	cert, err := testcert.New()
	if err != nil {
		t.Fatal(err)
	}
	hnd := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Proto+" tls="+map[bool]string{true: "yes", false: "no"}[r.TLS != nil])
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	handoff := NewHandoff(ln.Addr())
	h2 := &http.Server{Handler: hnd}
	go func() { _ = h2.Serve(handoff) }()
	defer h2.Close()
	h1 := &Server{Handler: hnd, TLSNextProto: map[string]func(*tls.Conn){"h2": handoff.Deliver}}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert.TLS}, NextProtos: []string{"h2", "http/1.1"}}
	go func() { _ = h1.Serve(tls.NewListener(ln, cfg)) }()
	defer h1.Close()
	url := "https://" + ln.Addr().String() + "/"

	for _, tc := range []struct {
		name  string
		h2    bool
		proto string
	}{{"h2", true, "HTTP/2.0"}, {"http/1.1", false, "HTTP/1.1"}} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: cert.Pool}, ForceAttemptHTTP2: tc.h2}
		if !tc.h2 {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(url)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		tr.CloseIdleConnections()
		if resp.Proto != tc.proto || string(b) != tc.proto+" tls=yes" {
			t.Errorf("%s: response %s %q", tc.name, resp.Proto, b)
		}
	}

	// Plain HTTP on the TLS port gets net/http's 400.
	c := dial(t, ln.Addr().String())
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if out, _ := waitClosed(t, c, 5*time.Second); !strings.Contains(out, "400 Bad Request") {
		t.Errorf("plain HTTP to the TLS port: %q", out)
	}
}

// TestTakeTLS checks TakeTLS: a connection it takes, after the handshake
// and with no deadline left on it, is the taker's (the server answers
// nothing on it, and Shutdown does not wait for it); one it declines is
// the server's.
func TestTakeTLS(t *testing.T) {
	cert, err := testcert.New()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var offers atomic.Int32
	taken := make(chan *tls.Conn, 1)
	srv := &Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "server") }),
		ReadHeaderTimeout: 50 * time.Millisecond, // the handshake's timeout too
		TakeTLS: func(tc *tls.Conn) bool {
			if offers.Add(1) != 1 {
				return false
			}
			taken <- tc
			return true
		},
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert.TLS}}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(tls.NewListener(ln, cfg)) }()
	client := &tls.Config{RootCAs: cert.Pool, ServerName: "127.0.0.1"}

	c1, err := tls.Dial("tcp", ln.Addr().String(), client)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	tc := <-taken
	if !tc.ConnectionState().HandshakeComplete {
		t.Fatal("TakeTLS was offered a connection before its handshake")
	}
	_, _ = io.WriteString(c1, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	time.Sleep(100 * time.Millisecond) // past the handshake's timeout, were it left on the connection
	br := bufio.NewReader(tc)
	req, err := http.ReadRequest(br)
	if err != nil {
		t.Fatalf("the taker reads the request: %v", err)
	}
	if req.URL.Path != "/" {
		t.Errorf("the taker read %q", req.URL.Path)
	}
	_, _ = io.WriteString(tc, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\ntaker")

	c2, err := tls.Dial("tcp", ln.Addr().String(), client)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	_, _ = io.WriteString(c2, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	for i, c := range []*tls.Conn{c1, c2} {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("answer %d: %v", i+1, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := []string{"taker", "server"}[i]; string(b) != want {
			t.Errorf("answer %d: %q, want %q", i+1, b, want)
		}
	}
	c2.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown with a taken connection open: %v", err)
	}
	if err := <-done; !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve: %v", err)
	}
	tc.Close()
}

// TestReverseProxyUpgrade runs httputil.ReverseProxy on this server in
// front of a backend that switches protocols: ReverseProxy hijacks through
// http.ResponseController and copies both ways.
func TestReverseProxyUpgrade(t *testing.T) {
	backend := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		_ = brw.Flush()
		for {
			line, err := brw.ReadString('\n')
			if err != nil {
				return
			}
			_, _ = brw.WriteString("echo " + line)
			_ = brw.Flush()
		}
	})}
	bln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = backend.Serve(bln) }()
	defer backend.Close()
	target, _ := url.Parse("http://" + bln.Addr().String())
	srv := &Server{Handler: httputil.NewSingleHostReverseProxy(target)}
	c := dial(t, serve(t, srv))
	br := bufio.NewReader(c)
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	for _, msg := range []string{"one\n", "two\n"} {
		_, _ = io.WriteString(c, msg)
		if got, _ := br.ReadString('\n'); got != "echo "+msg {
			t.Fatalf("got %q", got)
		}
	}
}

// TestDaemonChainLeavesWhenClientGoes serves the daemon's chain, a route
// limit (httplimit with a queue) in front of httputil.ReverseProxy over
// internal/upstream, and checks what the daemon relies on the client-gone
// watch for: a request waiting in the queue, and one waiting for its
// upstream's head, both end when their client goes, and every count
// returns to zero.
func TestDaemonChainLeavesWhenClientGoes(t *testing.T) {
	var inBackend atomic.Int32
	release := make(chan struct{})
	backend := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inBackend.Add(1)
		defer inBackend.Add(-1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
		_, _ = io.WriteString(w, "ok")
	})}
	bln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = backend.Serve(bln) }()
	defer backend.Close()
	defer close(release)

	up, err := uptransport.New(uptransport.Config{})
	if err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse("http://" + bln.Addr().String())
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = up.WithHeadTimeout(30 * time.Second)
	lim, err := httplimit.New(httplimit.Config{Policy: httplimit.Policy{Permits: 1, QueueSize: 4, QueueTimeout: 30 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	addr := serve(t, &Server{Handler: lim.Wrap(rp)})

	holder := dial(t, addr) // takes the permit, waits for the upstream's head
	_, _ = io.WriteString(holder, get)
	waitfor.Cond(t, "the first request at the backend", func() bool { return inBackend.Load() == 1 })
	queued := dial(t, addr) // waits in the queue
	_, _ = io.WriteString(queued, get)
	waitfor.Cond(t, "the second request queued", func() bool { return lim.Totals().Waiting == 1 })

	_ = queued.Close()
	waitfor.Cond(t, "the queued request to leave", func() bool { return lim.Totals().Waiting == 0 })
	_ = holder.Close()
	waitfor.Cond(t, "the upstream exchange to end", func() bool { return inBackend.Load() == 0 })
	waitfor.Cond(t, "the permit to return", func() bool { return lim.Totals().InUse == 0 })
	if tot := lim.Totals(); tot.Granted != 1 || tot.Abandoned != 1 {
		t.Errorf("totals %+v: want 1 granted, 1 abandoned", tot)
	}
}

var _ = context.Background
var _ = errors.New
