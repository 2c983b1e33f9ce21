package forward_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"github.com/seed-a07d1050/portcullis/internal/proxytest"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/httplimit"
	"github.com/seed-a07d1050/portcullis/internal/forward"
	"github.com/seed-a07d1050/portcullis/internal/proxyauth"
	"github.com/seed-a07d1050/portcullis/internal/testcert"
)

// waitLimit bounds every wait in these tests.
const waitLimit = 10 * time.Second

var loopback = netip.MustParseAddr("127.0.0.1")

// testResolver knows the names the tests use.
var testResolver = proxytest.Resolver{Names: map[string][]netip.Addr{
	"target.test":   {loopback},
	"slow.test":     {loopback},
	"fast.test":     {loopback},
	"internal.test": {loopback},
	"private.test":  {netip.MustParseAddr("10.0.0.1")},
}}

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
		cfg.Policy = proxytest.AllowLoopback(t)
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
			File:     proxytest.WriteUsers(t, o.users...),
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
		DialContext:         proxytest.DialerFrom(ip).DialContext,
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

// rawConn opens a TCP connection to the proxy from ip.
func rawConn(t testing.TB, s *stack, ip string) net.Conn {
	t.Helper()
	return proxytest.Dial(t, ip, s.addr)
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
