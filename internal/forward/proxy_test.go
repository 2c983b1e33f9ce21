package forward_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"github.com/seed-a07d1050/portcullis/internal/proxytest"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/httplimit"
	"github.com/seed-a07d1050/portcullis/internal/forward"
	"github.com/seed-a07d1050/portcullis/internal/waitfor"
)

func TestAbsoluteFormThroughGoClient(t *testing.T) {
	tg := proxytest.NewTarget(t, proxytest.TargetOptions{})
	s := newStack(t, stackOptions{users: []string{"alice", "alice-pw"}})
	c := proxyClient(t, s, "alice", "alice-pw", "127.0.0.2")

	got := do(t, c, http.MethodGet, "http://"+tg.Addr+"/echo?q=1", nil)
	if got.status != http.StatusOK {
		t.Fatalf("status %d: %s", got.status, got.body)
	}
	e := proxytest.DecodeEcho(t, []byte(got.body))
	if e.Host != tg.Addr || e.URI != "/echo?q=1" {
		t.Errorf("target saw Host %q URI %q", e.Host, e.URI)
	}
	if v := e.Header.Get("Proxy-Authorization"); v != "" {
		t.Errorf("Proxy-Authorization reached the target: %q", v)
	}
	if v := e.Header.Get("Via"); v != "1.1 portcullis" {
		t.Errorf("target saw Via %q", v)
	}
	if v := got.header.Get("Via"); v != "1.1 portcullis" {
		t.Errorf("client saw Via %q", v)
	}
	// A named target, and a request with a body (the fallback path).
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://target.test:"+tg.Port()+"/echo", strings.NewReader("hello"))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if e := proxytest.DecodeEcho(t, body); resp.StatusCode != http.StatusOK || e.Body != "hello" || e.Host != "target.test:"+tg.Port() {
		t.Fatalf("POST: %d %+v", resp.StatusCode, e)
	}
	// Without credentials: 407.
	if got := do(t, proxyClient(t, s, "", "", "127.0.0.3"), http.MethodGet, "http://"+tg.Addr+"/echo", nil); got.status != http.StatusProxyAuthRequired {
		t.Fatalf("no credentials: %d", got.status)
	}
}

func TestHopByHopHeadersRemoved(t *testing.T) {
	tg := proxytest.NewTarget(t, proxytest.TargetOptions{})
	s := newStack(t, stackOptions{users: []string{"alice", "alice-pw"}})
	c := rawConn(t, s, "127.0.0.2")
	br := bufio.NewReader(c)
	for i := range 2 { // two requests on one client connection: keep-alive
		fmt.Fprintf(c, "GET http://%s/echo?a=1;b=%%zz&c HTTP/1.1\r\nHost: wrong.example\r\n"+
			"X-Forwarded-For: 192.0.2.9\r\nForwarded: for=192.0.2.9\r\n"+
			"Proxy-Authorization: %s\r\nProxy-Connection: keep-alive\r\n"+
			"Connection: keep-alive, X-Secret\r\nX-Secret: s3cret\r\nKeep-Alive: timeout=5\r\n"+
			"TE: trailers, deflate\r\nUpgrade: h2c\r\nX-Kept: yes\r\n\r\n", tg.Addr, basic("alice", "alice-pw"))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
		e := proxytest.DecodeEcho(t, body)
		// ReverseProxy passes "TE: trailers" on (gRPC needs it), nothing else of TE.
		if v := e.Header.Get("Te"); v != "" && v != "trailers" {
			t.Errorf("TE reached the target: %q", v)
		}
		for _, h := range []string{"Proxy-Authorization", "Proxy-Connection", "X-Secret", "Keep-Alive", "Upgrade", "X-Forwarded-For", "Forwarded"} {
			if v := e.Header.Get(h); v != "" {
				t.Errorf("%s reached the target: %q", h, v)
			}
		}
		if e.Header.Get("X-Kept") != "yes" || e.Host != tg.Addr || e.URI != "/echo?a=1;b=%zz&c" {
			t.Errorf("target saw %+v", e)
		}
	}
}

// Target connections are pooled: sequential requests of keep-alive
// clients reuse one.
func TestTargetConnectionsPooled(t *testing.T) {
	tg := proxytest.NewTarget(t, proxytest.TargetOptions{})
	s := newStack(t, stackOptions{})
	for _, ip := range []string{"127.0.0.2", "127.0.0.3"} {
		c := proxyClient(t, s, "", "", ip)
		for range 5 {
			if got := do(t, c, http.MethodGet, "http://"+tg.Addr+"/echo", nil); got.status != http.StatusOK {
				t.Fatalf("status %d", got.status)
			}
		}
	}
	if n := tg.Conns.Load(); n != 1 {
		t.Fatalf("the target saw %d connections for 10 sequential requests, want 1", n)
	}
}

func TestRequestsRefusedByForm(t *testing.T) {
	s := newStack(t, stackOptions{})
	for _, tc := range []struct {
		name, raw string
		status    int
		body      string
	}{
		{"origin-form", "GET /index.html HTTP/1.1\r\nHost: proxy\r\n\r\n", 400, "this is a forward proxy"},
		{"https absolute-form", "GET https://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n", 400, "https targets go through CONNECT"},
		{"numeric host", "GET http://0x7f.1/ HTTP/1.1\r\nHost: x\r\n\r\n", 400, "numeric host"},
		{"connect path", "CONNECT /x HTTP/1.1\r\nHost: example.com\r\n\r\n", 400, "authority-form"},
		{"loop", "GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\nVia: 1.0 other, 1.1 portcullis\r\n\r\n", 508, "loop detected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := rawConn(t, s, "127.0.0.2")
			io.WriteString(c, tc.raw)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			body := readBody(t, resp)
			if resp.StatusCode != tc.status || !strings.Contains(body, tc.body) || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
				t.Fatalf("%d %q %v; want %d about %q", resp.StatusCode, body, resp.Header, tc.status, tc.body)
			}
		})
	}
}

// Under the default policy (nothing explicitly allowed), every internal
// destination is refused with 403 naming the rule, for absolute-form
// requests and CONNECT alike, whether written as an address or as a name
// resolving to one. No connection is attempted: the Control hook refuses
// before connect.
func TestDestinationPolicyRefusesByDefault(t *testing.T) {
	tg := proxytest.NewTarget(t, proxytest.TargetOptions{})
	// The built-in rules, with CONNECT let through to the ports that
	// absolute-form requests may use, so that the address rules decide.
	builtin, err := forward.NewPolicy(forward.PolicyConfig{ConnectPorts: forward.DefaultPorts})
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, stackOptions{proxy: forward.Config{Policy: builtin}})
	c := proxyClient(t, s, "", "", "127.0.0.2")
	for _, tc := range []struct{ authority, rule string }{
		{tg.Addr, "loopback 127.0.0.0/8 (RFC 1122)"},
		{"10.0.0.1:80", "private-use 10.0.0.0/8 (RFC 1918)"},
		{"[::1]:" + tg.Port(), "loopback ::1/128 (RFC 4291)"},
		{"169.254.169.254:80", "cloud metadata service 169.254.169.254"},
		{"internal.test:" + tg.Port(), "loopback 127.0.0.0/8 (RFC 1122)"}, // a name resolving to 127.0.0.1
		{"private.test:80", "private-use 10.0.0.0/8 (RFC 1918)"},
		{"[::ffff:127.0.0.1]:" + tg.Port(), "loopback 127.0.0.0/8 (RFC 1122)"},
		{"8.8.8.8:25", "port 25 is not among the "},
	} {
		t.Run(tc.authority, func(t *testing.T) {
			got := do(t, c, http.MethodGet, "http://"+tc.authority+"/echo", nil)
			if got.status != http.StatusForbidden || !strings.Contains(got.body, `rule "`+tc.rule) {
				t.Errorf("GET: %d %q; want 403 naming %q", got.status, got.body, tc.rule)
			}
			conn := rawConn(t, s, "127.0.0.3")
			_, resp := proxytest.Connect(t, conn, tc.authority, "")
			if body := readBody(t, resp); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, `rule "`+tc.rule) {
				t.Errorf("CONNECT: %d %q; want 403 naming %q", resp.StatusCode, body, tc.rule)
			}
		})
	}
	if n := tg.Conns.Load(); n != 0 {
		t.Fatalf("the loopback target was reached %d times", n)
	}
}

// CONNECT reaches 443 only by default, as Squid's SSL_ports: a CONNECT to
// any other port is refused before any dial with a 403 naming the target
// and the port, while an absolute-form request to the same port goes
// through (destinations.ports). Before connect_ports, a CONNECT to any
// port from 1024 up was tunnelled, and a refusal named "0.0.0.0:22".
func TestConnectPortsDefault443(t *testing.T) {
	tg := proxytest.NewTarget(t, proxytest.TargetOptions{})
	policy, err := forward.NewPolicy(forward.PolicyConfig{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, stackOptions{proxy: forward.Config{Policy: policy}})
	conn := rawConn(t, s, "127.0.0.3")
	_, resp := proxytest.Connect(t, conn, tg.Addr, "")
	body := readBody(t, resp)
	want := "forbidden: destination " + tg.Addr + ` refused by rule "port ` + tg.Port() + ` is not among the CONNECT ports (443)"`
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, want) {
		t.Errorf("CONNECT %s: %d %q; want 403 %q", tg.Addr, resp.StatusCode, body, want)
	}
	conn = rawConn(t, s, "127.0.0.3")
	_, resp = proxytest.Connect(t, conn, "8.8.8.8:22", "")
	if body := readBody(t, resp); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "destination 8.8.8.8:22 refused") {
		t.Errorf("CONNECT 8.8.8.8:22: %d %q; want 403 naming 8.8.8.8:22", resp.StatusCode, body)
	}
	if n := tg.Conns.Load(); n != 0 {
		t.Fatalf("a refused CONNECT reached the target (%d connections)", n)
	}
	c := proxyClient(t, s, "", "", "127.0.0.2")
	if got := do(t, c, http.MethodGet, "http://"+tg.Addr+"/echo", nil); got.status != http.StatusOK {
		t.Errorf("GET http://%s/echo: %d %q; want 200 (destinations.ports allows it)", tg.Addr, got.status, got.body)
	}

	open, err := forward.NewPolicy(forward.PolicyConfig{
		Allow:        []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		ConnectPorts: []forward.PortRange{{From: 443, To: 443}, {From: 1024, To: 65535}},
	})
	if err != nil {
		t.Fatal(err)
	}
	s = newStack(t, stackOptions{proxy: forward.Config{Policy: open}})
	conn = rawConn(t, s, "127.0.0.3")
	if _, resp = proxytest.Connect(t, conn, tg.Addr, ""); resp.StatusCode != http.StatusOK {
		t.Errorf("CONNECT %s with connect ports 443, 1024-65535: %d; want 200", tg.Addr, resp.StatusCode)
	}
}

func TestLoopbackReachableWhenAllowed(t *testing.T) {
	tg := proxytest.NewTarget(t, proxytest.TargetOptions{})
	s := newStack(t, stackOptions{}) // allowLoopback
	c := proxyClient(t, s, "", "", "127.0.0.2")
	for _, target := range []string{tg.Addr, "internal.test:" + tg.Port()} {
		if got := do(t, c, http.MethodGet, "http://"+target+"/echo", nil); got.status != http.StatusOK {
			t.Errorf("%s: %d %s", target, got.status, got.body)
		}
	}
}

func TestTargetFailures(t *testing.T) {
	tg := proxytest.NewTarget(t, proxytest.TargetOptions{})
	closed := closedPort(t)
	s := newStack(t, stackOptions{proxy: forward.Config{UpstreamTimeout: 200 * time.Millisecond}})
	c := proxyClient(t, s, "", "", "127.0.0.2")
	for _, tc := range []struct {
		name, url string
		status    int
		reason    string
	}{
		{"refused", "http://" + closed + "/", 502, "connection refused"},
		{"unknown name", "http://nowhere.test/", 502, "no such host"},
		{"slow head", "http://" + tg.Addr + "/sleep?d=5s", 504, "no response in time"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := do(t, c, http.MethodGet, tc.url, nil)
			if got.status != tc.status || !strings.Contains(got.body, tc.reason) {
				t.Fatalf("%d %q; want %d about %q", got.status, got.body, tc.status, tc.reason)
			}
		})
	}
	for _, tc := range []struct{ authority, reason string }{
		{closed, "connection refused"},
		{"nowhere.test:443", "no such host"},
	} {
		conn := rawConn(t, s, "127.0.0.3")
		_, resp := proxytest.Connect(t, conn, tc.authority, "")
		if body := readBody(t, resp); resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, tc.reason) {
			t.Errorf("CONNECT %s: %d %q", tc.authority, resp.StatusCode, body)
		}
	}
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestConnectHTTPS(t *testing.T) {
	tg := proxytest.NewTarget(t, proxytest.TargetOptions{Cert: sharedCert(t)})
	s := newStack(t, stackOptions{users: []string{"alice", "alice-pw"}})
	c := proxyClient(t, s, "alice", "alice-pw", "127.0.0.2")
	got := do(t, c, http.MethodGet, "https://"+tg.Addr+"/echo", nil)
	if got.status != http.StatusOK {
		t.Fatalf("status %d %s", got.status, got.body)
	}
	if e := proxytest.DecodeEcho(t, []byte(got.body)); e.Header.Get("Proxy-Authorization") != "" || e.Host != tg.Addr {
		t.Fatalf("target saw %+v", e)
	}
	_, err := try(t.Context(), proxyClient(t, s, "alice", "wrong", "127.0.0.3"), http.MethodGet, "https://"+tg.Addr+"/echo", nil)
	if err == nil || !strings.Contains(err.Error(), "Proxy Authentication Required") {
		t.Fatalf("CONNECT with a wrong password: %v", err)
	}
}

// A tunnel relays both ways and passes half-closes on: the client's EOF
// reaches the target, which answers after it, and the target's EOF reaches
// the client.
func TestConnectHalfClose(t *testing.T) {
	echo := proxytest.TCPEcho(t)
	s := newStack(t, stackOptions{})
	c := rawConn(t, s, "127.0.0.2")
	br, resp := proxytest.Connect(t, c, echo, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	io.WriteString(c, "ping\n")
	if line, err := br.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("echo %q %v", line, err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "bytes=5\n" {
		t.Fatalf("after half-close: %q %v", rest, err)
	}
	waitfor.Cond(t, "the tunnel to close", func() bool { return s.proxy.Tunnels() == 0 })
}

// Bytes a client sends right behind its CONNECT head, in the same packet,
// reach the target first.
func TestConnectPipelinedBytes(t *testing.T) {
	echo := proxytest.TCPEcho(t)
	s := newStack(t, stackOptions{})
	c := rawConn(t, s, "127.0.0.2")
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\nearly bytes\n", echo, echo)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	if line, err := br.ReadString('\n'); err != nil || line != "early bytes\n" {
		t.Fatalf("echo %q %v", line, err)
	}
}

// HTTP/2 CONNECT over an https listener: the tunnel is the stream; the
// limiter keeps its permit until the stream ends.
func TestConnectOverHTTP2(t *testing.T) {
	echo := proxytest.TCPEcho(t)
	s := newStack(t, stackOptions{
		tls:    true,
		users:  []string{"alice", "alice-pw"},
		limits: []httplimit.Config{{Key: httplimit.ByClientIP(nil), Policy: httplimit.Policy{Permits: 1}}},
	})
	tr := h2Client(t, s, "127.0.0.2")
	open := func(creds string) (*http.Response, *io.PipeWriter) {
		pr, pw := io.Pipe()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodConnect, s.srv.URL, pr)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = echo // the :authority of the CONNECT
		req.Header.Set("Proxy-Authorization", creds)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatalf("CONNECT over HTTP/2: %v", err)
		}
		return resp, pw
	}
	resp, pw := open(basic("alice", "alice-pw"))
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
		t.Fatalf("answer %s %d, want HTTP/2 200", resp.Proto, resp.StatusCode)
	}
	br := bufio.NewReader(resp.Body)
	fmt.Fprintln(pw, "over h2")
	if line, err := br.ReadString('\n'); err != nil || line != "over h2\n" {
		t.Fatalf("echo %q %v", line, err)
	}
	second, pw2 := open(basic("alice", "alice-pw"))
	pw2.Close()
	second.Body.Close()
	if second.StatusCode != http.StatusTooManyRequests {
		t.Errorf("second tunnel while the first is open: %d, want 429", second.StatusCode)
	}
	wrong, pw3 := open(basic("alice", "nope"))
	pw3.Close()
	wrong.Body.Close()
	if wrong.StatusCode != http.StatusProxyAuthRequired {
		t.Errorf("wrong password: %d", wrong.StatusCode)
	}
	// The client's END_STREAM half-closes towards the target, whose answer
	// and EOF come back.
	pw.Close()
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "bytes=8\n" {
		t.Fatalf("after END_STREAM: %q %v", rest, err)
	}
	resp.Body.Close()
	proxytest.ExpectIdle(t, s.limits...)
}

// The server's read and write timeouts bound requests, not tunnels: a
// tunnel outlives them, over HTTP/1.1 and HTTP/2.
func TestTunnelOutlivesServerTimeouts(t *testing.T) {
	echo := proxytest.TCPEcho(t)
	const timeouts = 100 * time.Millisecond
	t.Run("HTTP/1.1", func(t *testing.T) {
		s := newStack(t, stackOptions{serverTimeouts: timeouts})
		c := rawConn(t, s, "127.0.0.2")
		br, resp := proxytest.Connect(t, c, echo, "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT: %d", resp.StatusCode)
		}
		time.Sleep(3 * timeouts)
		io.WriteString(c, "late\n")
		if line, err := br.ReadString('\n'); err != nil || line != "late\n" {
			t.Fatalf("echo after the server timeouts: %q %v", line, err)
		}
	})
	t.Run("HTTP/2", func(t *testing.T) {
		s := newStack(t, stackOptions{serverTimeouts: timeouts, tls: true})
		tr := h2Client(t, s, "127.0.0.2")
		pr, pw := io.Pipe()
		defer pw.Close()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodConnect, s.srv.URL, pr)
		req.Host = echo
		resp, err := tr.RoundTrip(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		defer resp.Body.Close()
		time.Sleep(3 * timeouts)
		fmt.Fprintln(pw, "late")
		if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || line != "late\n" {
			t.Fatalf("echo after the server timeouts: %q %v", line, err)
		}
	})
}

// h2Client is an HTTP/2-only client of s's TLS listener, from ip.
func h2Client(t *testing.T, s *stack, ip string) *http.Transport {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(s.cert.TLS.Leaf)
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool},
		DialContext:     proxytest.DialerFrom(ip).DialContext,
		Protocols:       new(http.Protocols),
	}
	tr.Protocols.SetHTTP2(true) // HTTP/2 only: the CONNECT must be a stream
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

func TestTunnelIdleTimeout(t *testing.T) {
	echo := proxytest.TCPEcho(t)
	s := newStack(t, stackOptions{
		proxy:  forward.Config{TunnelIdleTimeout: 500 * time.Millisecond},
		limits: []httplimit.Config{{Policy: httplimit.Policy{Permits: 4}}},
	})
	c := rawConn(t, s, "127.0.0.2")
	br, resp := proxytest.Connect(t, c, echo, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	// Traffic keeps it open past the idle time (gaps of 25ms against an
	// idle time of 500ms leave room for a loaded machine)...
	start := time.Now()
	for time.Since(start) < 750*time.Millisecond {
		io.WriteString(c, "x\n")
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatalf("tunnel closed while busy, %v after it opened: %v", time.Since(start), err)
		}
		time.Sleep(25 * time.Millisecond)
	}
	// ...silence closes it.
	if _, err := io.ReadAll(br); err != nil && !errors.Is(err, net.ErrClosed) {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("the idle tunnel was not closed")
		}
	}
	waitfor.Cond(t, "the tunnel to close", func() bool { return s.proxy.Tunnels() == 0 })
	proxytest.ExpectIdle(t, s.limits...)
}

func TestTunnelLifetime(t *testing.T) {
	echo := proxytest.TCPEcho(t)
	s := newStack(t, stackOptions{proxy: forward.Config{TunnelLifetime: 150 * time.Millisecond}})
	c := rawConn(t, s, "127.0.0.2")
	br, resp := proxytest.Connect(t, c, echo, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	start := time.Now()
	for {
		if _, err := io.WriteString(c, "x\n"); err != nil {
			break
		}
		if _, err := br.ReadString('\n'); err != nil {
			break
		}
		if time.Since(start) > waitLimit {
			t.Fatal("the tunnel outlived its lifetime")
		}
		time.Sleep(10 * time.Millisecond)
	}
	waitfor.Cond(t, "the tunnel to close", func() bool { return s.proxy.Tunnels() == 0 })
}

func TestCloseCutsTunnels(t *testing.T) {
	echo := proxytest.TCPEcho(t)
	s := newStack(t, stackOptions{limits: []httplimit.Config{{Policy: httplimit.Policy{Permits: 4}}}})
	var readers []*bufio.Reader
	for _, ip := range []string{"127.0.0.2", "127.0.0.3"} {
		c := rawConn(t, s, ip)
		br, resp := proxytest.Connect(t, c, echo, "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT: %d", resp.StatusCode)
		}
		readers = append(readers, br)
	}
	waitfor.Cond(t, "two tunnels", func() bool { return s.proxy.Tunnels() == 2 })
	if n := s.limits[0].Totals().InUse; n != 2 {
		t.Fatalf("%d permits in use, want 2", n)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := s.proxy.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown with open tunnels: %v", err)
	}
	for _, br := range readers {
		if _, err := io.ReadAll(br); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("a tunnel stayed open after Shutdown")
			}
		}
	}
	waitfor.Cond(t, "the tunnels to close", func() bool { return s.proxy.Tunnels() == 0 })
	proxytest.ExpectIdle(t, s.limits...)
	// New CONNECTs are refused once closed.
	_, resp := proxytest.Connect(t, rawConn(t, s, "127.0.0.4"), echo, "")
	if body := readBody(t, resp); resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "shutting down") {
		t.Fatalf("CONNECT after Shutdown: %d %q", resp.StatusCode, body)
	}
}

func TestConfigErrors(t *testing.T) {
	if _, err := forward.New(forward.Config{Via: "has space"}); err == nil {
		t.Error("accepted a Via pseudonym with a space")
	}
	if _, err := forward.New(forward.Config{MaxIdleConns: -1}); err == nil {
		t.Error("accepted a negative MaxIdleConns")
	}
}

// TestShutdownWaitsForTunnels checks that Shutdown returns nil as soon as
// the last tunnel ends by itself, and refuses new CONNECTs meanwhile.
func TestShutdownWaitsForTunnels(t *testing.T) {
	echo := proxytest.TCPEcho(t)
	s := newStack(t, stackOptions{})
	c := rawConn(t, s, "127.0.0.2")
	br, resp := proxytest.Connect(t, c, echo, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	waitfor.Cond(t, "the tunnel", func() bool { return s.proxy.Tunnels() == 1 })
	done := make(chan error, 1)
	go func() { done <- s.proxy.Shutdown(context.Background()) }()
	waitfor.Cond(t, "new CONNECTs to be refused", func() bool {
		_, resp := proxytest.Connect(t, rawConn(t, s, "127.0.0.3"), echo, "")
		return resp.StatusCode == http.StatusServiceUnavailable
	})
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned %v with a tunnel open", err)
	default:
	}
	// The tunnel still carries bytes, then ends from the client's side.
	if _, err := io.WriteString(c, "ping"); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if got, _ := io.ReadAll(br); string(got) != "pingbytes=4\n" {
		t.Fatalf("through the draining tunnel: %q", got)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Shutdown: %v, want nil once the tunnel ended by itself", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("Shutdown did not return after the last tunnel ended")
	}
	st := s.proxy.Stats()
	if st.TunnelsOpen != 0 || st.TunnelsOpened != 1 || st.Refused == 0 {
		t.Fatalf("stats %+v, want 1 tunnel opened, none open, refusals counted", st)
	}
}

func TestStatsCountRefusals(t *testing.T) {
	s := newStack(t, stackOptions{defaultPolicy: true})
	c := proxyClient(t, s, "", "", "127.0.0.2")
	if a := do(t, c, "GET", "http://127.0.0.1:8080/", nil); a.status != http.StatusForbidden {
		t.Fatalf("loopback target: %d, want 403", a.status)
	}
	if a := do(t, c, "GET", "http://nowhere.test/", nil); a.status != http.StatusBadGateway {
		t.Fatalf("unknown name: %d, want 502", a.status)
	}
	if st := s.proxy.Stats(); st.Denied != 1 || st.TargetFailures != 1 {
		t.Fatalf("stats %+v, want 1 denied and 1 target failure", st)
	}
}
