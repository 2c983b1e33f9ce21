package forward_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/seed-a07d1050/portcullis/httplimit"
	"github.com/seed-a07d1050/portcullis/internal/forward"
	"github.com/seed-a07d1050/portcullis/internal/proxyauth"
	"github.com/seed-a07d1050/portcullis/internal/testcert"
	"github.com/seed-a07d1050/portcullis/internal/waitfor"
)

// waitLimit bounds every wait in these tests.
const waitLimit = 10 * time.Second

// mapResolver resolves the names it holds; any other name does not exist.
// Tests resolve names through it, never through the network.
type mapResolver map[string][]netip.Addr

func (m mapResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := m[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

var loopback = netip.MustParseAddr("127.0.0.1")

// testResolver knows the names the tests use.
var testResolver = mapResolver{
	"target.test":   {loopback},
	"slow.test":     {loopback},
	"fast.test":     {loopback},
	"internal.test": {loopback},
	"private.test":  {netip.MustParseAddr("10.0.0.1")},
}

// allowLoopback is the policy of most tests: the built-in rules, with
// loopback explicitly allowed so that targets on 127.0.0.1 are reachable.
func allowLoopback(t testing.TB) *forward.Policy {
	t.Helper()
	p, err := forward.NewPolicy(forward.PolicyConfig{Allow: []netip.Prefix{
		netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"),
	}, ConnectPorts: anyPort})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// stackOptions describe a forward-proxy listener as the daemon will
// assemble it: authentication, then limiters (outermost first), then the
// Proxy.
type stackOptions struct {
	users    []string // user, password pairs; nil: no authentication
	failures proxyauth.FailureLimiter
	limits   []httplimit.Config
	proxy    forward.Config // Policy nil: allowLoopback; Resolver nil: testResolver
	tls      bool           // serve HTTPS with HTTP/2 instead of HTTP/1.1
	// defaultPolicy keeps proxy.Policy nil: the built-in rules alone.
	defaultPolicy bool
	// serverTimeouts sets the http.Server's ReadTimeout and WriteTimeout.
	serverTimeouts time.Duration
}

type stack struct {
	url    *url.URL
	addr   string
	proxy  *forward.Proxy
	auth   *proxyauth.Authenticator
	limits []*httplimit.Limiter
	srv    *httptest.Server
	cert   *testcert.Cert // the proxy's and the TLS target's certificate
}

var quiet = slog.New(slog.DiscardHandler)

func newStack(t testing.TB, o stackOptions) *stack {
	t.Helper()
	cert := sharedCert(t)
	s := &stack{cert: cert}
	cfg := o.proxy
	if cfg.Policy == nil && !o.defaultPolicy {
		cfg.Policy = allowLoopback(t)
	}
	if cfg.Resolver == nil {
		cfg.Resolver = testResolver
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	p, err := forward.New(cfg)
	if err != nil {
		t.Fatalf("forward.New: %v", err)
	}
	s.proxy = p
	t.Cleanup(func() { p.Close() })
	var h http.Handler = p
	for i := len(o.limits) - 1; i >= 0; i-- {
		lc := o.limits[i]
		if lc.Logger == nil {
			lc.Logger = quiet
		}
		l, err := httplimit.New(lc)
		if err != nil {
			t.Fatalf("httplimit.New: %v", err)
		}
		t.Cleanup(func() { l.Close() })
		s.limits = append([]*httplimit.Limiter{l}, s.limits...)
		h = l.Wrap(h)
	}
	if o.users != nil {
		a, err := proxyauth.New(proxyauth.Config{
			File:     writeUsers(t, o.users...),
			Failures: o.failures,
			Logger:   quiet,
		})
		if err != nil {
			t.Fatalf("proxyauth.New: %v", err)
		}
		t.Cleanup(func() { a.Close() })
		s.auth = a
		h = a.Wrap(h)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Config.ReadHeaderTimeout = waitLimit
	srv.Config.ReadTimeout, srv.Config.WriteTimeout = o.serverTimeouts, o.serverTimeouts
	if o.tls {
		srv.EnableHTTP2 = true
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert.TLS}}
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	s.srv = srv
	s.url, _ = url.Parse(srv.URL)
	s.addr = s.url.Host
	return s
}

var newCert = sync.OnceValues(testcert.New)

// sharedCert is one certificate for every TLS server of the tests (proxy
// and targets): valid for 127.0.0.1, ::1 and localhost.
func sharedCert(t testing.TB) *testcert.Cert {
	t.Helper()
	c, err := newCert()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// writeUsers writes an htpasswd file (bcrypt at the least cost, to keep the
// tests fast) and returns its path.
func writeUsers(t testing.TB, pairs ...string) string {
	t.Helper()
	var b strings.Builder
	for i := 0; i+1 < len(pairs); i += 2 {
		h, err := bcrypt.GenerateFromPassword([]byte(pairs[i+1]), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s:$2y$%s\n", pairs[i], h[4:])
	}
	path := filepath.Join(t.TempDir(), "users.htpasswd")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// dialerFrom returns a dialer whose connections come from ip, so that each
// 127.0.0.X is its own client.
func dialerFrom(ip string) *net.Dialer {
	return &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: waitLimit}
}

// proxyClient returns a Go client sending its requests through s, with
// user's credentials (none when user is ""), from ip.
func proxyClient(t testing.TB, s *stack, user, pass, ip string) *http.Client {
	t.Helper()
	u := *s.url
	if user != "" {
		u.User = url.UserPassword(user, pass)
	}
	pool := x509.NewCertPool()
	pool.AddCert(s.cert.TLS.Leaf)
	tr := &http.Transport{
		Proxy:               http.ProxyURL(&u),
		DialContext:         dialerFrom(ip).DialContext,
		TLSClientConfig:     &tls.Config{RootCAs: pool},
		MaxIdleConnsPerHost: 16,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: waitLimit}
}

type answer struct {
	status int
	header http.Header
	body   string
}

func do(t testing.TB, c *http.Client, method, target string, header http.Header) answer {
	t.Helper()
	a, err := try(t.Context(), c, method, target, header)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	return a
}

func try(ctx context.Context, c *http.Client, method, target string, header http.Header) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, method, target, nil)
	if err != nil {
		return answer{}, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(body)}, err
}

func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

// target is an origin server on loopback that the proxy forwards to.
type target struct {
	srv     *httptest.Server
	addr    string // 127.0.0.1:port
	entered chan string
	release chan struct{}
	conns   atomic.Int32 // connections accepted
}

// newTarget starts an HTTP (or, with useTLS, HTTPS) target with these
// paths:
//
//	/echo     the request as the target saw it, as JSON
//	/slow     reports ?id= on entered, then waits for release
//	/sleep    sleeps ?d= before answering
//	/upgrade  answers 101 and echoes lines on the upgraded connection
func newTarget(t testing.TB, useTLS bool) *target {
	t.Helper()
	tg := &target{entered: make(chan string, 64), release: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		_ = json.NewEncoder(w).Encode(echoed{Host: r.Host, URI: r.RequestURI, Header: r.Header, Body: string(body)})
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		tg.entered <- r.URL.Query().Get("id")
		select {
		case <-tg.release:
		case <-r.Context().Done():
		case <-time.After(waitLimit):
		}
		io.WriteString(w, "slow done\n")
	})
	mux.HandleFunc("/sleep", func(w http.ResponseWriter, r *http.Request) {
		d, _ := time.ParseDuration(r.URL.Query().Get("d"))
		select {
		case <-time.After(d):
		case <-r.Context().Done():
		}
		io.WriteString(w, "slept\n")
	})
	mux.HandleFunc("/upgrade", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			http.Error(w, "want Upgrade: echo", http.StatusBadRequest)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		brw.Flush()
		for {
			line, err := brw.ReadString('\n')
			if err != nil {
				return
			}
			brw.WriteString(line)
			brw.Flush()
		}
	})
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			tg.conns.Add(1)
		}
	}
	if useTLS {
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{sharedCert(t).TLS}}
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(func() {
		select {
		case <-tg.release:
		default:
			close(tg.release)
		}
		srv.Close()
	})
	tg.srv = srv
	tg.addr = strings.TrimPrefix(strings.TrimPrefix(srv.URL, "http://"), "https://")
	return tg
}

func (tg *target) port() string {
	_, p, _ := net.SplitHostPort(tg.addr)
	return p
}

// next waits for the id of the next request to enter /slow.
func (tg *target) next(t testing.TB) string {
	t.Helper()
	select {
	case id := <-tg.entered:
		return id
	case <-time.After(waitLimit):
		t.Fatal("timed out waiting for a request to reach the target")
		return ""
	}
}

// echoed is what /echo answers.
type echoed struct {
	Host   string
	URI    string
	Header http.Header
	Body   string
}

func decodeEcho(t testing.TB, body string) echoed {
	t.Helper()
	var e echoed
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("echo body %q: %v", body, err)
	}
	return e
}

// rawConn opens a TCP connection to the proxy from ip.
func rawConn(t testing.TB, s *stack, ip string) net.Conn {
	t.Helper()
	c, err := dialerFrom(ip).Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(waitLimit))
	return c
}

// connect sends CONNECT authority on c with the given Proxy-Authorization
// (none when ""), and reads the answer's head.
func connect(t testing.TB, c net.Conn, authority, creds string) (*bufio.Reader, *http.Response) {
	t.Helper()
	head := "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n"
	if creds != "" {
		head += "Proxy-Authorization: " + creds + "\r\n"
	}
	if _, err := io.WriteString(c, head+"\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", authority, err)
	}
	return br, resp
}

// readBody reads a refusal's body (a CONNECT answer that is not 2xx has
// one).
func readBody(t testing.TB, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// expectIdle waits until every limiter of s holds and awaits nothing.
func expectIdle(t testing.TB, s *stack) {
	t.Helper()
	for i, l := range s.limits {
		waitfor.Cond(t, fmt.Sprintf("limiter %d to be idle", i), func() bool {
			tot := l.Totals()
			return tot.InUse == 0 && tot.Waiting == 0 && tot.Keys == 0
		})
	}
}

// tcpEcho starts a TCP server on loopback: for each connection it echoes
// what it reads until EOF, then writes "bytes=N\n" and closes.
func tcpEcho(t testing.TB) string {
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
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(waitLimit))
				n, _ := io.Copy(c, c)
				fmt.Fprintf(c, "bytes=%d\n", n)
			}()
		}
	}()
	return ln.Addr().String()
}

// anyPort lets the tests' CONNECTs reach loopback targets on the random
// ports they listen on (the default is 443 only).
var anyPort = []forward.PortRange{{From: 443, To: 443}, {From: 1024, To: 65535}}
