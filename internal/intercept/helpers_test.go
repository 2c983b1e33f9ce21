package intercept_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
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
	"github.com/seed-a07d1050/portcullis/internal/intercept"
	"github.com/seed-a07d1050/portcullis/internal/proxyauth"
	"github.com/seed-a07d1050/portcullis/internal/testcert"
	"github.com/seed-a07d1050/portcullis/internal/waitfor"
)

// waitLimit bounds every wait in these tests.
const waitLimit = 10 * time.Second

var quiet = slog.New(slog.DiscardHandler)

// mapResolver resolves the names it holds; any other name does not exist.
type mapResolver map[string][]netip.Addr

func (m mapResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := m[host]; ok {
		return a, nil
	}
	if strings.HasSuffix(host, ".test") {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// testResolver resolves localhost and every name under .test to
// 127.0.0.1, without the network.
var testResolver = mapResolver{"localhost": {netip.MustParseAddr("127.0.0.1")}}

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

// testCA is a CA made for the test, its PEM and a pool trusting it.
type testCA struct {
	ca       *intercept.CA
	certPEM  []byte
	keyPEM   []byte
	pool     *x509.CertPool
	certFile string
}

func newTestCA(t testing.TB, opts intercept.CAOptions) *testCA {
	t.Helper()
	certPEM, keyPEM, err := intercept.NewCA(opts)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := intercept.ParseCA(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Certificate())
	file := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(file, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return &testCA{ca: ca, certPEM: certPEM, keyPEM: keyPEM, pool: pool, certFile: file}
}

var sharedCA = sync.OnceValue(func() *testCA {
	certPEM, keyPEM, err := intercept.NewCA(intercept.CAOptions{CommonName: "portcullis intercept test CA"})
	if err != nil {
		panic(err)
	}
	ca, err := intercept.ParseCA(certPEM, keyPEM)
	if err != nil {
		panic(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Certificate())
	return &testCA{ca: ca, certPEM: certPEM, keyPEM: keyPEM, pool: pool}
})

var newOriginCert = sync.OnceValues(testcert.New)

// originCert is the certificate of the TLS targets: valid for localhost,
// 127.0.0.1 and ::1, self-signed (its Pool trusts it).
func originCert(t testing.TB) *testcert.Cert {
	t.Helper()
	c, err := newOriginCert()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// stackOptions describe a forward-proxy listener with interception, as the
// daemon will assemble it: authentication, limits, the interceptor in
// front of the proxy; inside sessions, the same limits then the upstream.
type stackOptions struct {
	users       []string // user, password pairs; nil: no authentication
	limits      []httplimit.Config
	intercept   intercept.Config         // Leaves and Handler are filled in
	upstream    intercept.UpstreamConfig // RootCAs nil: the origin's pool; Dialer: the proxy's
	systemRoots bool                     // keep upstream.RootCAs nil
	leaves      intercept.LeavesConfig   // CA nil: the shared test CA
	proxyTLS    bool                     // serve the proxy over TLS with HTTP/2
	innerSpy    func(*http.Request)      // called with each request inside, before the limits
}

type stack struct {
	addr     string
	url      *url.URL
	proxy    *forward.Proxy
	ic       *intercept.Interceptor
	upstream *intercept.Upstream
	leaves   *intercept.Leaves
	limits   []*httplimit.Limiter
	ca       *testCA
	srv      *httptest.Server
}

func newStack(t testing.TB, o stackOptions) *stack {
	t.Helper()
	s := &stack{ca: sharedCA()}
	p, err := forward.New(forward.Config{Policy: allowLoopback(t), Resolver: testResolver, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	s.proxy = p

	uc := o.upstream
	if uc.RootCAs == nil && !o.systemRoots {
		uc.RootCAs = originCert(t).Pool
	}
	if uc.Dialer == nil {
		uc.Dialer = p.Dialer()
	}
	if uc.Logger == nil {
		uc.Logger = quiet
	}
	up, err := intercept.NewUpstream(uc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Close() })
	s.upstream = up

	lc := o.leaves
	if lc.CA == nil {
		lc.CA = s.ca.ca
	}
	leaves, err := intercept.NewLeaves(lc)
	if err != nil {
		t.Fatal(err)
	}
	s.leaves = leaves

	limits := func(h http.Handler) http.Handler { return h }
	for i := len(o.limits) - 1; i >= 0; i-- {
		cfg := o.limits[i]
		if cfg.Logger == nil {
			cfg.Logger = quiet
		}
		l, err := httplimit.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		s.limits = append([]*httplimit.Limiter{l}, s.limits...)
		inner := limits
		limits = func(h http.Handler) http.Handler { return inner(l.Wrap(h)) }
	}

	var inside http.Handler = limits(up)
	if o.innerSpy != nil {
		spied := inside
		inside = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			o.innerSpy(r)
			spied.ServeHTTP(w, r)
		})
	}
	ic := o.intercept
	ic.Leaves, ic.Handler = leaves, inside
	if ic.Policy == nil {
		ic.Policy = p.Dialer().Policy()
	}
	if ic.Resolver == nil {
		ic.Resolver = testResolver
	}
	if ic.Logger == nil {
		ic.Logger = quiet
	}
	icp, err := intercept.New(ic)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { icp.Close() })
	s.ic = icp

	h := limits(icp.Wrap(p))
	if o.users != nil {
		a, err := proxyauth.New(proxyauth.Config{File: writeUsers(t, o.users...), Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		h = a.Wrap(h)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Config.ReadHeaderTimeout = waitLimit
	if o.proxyTLS {
		srv.EnableHTTP2 = true
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{originCert(t).TLS}}
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

// writeUsers writes an htpasswd file with bcrypt at its least cost.
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

// userLimit is a proxy_user limit of n, refusing at once.
func userLimit(n int) httplimit.Config {
	return httplimit.Config{Key: httplimit.KeyFunc(proxyauth.UserOf), Policy: httplimit.Policy{Permits: n}, Name: "proxy_user"}
}

// expectIdle waits until every limiter of s holds and awaits nothing, and
// no intercepted session is open.
func expectIdle(t testing.TB, s *stack) {
	t.Helper()
	for i, l := range s.limits {
		waitfor.Cond(t, fmt.Sprintf("limiter %d to be idle", i), func() bool {
			tot := l.Totals()
			return tot.InUse == 0 && tot.Waiting == 0 && tot.Keys == 0
		})
	}
}

// inUse is the number of permits the limiters of s hold.
func inUse(s *stack) int {
	n := 0
	for _, l := range s.limits {
		n += l.Totals().InUse
	}
	return n
}

func dialerFrom(ip string) *net.Dialer {
	return &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: waitLimit}
}

// client returns a Go client sending through s as user (none for ""),
// from ip, trusting roots for the targets (the CA for intercepted ones),
// HTTP/2 when the session offers it.
func client(t testing.TB, s *stack, user, pass, ip string, roots *x509.CertPool) *http.Client {
	t.Helper()
	u := *s.url
	if user != "" {
		u.User = url.UserPassword(user, pass)
	}
	tr := &http.Transport{
		Proxy:               http.ProxyURL(&u),
		DialContext:         dialerFrom(ip).DialContext,
		TLSClientConfig:     &tls.Config{RootCAs: roots},
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 16,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: waitLimit}
}

// target is a TLS origin server on loopback, certificate originCert.
type target struct {
	srv     *httptest.Server
	addr    string // 127.0.0.1:port
	port    string
	entered chan string
	release chan struct{}
	conns   atomic.Int32
}

// echoed is what /echo answers.
type echoed struct {
	Proto  string
	Host   string
	URI    string
	Header http.Header
}

// newTarget starts a TLS target with /echo (the request as seen, JSON)
// and /slow (reports ?id= on entered, then waits for release).
func newTarget(t testing.TB) *target {
	t.Helper()
	tg := &target{entered: make(chan string, 256), release: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(echoed{Proto: r.Proto, Host: r.Host, URI: r.RequestURI, Header: r.Header})
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
	mux.HandleFunc("/reset", func(w http.ResponseWriter, r *http.Request) {
		panic(http.ErrAbortHandler) // the target fails mid-exchange
	})
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			tg.conns.Add(1)
		}
	}
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{originCert(t).TLS}}
	srv.StartTLS()
	t.Cleanup(func() {
		tg.open()
		srv.Close()
	})
	tg.srv = srv
	tg.addr = strings.TrimPrefix(srv.URL, "https://")
	_, tg.port, _ = net.SplitHostPort(tg.addr)
	return tg
}

// open lets every /slow request finish.
func (tg *target) open() {
	select {
	case <-tg.release:
	default:
		close(tg.release)
	}
}

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

func decodeEcho(t testing.TB, body []byte) echoed {
	t.Helper()
	var e echoed
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("echo body %q: %v", body, err)
	}
	return e
}

type answer struct {
	status int
	proto  string
	header http.Header
	body   []byte
}

func get(ctx context.Context, c *http.Client, target string) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return answer{}, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Proto, resp.Header, body}, err
}

func mustGet(t testing.TB, c *http.Client, target string) answer {
	t.Helper()
	a, err := get(t.Context(), c, target)
	if err != nil {
		t.Fatalf("GET %s: %v", target, err)
	}
	return a
}

// rawConnect opens a TCP connection to the proxy from ip, sends CONNECT
// authority (with creds as Proxy-Authorization unless ""), and returns
// the connection once the proxy answered, with the status line.
func rawConnect(t testing.TB, s *stack, ip, authority, creds string) (net.Conn, *bufio.Reader, string) {
	t.Helper()
	c, err := dialerFrom(ip).Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(waitLimit))
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
	return &bufConn{Conn: c, r: br}, br, resp.Status
}

// bufConn reads through the reader that read the CONNECT's answer, so
// that nothing it buffered is lost.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// handshake runs a TLS client handshake over c for serverName, trusting
// roots, offering protos by ALPN (none: http/1.1).
func handshake(t testing.TB, c net.Conn, serverName string, roots *x509.CertPool) (*tls.Conn, error) {
	t.Helper()
	tc := tls.Client(c, &tls.Config{ServerName: serverName, RootCAs: roots, NextProtos: []string{"http/1.1"}})
	err := tc.HandshakeContext(t.Context())
	return tc, err
}

// roundTrip sends one HTTP/1.1 request over an established TLS session
// and reads the answer.
func roundTrip(t testing.TB, tc *tls.Conn, req string) (*http.Response, []byte) {
	t.Helper()
	if _, err := io.WriteString(tc, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatalf("answer to %q: %v", req, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, body
}

// anyPort lets the tests' CONNECTs reach loopback targets on the random
// ports they listen on (the default is 443 only).
var anyPort = []forward.PortRange{{From: 443, To: 443}, {From: 1024, To: 65535}}
