package intercept_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"github.com/seed-a07d1050/portcullis/internal/proxytest"
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
	"sync"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/httplimit"
	"github.com/seed-a07d1050/portcullis/internal/forward"
	"github.com/seed-a07d1050/portcullis/internal/intercept"
	"github.com/seed-a07d1050/portcullis/internal/proxyauth"
	"github.com/seed-a07d1050/portcullis/internal/testcert"
)

// waitLimit bounds every wait in these tests.
const waitLimit = 10 * time.Second

var quiet = slog.New(slog.DiscardHandler)

// testResolver resolves localhost and every name under .test to
// 127.0.0.1, without the network.
var testResolver = proxytest.Resolver{
	Names:          map[string][]netip.Addr{"localhost": {netip.MustParseAddr("127.0.0.1")}},
	LoopbackSuffix: ".test",
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
	p, err := forward.New(forward.Config{Policy: proxytest.AllowLoopback(t), Resolver: testResolver, Logger: quiet})
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
		a, err := proxyauth.New(proxyauth.Config{File: proxytest.WriteUsers(t, o.users...), Logger: quiet})
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

// userLimit is a proxy_user limit of n, refusing at once.
func userLimit(n int) httplimit.Config {
	return httplimit.Config{Key: httplimit.KeyFunc(proxyauth.UserOf), Policy: httplimit.Policy{Permits: n}, Name: "proxy_user"}
}

// inUse is the number of permits the limiters of s hold.
func inUse(s *stack) int {
	n := 0
	for _, l := range s.limits {
		n += l.Totals().InUse
	}
	return n
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
		DialContext:         proxytest.DialerFrom(ip).DialContext,
		TLSClientConfig:     &tls.Config{RootCAs: roots},
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 16,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: waitLimit}
}

// newTarget starts a TLS target (certificate originCert, HTTP/2 offered)
// with proxytest.Target's paths.
func newTarget(t testing.TB) *proxytest.Target {
	t.Helper()
	return proxytest.NewTarget(t, proxytest.TargetOptions{Cert: originCert(t), HTTP2: true})
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
	c := proxytest.Dial(t, ip, s.addr)
	br, resp := proxytest.Connect(t, c, authority, creds)
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
