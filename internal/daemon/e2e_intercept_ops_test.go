package daemon_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// TestInterceptReload reloads an intercepting listener: a new bypass list
// applies to new CONNECTs; an unchanged CA keeps the leaf cache (no name
// is minted twice); a CA file that does not load fails the reload and
// nothing changes; a reload of the limits alone keeps the open sessions,
// whose next requests count under the new limits; a renewed CA in the same
// files signs the leaves from then on.
func TestInterceptReload(t *testing.T) { defaultServer(t, testInterceptReload) }

func testInterceptReload(t *testing.T) {
	d := startIntercept(t, interceptAuthed, "")
	byIP := "https://" + d.target.addr + "/echo" // not bypassed by "localhost"
	for _, u := range []string{d.targetURL("/echo"), byIP} {
		if a := goGet(t, d.icClient("alice", "alice-pw", "127.0.0.2", d.ca.pool, false), u); a.status != "200" {
			t.Fatalf("GET %s: %+v", u, a)
		}
	}
	if m := d.minted(); m != 2 {
		t.Fatalf("%v leaves minted for two names, want 2", m)
	}

	t.Run("bypass list", func(t *testing.T) {
		if err := d.reload(`"localhost"`); err != nil {
			t.Fatal(err)
		}
		resp, err := d.icClient("alice", "alice-pw", "127.0.0.3", sharedCert(t).Pool, false).Get(d.targetURL("/echo"))
		if err != nil {
			t.Fatalf("a host bypassed by the reload: %v", err)
		}
		resp.Body.Close()
		if issuer := peerIssuer(t, resp); issuer != "portcullis test" {
			t.Fatalf("after the reload the bypassed host showed a certificate of %q", issuer)
		}
		hits := d.metric(`portcullis_intercept_leaves_cache_hits_total{listener="egress"}`)
		if a := goGet(t, d.icClient("alice", "alice-pw", "127.0.0.4", d.ca.pool, false), byIP); a.status != "200" {
			t.Fatalf("an address still intercepted: %+v", a)
		}
		if m := d.minted(); m != 2 {
			t.Errorf("%v leaves minted after the reload, want still 2: the CA did not change, so its cache stays", m)
		}
		if h := d.metric(`portcullis_intercept_leaves_cache_hits_total{listener="egress"}`); h != hits+1 {
			t.Errorf("%v cache hits after a handshake for a name minted before the reload, want %v", h, hits+1)
		}
	})

	t.Run("a CA that does not load", func(t *testing.T) {
		// The configuration was read while the file was good; then the
		// file was broken before the reload read it (as SIGHUP reads).
		cfg := d.nextConfig(`"localhost", "*.apple.com"`)
		good, err := os.ReadFile(d.ca.certFile)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, d.ca.certFile, []byte("not a certificate\n"))
		err = d.srv.Reload(cfg)
		writeFile(t, d.ca.certFile, good)
		if err == nil || !strings.Contains(err.Error(), "forward.intercept.ca_cert: does not load") {
			t.Fatalf("reload with a CA file that does not load: %v", err)
		}
		cfg = d.nextConfig(`"localhost"`)
		ic := cfg.Listeners[0].Forward.Intercept
		ic.Bypass = append(ic.Bypass, "*.example.com:443")
		if err := d.srv.Reload(cfg); err == nil || !strings.Contains(err.Error(), "forward.intercept.bypass[1]: a rule names no port") {
			t.Fatalf("reload with a bad bypass rule: %v", err)
		}
		// Nothing changed: the host is still bypassed, the address still
		// intercepted with the same CA and its cached leaf.
		resp, err := d.icClient("alice", "alice-pw", "127.0.0.5", sharedCert(t).Pool, false).Get(d.targetURL("/echo"))
		if err != nil {
			t.Fatalf("after failed reloads: %v", err)
		}
		resp.Body.Close()
		if a := goGet(t, d.icClient("alice", "alice-pw", "127.0.0.6", d.ca.pool, false), byIP); a.status != "200" {
			t.Fatalf("after failed reloads: %+v", a)
		}
		if m := d.minted(); m != 2 {
			t.Errorf("%v leaves minted, want still 2", m)
		}
	})

	t.Run("limits only: sessions stay, under the new limits", func(t *testing.T) {
		c := d.icClient("alice", "alice-pw", "127.0.0.7", d.ca.pool, false)
		goGet(t, c, byIP)
		sessions := d.intercepted().Sessions
		if err := d.reload(`"localhost"`, "{key: proxy_user, permits: 2}", "{key: proxy_user, permits: 1}"); err != nil {
			t.Fatal(err)
		}
		lim := d.forwardLimit("egress", "proxy_user")
		if lim.Permits != 1 || lim.Totals.Granted != 0 {
			t.Fatalf("proxy_user limit after the reload: %+v, want a new one of 1 permit", lim)
		}
		goGet(t, c, byIP)
		if n := d.intercepted().Sessions; n != sessions {
			t.Errorf("%d sessions after the reload, want still %d: the open session carries on", n, sessions)
		}
		if g := d.forwardLimit("egress", "proxy_user").Totals.Granted; g != 1 {
			t.Errorf("the new proxy_user limit granted %d permits, want 1: the kept session's request counts under it", g)
		}
	})

	t.Run("a renewed CA in the same files", func(t *testing.T) {
		renewed := newTestCA(t, "portcullis renewed test CA")
		for _, f := range [][2]string{{renewed.certFile, d.ca.certFile}, {renewed.keyFile, d.ca.keyFile}} {
			b, err := os.ReadFile(f[0])
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, f[1], b)
		}
		if err := d.reload(`"localhost"`, "{key: proxy_user, permits: 2}", "{key: proxy_user, permits: 1}"); err != nil {
			t.Fatal(err)
		}
		resp, err := d.icClient("alice", "alice-pw", "127.0.0.8", renewed.pool, false).Get(byIP)
		if err != nil {
			t.Fatalf("a client trusting the renewed CA: %v", err)
		}
		resp.Body.Close()
		if issuer := peerIssuer(t, resp); issuer != "portcullis renewed test CA" {
			t.Errorf("leaf issued by %q after the CA was renewed", issuer)
		}
		if _, err := d.icClient("alice", "alice-pw", "127.0.0.9", d.ca.pool, false).Get(byIP); err == nil {
			t.Error("a client trusting only the old CA accepted a leaf after the renewal")
		}
	})
}

// fwdInUse sums the permits in use of the listener's forward limits.
func (d *icDaemon) fwdInUse() int {
	n := 0
	for _, l := range d.listenerNow("egress").Forward.Limits {
		n += l.Totals.InUse
	}
	return n
}

// session is an intercepted HTTP/1.1 session opened by hand.
type session struct {
	raw net.Conn
	tc  *tls.Conn
	br  *bufio.Reader
}

// openSession sends CONNECT localhost:port as alice from ip and takes the
// TLS handshake inside, offering HTTP/1.1 only.
func (d *icDaemon) openSession(ip string) *session {
	d.t.Helper()
	tu, resp := d.openTunnel("egress", ip, "localhost:"+d.port(), basicAuth("alice", "alice-pw"))
	if resp.StatusCode != http.StatusOK {
		d.t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	if tu.br.Buffered() != 0 {
		d.t.Fatal("bytes after the CONNECT answer")
	}
	tc := tls.Client(tu.c, &tls.Config{ServerName: "localhost", RootCAs: d.ca.pool, NextProtos: []string{"http/1.1"}})
	if err := tc.Handshake(); err != nil {
		d.t.Fatal(err)
	}
	return &session{raw: tu.c, tc: tc, br: bufio.NewReader(tc)}
}

// send writes a GET of path to the target.
func (s *session) send(t *testing.T, d *icDaemon, path string) {
	t.Helper()
	if _, err := io.WriteString(s.tc, "GET "+path+" HTTP/1.1\r\nHost: localhost:"+d.port()+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
}

// TestInterceptPermitsBackToZero drives the failure paths of the requests
// inside intercepted sessions and checks after each that every permit came
// back: a client reset in the middle of a request, a target that fails, a
// reload that replaces the interceptor while a request is under way (cut
// after the drain time), and shutdown with a request under way and an idle
// session.
func TestInterceptPermitsBackToZero(t *testing.T) { defaultServer(t, testInterceptPermitsBackToZero) }

func testInterceptPermitsBackToZero(t *testing.T) {
	d := startIntercept(t, interceptAuthed, "")
	d.manualStop = true

	t.Run("client reset mid-session", func(t *testing.T) {
		s := d.openSession("127.0.0.2")
		s.send(t, d, "/slow")
		d.waitFor("the request at the target", func() bool { return d.target.inFlight.Load() == 1 })
		if n := d.fwdInUse(); n != 1 {
			t.Fatalf("%d permits in use, want the inner request's 1 (the CONNECT's went back)", n)
		}
		resetConn(s.raw)
		d.waitFor("permits back after the reset", func() bool { return d.allIdle("egress") })
		d.waitFor("the target's request cancelled", func() bool { return d.target.inFlight.Load() == 0 })
	})

	t.Run("target failure", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := ln.Addr().String()
		ln.Close()
		_, port, _ := net.SplitHostPort(closed)
		c := d.icClient("alice", "alice-pw", "127.0.0.3", d.ca.pool, false)
		st, body, _ := get(t, c, "https://localhost:"+port+"/")
		if st != http.StatusBadGateway || !strings.Contains(body, "localhost:"+port) {
			t.Fatalf("a target refusing connections: %d %q, want 502 naming it", st, body)
		}
		d.waitFor("permits back after the target failed", func() bool { return d.allIdle("egress") })
	})

	t.Run("reload during a request", func(t *testing.T) {
		s := d.openSession("127.0.0.4")
		s.send(t, d, "/slow")
		d.waitFor("the request at the target", func() bool { return d.target.inFlight.Load() == 1 })
		// A new bypass list makes a new interceptor; the old one lets the
		// request run for the drain time (2s), then cuts it.
		if err := d.reload(`"bypassed.example"`); err != nil {
			t.Fatal(err)
		}
		if n := d.fwdInUse(); n != 1 {
			t.Fatalf("%d permits in use after the reload, want the request's 1", n)
		}
		d.waitFor("permits back once the old interceptor cut its session", func() bool { return d.allIdle("egress") })
		if _, err := s.br.ReadByte(); err == nil {
			t.Error("the cut session answered")
		}
		if a := goGet(t, d.icClient("alice", "alice-pw", "127.0.0.5", d.ca.pool, false), d.targetURL("/echo")); a.status != "200" {
			t.Fatalf("a new session after the reload: %+v", a)
		}
	})

	t.Run("shutdown", func(t *testing.T) {
		idle := d.openSession("127.0.0.6")
		s := d.openSession("127.0.0.7")
		s.send(t, d, "/slow")
		d.waitFor("the request at the target", func() bool { return d.target.inFlight.Load() == 1 })
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		if err := d.srv.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("shutdown with a request under way: %v, want the deadline", err)
		}
		for _, x := range []*session{idle, s} {
			_ = x.raw.SetReadDeadline(time.Now().Add(waitLimit))
			if _, err := x.br.ReadByte(); err == nil || isTimeout(err) {
				t.Fatalf("a session stayed open after shutdown: %v", err)
			}
		}
		if !d.allIdle("egress") {
			b, _ := json.MarshalIndent(d.listenerNow("egress"), "", "  ")
			t.Fatalf("permits held after shutdown: %s", b)
		}
		if n := d.listenerNow("egress").Forward.Intercept.SessionsOpen; n != 0 {
			t.Fatalf("%d sessions open after shutdown", n)
		}
	})
}
