package intercept_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"github.com/seed-a07d1050/portcullis/internal/proxytest"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/httplimit"
	"github.com/seed-a07d1050/portcullis/internal/forward"
	"github.com/seed-a07d1050/portcullis/internal/intercept"
	"github.com/seed-a07d1050/portcullis/internal/proxyauth"
	"github.com/seed-a07d1050/portcullis/internal/waitfor"
)

func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

// The Go client, trusting the CA, gets its answer from the target through
// an intercepted session, over HTTP/2 to the proxy; the target sees its
// own name, the proxy's Via, and no proxy credentials.
func TestGoClientThroughInterception(t *testing.T) {
	tg := newTarget(t)
	s := newStack(t, stackOptions{users: []string{"alice", "alice-pw"}, limits: []httplimit.Config{userLimit(2)}})
	c := client(t, s, "alice", "alice-pw", "127.0.0.2", s.ca.pool)
	a := mustGet(t, c, "https://localhost:"+tg.Port()+"/echo?q=1")
	if a.status != http.StatusOK {
		t.Fatalf("status %d: %s", a.status, a.body)
	}
	if a.proto != "HTTP/2.0" {
		t.Errorf("client spoke %s with the proxy inside the session, want HTTP/2.0 (ALPN h2)", a.proto)
	}
	e := proxytest.DecodeEcho(t, a.body)
	if e.Host != "localhost:"+tg.Port() || e.URI != "/echo?q=1" {
		t.Errorf("target saw Host %q URI %q", e.Host, e.URI)
	}
	if v := e.Header.Get("Via"); !strings.Contains(v, "portcullis") {
		t.Errorf("target saw Via %q", v)
	}
	if e.Header.Get("Proxy-Authorization") != "" {
		t.Error("the proxy's credentials reached the target")
	}
	if v := a.header.Get("Via"); !strings.Contains(v, "portcullis") {
		t.Errorf("client saw Via %q", v)
	}
	st := s.ic.Stats()
	if st.Connects != 1 || st.Sessions != 1 || st.Requests != 1 || st.Leaves.Minted != 1 {
		t.Errorf("stats %+v, want one CONNECT, session, request and leaf", st)
	}
	proxytest.ExpectIdle(t, s.limits...)
}

// The requests inside a session carry what the CONNECT established: the
// verified user, the client's address, its forwarding headers (not those
// the client writes inside), and the target, by which a target_host limit
// keys them.
func TestInnerRequestCarriesConnectIdentity(t *testing.T) {
	tg := newTarget(t)
	seen := make(chan *http.Request, 1)
	s := newStack(t, stackOptions{users: []string{"alice", "alice-pw"}, innerSpy: func(r *http.Request) { seen <- r }})
	conn, _, status := rawConnect(t, s, "127.0.0.5", "localhost:"+tg.Port(), basic("alice", "alice-pw")+"\r\nX-Forwarded-For: 192.0.2.9")
	if !strings.HasPrefix(status, "200") {
		t.Fatalf("CONNECT: %s", status)
	}
	tc, err := handshake(t, conn, "localhost", s.ca.pool)
	if err != nil {
		t.Fatal(err)
	}
	resp, _ := roundTrip(t, tc, "GET /echo HTTP/1.1\r\nHost: localhost:"+tg.Port()+"\r\nX-Forwarded-For: 6.6.6.6\r\nForwarded: for=6.6.6.6\r\n\r\n")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	r := <-seen
	if u := proxyauth.UserOf(r); u != "alice" {
		t.Errorf("user %q, want alice", u)
	}
	if host, _, _ := net.SplitHostPort(r.RemoteAddr); host != "127.0.0.5" {
		t.Errorf("RemoteAddr %q, want the CONNECT's client 127.0.0.5", r.RemoteAddr)
	}
	if got := r.Header.Values("X-Forwarded-For"); len(got) != 1 || got[0] != "192.0.2.9" {
		t.Errorf("X-Forwarded-For %q, want the CONNECT's", got)
	}
	if got := r.Header.Get("Forwarded"); got != "" {
		t.Errorf("Forwarded %q written inside the session survived", got)
	}
	if key := forward.ByTargetHost()(r); key != "localhost:"+tg.Port() {
		t.Errorf("target_host key %q", key)
	}
	if r.URL.String() != "https://localhost:"+tg.Port()+"/echo" {
		t.Errorf("URL %s", r.URL)
	}
}

// The demonstration: a proxy_user limit of 2 admits two concurrent
// requests inside ONE intercepted session and refuses the third with 429,
// while the CONNECT itself holds nothing once interception started.
func TestUserLimitCountsRequestsInsideOneSession(t *testing.T) {
	tg := newTarget(t)
	s := newStack(t, stackOptions{users: []string{"alice", "alice-pw", "bob", "bob-pw"}, limits: []httplimit.Config{userLimit(2)}})
	c := client(t, s, "alice", "alice-pw", "127.0.0.2", s.ca.pool)
	base := "https://localhost:" + tg.Port()
	if a := mustGet(t, c, base+"/echo"); a.status != http.StatusOK {
		t.Fatalf("first request: %d", a.status)
	}
	// The session is open and idle: the CONNECT's permit went back when
	// interception started.
	if n := s.ic.Sessions(); n != 1 {
		t.Fatalf("%d sessions open, want 1", n)
	}
	proxytest.ExpectIdle(t, s.limits...)

	results := make(chan answer, 3)
	go func() { a, _ := get(t.Context(), c, base+"/slow?id=1"); results <- a }()
	go func() { a, _ := get(t.Context(), c, base+"/slow?id=2"); results <- a }()
	tg.Next(t)
	tg.Next(t)
	snap := s.limits[0].Snapshot(0)
	if len(snap.Exchanges.Keys) != 1 || snap.Exchanges.Keys[0].Key != "alice" || snap.Exchanges.Keys[0].InUse != 2 {
		t.Errorf("snapshot %+v, want alice holding 2 (the requests, one by one)", snap.Exchanges.Keys)
	}
	third := mustGet(t, c, base+"/echo")
	if third.status != http.StatusTooManyRequests {
		t.Errorf("third concurrent request: %d, want 429", third.status)
	}
	// Another user is not affected.
	if a := mustGet(t, client(t, s, "bob", "bob-pw", "127.0.0.3", s.ca.pool), base+"/echo"); a.status != http.StatusOK {
		t.Errorf("bob beside alice's two: %d", a.status)
	}
	tg.Open()
	for range 2 {
		if a := <-results; a.status != http.StatusOK {
			t.Errorf("slow request: %d", a.status)
		}
	}
	if st := s.ic.Stats(); st.Sessions != 2 || st.Connects != 2 {
		t.Errorf("stats %+v: want one session for alice (all her requests) and one for bob", st)
	}
	proxytest.ExpectIdle(t, s.limits...)
}

// The CONNECT holds its permit while the client has not finished its
// handshake, and gives it back as soon as it has: interception started.
func TestConnectPermitReleasedWhenInterceptionStarts(t *testing.T) {
	tg := newTarget(t)
	s := newStack(t, stackOptions{users: []string{"alice", "alice-pw"}, limits: []httplimit.Config{userLimit(1)}})
	conn, _, status := rawConnect(t, s, "127.0.0.2", "localhost:"+tg.Port(), basic("alice", "alice-pw"))
	if !strings.HasPrefix(status, "200") {
		t.Fatalf("CONNECT: %s", status)
	}
	if n := inUse(s); n != 1 {
		t.Errorf("%d permits in use before the handshake, want the CONNECT's 1", n)
	}
	tc, err := handshake(t, conn, "localhost", s.ca.pool)
	if err != nil {
		t.Fatal(err)
	}
	proxytest.ExpectIdle(t, s.limits...)
	// With the limit of 1 free again, a request inside fits.
	if resp, _ := roundTrip(t, tc, "GET /echo HTTP/1.1\r\nHost: localhost:"+tg.Port()+"\r\n\r\n"); resp.StatusCode != http.StatusOK {
		t.Errorf("request inside: %d", resp.StatusCode)
	}
	tc.Close()
	waitfor.Cond(t, "the session to close", func() bool { return s.ic.Sessions() == 0 })
	proxytest.ExpectIdle(t, s.limits...)
}

// A bypassed host stays a plain tunnel: the client sees the origin's own
// certificate, and nothing is intercepted. So does a target the Intercept
// list does not select, and one outside the CA's name constraints.
func TestBypassStaysPlainTunnel(t *testing.T) {
	tg := newTarget(t)
	constrained := newTestCA(t, intercept.CAOptions{PermittedDomains: []string{"example.com"}})
	for _, tc := range []struct {
		name string
		o    stackOptions
	}{
		{"bypass by name", stackOptions{intercept: intercept.Config{Bypass: intercept.MustParseRules("*.example.com", "localhost")}}},
		{"bypass by network", stackOptions{intercept: intercept.Config{Bypass: intercept.MustParseRules("127.0.0.0/8")}}},
		{"not selected", stackOptions{intercept: intercept.Config{Intercept: intercept.MustParseRules("*.example.com")}}},
		{"outside the CA's constraints", stackOptions{leaves: intercept.LeavesConfig{CA: constrained.ca}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStack(t, tc.o)
			c := client(t, s, "", "", "127.0.0.2", originCert(t).Pool)
			var peer *x509.Certificate
			c.Transport.(*http.Transport).TLSClientConfig.VerifyConnection = func(cs tls.ConnectionState) error {
				peer = cs.PeerCertificates[0]
				return nil
			}
			a := mustGet(t, c, "https://localhost:"+tg.Port()+"/echo")
			if a.status != http.StatusOK {
				t.Fatalf("status %d: %s", a.status, a.body)
			}
			if !peer.Equal(originCert(t).TLS.Leaf) {
				t.Errorf("client saw %q, want the origin's own certificate", peer.Subject)
			}
			if st := s.ic.Stats(); st.Tunnelled != 1 || st.Connects != 0 || st.Leaves.Minted != 0 {
				t.Errorf("stats %+v, want one tunnelled CONNECT and nothing intercepted", st)
			}
			if s.proxy.Tunnels() != 1 {
				t.Errorf("%d plain tunnels open, want 1", s.proxy.Tunnels())
			}
		})
	}
}

// A client that does not trust the CA fails its handshake; the failure
// is counted and no permit is left behind.
func TestClientNotTrustingCAFails(t *testing.T) {
	tg := newTarget(t)
	s := newStack(t, stackOptions{users: []string{"alice", "alice-pw"}, limits: []httplimit.Config{userLimit(1)}})
	c := client(t, s, "alice", "alice-pw", "127.0.0.2", originCert(t).Pool)
	_, err := get(t.Context(), c, "https://localhost:"+tg.Port()+"/echo")
	var ua x509.UnknownAuthorityError
	if !errors.As(err, &ua) {
		t.Fatalf("error %v, want an unknown authority", err)
	}
	waitfor.Cond(t, "the handshake failure to be counted", func() bool { return s.ic.Stats().HandshakeFailures == 1 })
	waitfor.Cond(t, "the session to close", func() bool { return s.ic.Sessions() == 0 })
	proxytest.ExpectIdle(t, s.limits...)
	if st := s.ic.Stats(); st.Sessions != 0 || st.Requests != 0 {
		t.Errorf("stats %+v, want no session", st)
	}
	if tg.Conns.Load() != 0 {
		t.Errorf("the target was contacted %d times", tg.Conns.Load())
	}
}

// 200 concurrent handshakes for 50 names mint exactly 50 leaves.
func TestConcurrentHandshakesMintOncePerName(t *testing.T) {
	s := newStack(t, stackOptions{})
	const names, handshakes = 50, 200
	var wg sync.WaitGroup
	errs := make(chan error, handshakes)
	start := make(chan struct{})
	for i := range handshakes {
		wg.Go(func() {
			name := fmt.Sprintf("host%d.test", i%names)
			<-start
			conn, _, status := rawConnect(t, s, "127.0.0.2", name+":443", "")
			if !strings.HasPrefix(status, "200") {
				errs <- fmt.Errorf("CONNECT %s: %s", name, status)
				return
			}
			tc, err := handshake(t, conn, name, s.ca.pool)
			if err != nil {
				errs <- fmt.Errorf("handshake %s: %w", name, err)
				return
			}
			if got := tc.ConnectionState().PeerCertificates[0].DNSNames; len(got) != 1 || got[0] != name {
				errs <- fmt.Errorf("leaf for %s names %v", name, got)
			}
			tc.Close()
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	waitfor.Cond(t, "every session to be counted", func() bool { return s.ic.Stats().Sessions == handshakes })
	st := s.ic.Stats()
	if st.Leaves.Minted != names {
		t.Errorf("minted %d leaves for %d names", st.Leaves.Minted, names)
	}
	if st.Leaves.Minted+st.Leaves.Hits+st.Leaves.Shared != handshakes || st.Leaves.Errors != 0 {
		t.Errorf("leaf stats %+v, want %d handshakes served", st.Leaves, handshakes)
	}
}

// Without SNI the leaf is minted for the CONNECT's authority: a name, or
// an IP address as an IP SAN (Go sends no SNI for an address).
func TestMissingSNIUsesConnectAuthority(t *testing.T) {
	tg := newTarget(t)
	s := newStack(t, stackOptions{})
	t.Run("name", func(t *testing.T) {
		conn, _, _ := rawConnect(t, s, "127.0.0.2", "localhost:"+tg.Port(), "")
		tc := tls.Client(conn, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"},
			VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
				leaf, err := x509.ParseCertificate(raw[0])
				if err != nil {
					return err
				}
				_, err = leaf.Verify(x509.VerifyOptions{Roots: s.ca.pool, DNSName: "localhost"})
				return err
			}})
		if err := tc.HandshakeContext(t.Context()); err != nil {
			t.Fatal(err)
		}
		if tc.ConnectionState().ServerName != "" {
			t.Fatal("the client sent SNI")
		}
		if resp, body := roundTrip(t, tc, "GET /echo HTTP/1.1\r\nHost: localhost:"+tg.Port()+"\r\n\r\n"); resp.StatusCode != http.StatusOK {
			t.Errorf("status %d: %s", resp.StatusCode, body)
		}
	})
	t.Run("address", func(t *testing.T) {
		conn, _, _ := rawConnect(t, s, "127.0.0.2", "127.0.0.1:"+tg.Port(), "")
		tc, err := handshake(t, conn, "127.0.0.1", s.ca.pool)
		if err != nil {
			t.Fatal(err)
		}
		if ips := tc.ConnectionState().PeerCertificates[0].IPAddresses; len(ips) != 1 || !ips[0].Equal(net.ParseIP("127.0.0.1")) {
			t.Errorf("leaf IP SANs %v", ips)
		}
		if resp, body := roundTrip(t, tc, "GET /echo HTTP/1.1\r\nHost: 127.0.0.1:"+tg.Port()+"\r\n\r\n"); resp.StatusCode != http.StatusOK {
			t.Errorf("status %d: %s", resp.StatusCode, body)
		}
	})
}

// A request inside a session for another host than the session's is
// answered 421: the certificate was made for one name.
func TestMisdirectedRequest(t *testing.T) {
	tg := newTarget(t)
	s := newStack(t, stackOptions{})
	conn, _, _ := rawConnect(t, s, "127.0.0.2", "localhost:"+tg.Port(), "")
	tc, err := handshake(t, conn, "localhost", s.ca.pool)
	if err != nil {
		t.Fatal(err)
	}
	resp, body := roundTrip(t, tc, "GET /echo HTTP/1.1\r\nHost: other.test:"+tg.Port()+"\r\n\r\n")
	if resp.StatusCode != http.StatusMisdirectedRequest || !strings.Contains(string(body), "this TLS session is for localhost:"+tg.Port()) {
		t.Errorf("status %d %q, want 421 naming the session's target", resp.StatusCode, body)
	}
	if s.ic.Stats().Misdirected != 1 {
		t.Errorf("stats %+v", s.ic.Stats())
	}
}

// A client speaking plain HTTP inside an intercepted CONNECT gets a plain
// 400 saying why; one sending anything else is closed. Both are counted
// and leave no permit.
func TestNotTLSInsideConnect(t *testing.T) {
	s := newStack(t, stackOptions{users: []string{"alice", "alice-pw"}, limits: []httplimit.Config{userLimit(1)}})
	t.Run("plain HTTP", func(t *testing.T) {
		conn, br, _ := rawConnect(t, s, "127.0.0.2", "example.test:443", basic("alice", "alice-pw"))
		io.WriteString(conn, "GET / HTTP/1.1\r\nHost: example.test\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "speak TLS") {
			t.Errorf("answer %d %q", resp.StatusCode, body)
		}
		proxytest.ExpectIdle(t, s.limits...)
	})
	t.Run("garbage", func(t *testing.T) {
		conn, br, _ := rawConnect(t, s, "127.0.0.2", "example.test:443", basic("alice", "alice-pw"))
		conn.Write([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8})
		// Closed with the ninth byte unread: an end of file or a reset.
		if n, err := br.Read(make([]byte, 16)); n != 0 || err == nil {
			t.Errorf("read %d bytes, %v; want the connection closed", n, err)
		}
		proxytest.ExpectIdle(t, s.limits...)
	})
	if st := s.ic.Stats(); st.NotTLS != 2 || st.Sessions != 0 {
		t.Errorf("stats %+v, want 2 not TLS", st)
	}
}

// A client that sends nothing after its CONNECT is closed after the
// handshake timeout, and its permit goes back.
func TestHandshakeTimeout(t *testing.T) {
	s := newStack(t, stackOptions{
		users:     []string{"alice", "alice-pw"},
		limits:    []httplimit.Config{userLimit(1)},
		intercept: intercept.Config{HandshakeTimeout: 100 * time.Millisecond},
	})
	_, br, _ := rawConnect(t, s, "127.0.0.2", "example.test:443", basic("alice", "alice-pw"))
	if n := inUse(s); n != 1 {
		t.Errorf("%d in use during the handshake, want 1", n)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("read: %v, want the proxy to close", err)
	}
	proxytest.ExpectIdle(t, s.limits...)
	if st := s.ic.Stats(); st.HandshakeFailures != 1 || st.Open != 0 {
		t.Errorf("stats %+v", st)
	}
}

// Permits come back to zero when the client resets its connection in the
// middle of a request, when the target fails, and when the interceptor is
// closed under a session.
func TestPermitsBackToZero(t *testing.T) {
	tg := newTarget(t)
	open := func(t *testing.T, s *stack) *tls.Conn {
		conn, _, status := rawConnect(t, s, "127.0.0.2", "localhost:"+tg.Port(), basic("alice", "alice-pw"))
		if !strings.HasPrefix(status, "200") {
			t.Fatalf("CONNECT: %s", status)
		}
		tc, err := handshake(t, conn, "localhost", s.ca.pool)
		if err != nil {
			t.Fatal(err)
		}
		return tc
	}
	opts := stackOptions{users: []string{"alice", "alice-pw"}, limits: []httplimit.Config{
		{Key: forward.ByTargetHost(), Policy: httplimit.Policy{Permits: 4}, Name: "target_host"}, userLimit(4),
	}}
	t.Run("client reset mid-request", func(t *testing.T) {
		s := newStack(t, opts)
		tc := open(t, s)
		io.WriteString(tc, "GET /slow?id=reset HTTP/1.1\r\nHost: localhost:"+tg.Port()+"\r\n\r\n")
		tg.Next(t)
		if n := inUse(s); n != 2 {
			t.Errorf("%d in use during the request, want 2 (target and user)", n)
		}
		raw := tc.NetConn().(*bufConn).Conn.(*net.TCPConn)
		raw.SetLinger(0) // RST
		raw.Close()
		proxytest.ExpectIdle(t, s.limits...)
		waitfor.Cond(t, "the session to end", func() bool { return s.ic.Sessions() == 0 })
	})
	t.Run("target fails", func(t *testing.T) {
		s := newStack(t, opts)
		tc := open(t, s)
		resp, body := roundTrip(t, tc, "GET /reset HTTP/1.1\r\nHost: localhost:"+tg.Port()+"\r\n\r\n")
		if resp.StatusCode != http.StatusBadGateway {
			t.Errorf("status %d %q, want 502", resp.StatusCode, body)
		}
		proxytest.ExpectIdle(t, s.limits...)
	})
	t.Run("target down", func(t *testing.T) {
		s := newStack(t, opts)
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		conn, _, _ := rawConnect(t, s, "127.0.0.2", fmt.Sprintf("localhost:%d", port), basic("alice", "alice-pw"))
		tc, err := handshake(t, conn, "localhost", s.ca.pool)
		if err != nil {
			t.Fatal(err)
		}
		resp, body := roundTrip(t, tc, fmt.Sprintf("GET / HTTP/1.1\r\nHost: localhost:%d\r\n\r\n", port))
		if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "connection refused") {
			t.Errorf("status %d %q, want 502 connection refused", resp.StatusCode, body)
		}
		proxytest.ExpectIdle(t, s.limits...)
	})
	t.Run("close under a session", func(t *testing.T) {
		s := newStack(t, opts)
		tc := open(t, s)
		io.WriteString(tc, "GET /slow?id=close HTTP/1.1\r\nHost: localhost:"+tg.Port()+"\r\n\r\n")
		tg.Next(t)
		half := open(t, s) // a second session, idle
		_ = half
		pending, _, _ := rawConnect(t, s, "127.0.0.2", "localhost:"+tg.Port(), basic("alice", "alice-pw")) // in its handshake
		_ = pending
		s.ic.Close()
		if _, err := tc.Read(make([]byte, 1)); err == nil {
			t.Error("the session survived Close")
		}
		proxytest.ExpectIdle(t, s.limits...)
		if n := s.ic.Sessions(); n != 0 {
			t.Errorf("%d sessions after Close", n)
		}
		// A new CONNECT to intercept is refused now.
		_, _, status := rawConnect(t, s, "127.0.0.3", "localhost:"+tg.Port(), basic("alice", "alice-pw"))
		if !strings.HasPrefix(status, "503") {
			t.Errorf("CONNECT after Close: %s, want 503", status)
		}
		proxytest.ExpectIdle(t, s.limits...)
	})
	t.Run("shutdown waits for a request, then closes", func(t *testing.T) {
		s := newStack(t, opts)
		tc := open(t, s)
		io.WriteString(tc, "GET /slow?id=shutdown HTTP/1.1\r\nHost: localhost:"+tg.Port()+"\r\n\r\n")
		tg.Next(t)
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		if err := s.ic.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Shutdown: %v, want the deadline (a request was under way)", err)
		}
		proxytest.ExpectIdle(t, s.limits...)
		if n := s.ic.Sessions(); n != 0 {
			t.Errorf("%d sessions after Shutdown", n)
		}
	})
}

// An idle session ends by itself at Shutdown.
func TestShutdownIdleSession(t *testing.T) {
	tg := newTarget(t)
	s := newStack(t, stackOptions{})
	conn, _, _ := rawConnect(t, s, "127.0.0.2", "localhost:"+tg.Port(), "")
	tc, err := handshake(t, conn, "localhost", s.ca.pool)
	if err != nil {
		t.Fatal(err)
	}
	if resp, _ := roundTrip(t, tc, "GET /echo HTTP/1.1\r\nHost: localhost:"+tg.Port()+"\r\n\r\n"); resp.StatusCode != http.StatusOK {
		t.Fatal(resp.Status)
	}
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	if err := s.ic.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v, want nil: the session was idle", err)
	}
	if n := s.ic.Sessions(); n != 0 {
		t.Errorf("%d sessions", n)
	}
}

// A client naming another host in SNI than in its CONNECT gets it
// intercepted only if a CONNECT to that host would have been.
func TestSNIDifferentFromConnect(t *testing.T) {
	tg := newTarget(t)
	s := newStack(t, stackOptions{intercept: intercept.Config{Bypass: intercept.MustParseRules("pinned.test")}})
	conn, _, _ := rawConnect(t, s, "127.0.0.2", "other.test:"+tg.Port(), "")
	tc, err := handshake(t, conn, "localhost", s.ca.pool)
	if err != nil {
		t.Fatalf("SNI localhost in a CONNECT to other.test: %v", err)
	}
	// The session is for the name in SNI.
	if resp, body := roundTrip(t, tc, "GET /echo HTTP/1.1\r\nHost: localhost:"+tg.Port()+"\r\n\r\n"); resp.StatusCode != http.StatusOK {
		t.Errorf("status %d %q", resp.StatusCode, body)
	}
	conn, _, _ = rawConnect(t, s, "127.0.0.2", "other.test:"+tg.Port(), "")
	if _, err := handshake(t, conn, "pinned.test", s.ca.pool); err == nil {
		t.Error("a bypassed host named in SNI was intercepted")
	}
	waitfor.Cond(t, "the refusal to be counted", func() bool { return s.ic.Stats().HandshakeFailures == 1 })
}

// An upgraded connection inside a session (a WebSocket, say) holds its
// permits until it closes, as a tunnel does, and Close cuts it. The
// target offers HTTP/2, and the upgrade still reaches it over HTTP/1.1.
func TestUpgradeInsideSession(t *testing.T) {
	tg := newTarget(t)
	s := newStack(t, stackOptions{users: []string{"alice", "alice-pw"}, limits: []httplimit.Config{userLimit(2)}})
	for _, closeBy := range []string{"client", "interceptor"} {
		t.Run(closeBy, func(t *testing.T) {
			conn, _, _ := rawConnect(t, s, "127.0.0.2", "localhost:"+tg.Port(), basic("alice", "alice-pw"))
			tc, err := handshake(t, conn, "localhost", s.ca.pool)
			if err != nil {
				t.Fatal(err)
			}
			io.WriteString(tc, "GET /upgrade HTTP/1.1\r\nHost: localhost:"+tg.Port()+"\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
			br := bufio.NewReader(tc)
			resp, err := http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("upgrade: %v %v %s", resp.Status, err, b)
			}
			io.WriteString(tc, "ping\n")
			if line, err := br.ReadString('\n'); err != nil || line != "ping\n" {
				t.Fatalf("echo %q %v", line, err)
			}
			if n := inUse(s); n != 1 {
				t.Errorf("%d in use with the upgraded connection open, want 1", n)
			}
			if n := s.ic.Sessions(); n != 1 {
				t.Errorf("%d sessions, want the upgraded one", n)
			}
			if closeBy == "client" {
				tc.Close()
			} else {
				s.ic.Close()
				if _, err := br.ReadString('\n'); err == nil {
					t.Error("the upgraded connection survived Close")
				}
			}
			proxytest.ExpectIdle(t, s.limits...)
			waitfor.Cond(t, "the session to end", func() bool { return s.ic.Sessions() == 0 })
		})
	}
}

// With DisableHTTP2 the session speaks HTTP/1.1 whatever the client
// offers.
func TestDisableHTTP2(t *testing.T) {
	tg := newTarget(t)
	s := newStack(t, stackOptions{intercept: intercept.Config{DisableHTTP2: true}})
	a := mustGet(t, client(t, s, "", "", "127.0.0.2", s.ca.pool), "https://localhost:"+tg.Port()+"/echo")
	if a.status != http.StatusOK || a.proto != "HTTP/1.1" {
		t.Errorf("answer %d over %s, want 200 over HTTP/1.1", a.status, a.proto)
	}
}
