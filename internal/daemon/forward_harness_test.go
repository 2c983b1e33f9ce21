package daemon_test

import (
	"bufio"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/seed-a07d1050/portcullis/internal/admin"
	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/testcert"
)

// The users of the forward-proxy tests.
var testUsers = []string{"alice", "alice-pw", "bob", "bob-pw"}

// writeHtpasswd writes an htpasswd file of bcrypt hashes at the least
// cost, to keep the tests fast, and returns its path.
func writeHtpasswd(t testing.TB, dir string, pairs ...string) string {
	t.Helper()
	var b strings.Builder
	for i := 0; i+1 < len(pairs); i += 2 {
		h, err := bcrypt.GenerateFromPassword([]byte(pairs[i+1]), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s:%s\n", pairs[i], h)
	}
	path := filepath.Join(dir, "users.htpasswd")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startForward starts a daemon from text after replacing {{htpasswd}} with
// a file of testUsers. It returns the daemon and the file's path.
func startForward(t *testing.T, text string) (*testDaemon, string) {
	t.Helper()
	file := writeHtpasswd(t, t.TempDir(), testUsers...)
	return startDaemon(t, strings.ReplaceAll(text, "{{htpasswd}}", file)), file
}

// reloadConfig parses text for a reload of d: every listener keeps the
// address it is bound to, the admin listener too.
func (d *testDaemon) reloadConfig(text, htpasswd string) *config.Config {
	d.t.Helper()
	cfg := parseConfig(d.t, strings.ReplaceAll(text, "{{htpasswd}}", htpasswd), d.backend.URL())
	for i := range cfg.Listeners {
		if a := d.srv.Addr(cfg.Listeners[i].Name); a != nil {
			cfg.Listeners[i].Listen = a.String()
		}
	}
	if a := d.srv.AdminAddr(); a != nil {
		cfg.Admin.Listen = a.String()
	}
	return cfg
}

var testCert = sync.OnceValues(testcert.New)

// sharedCert is the certificate of every TLS target and proxy of these
// tests: valid for 127.0.0.1, ::1 and localhost.
func sharedCert(t testing.TB) *testcert.Cert {
	t.Helper()
	c, err := testCert()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// proxyClient returns a Go client that sends every request through the
// forward listener named listener, as user (none when ""), from ip,
// trusting the test certificate for HTTPS targets and proxies.
func (d *testDaemon) proxyClient(listener, user, pass, ip string) *http.Client {
	d.t.Helper()
	scheme := "http"
	if d.listenerProtocol(listener) == "https" {
		scheme = "https"
	}
	u := &url.URL{Scheme: scheme, Host: d.srv.Addr(listener).String()}
	if user != "" {
		u.User = url.UserPassword(user, pass)
	}
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: waitLimit}
	c := &http.Client{
		Timeout: 2 * waitLimit,
		Transport: &http.Transport{
			Proxy:               http.ProxyURL(u),
			DialContext:         dialer.DialContext,
			TLSClientConfig:     &tls.Config{RootCAs: sharedCert(d.t).Pool},
			MaxIdleConnsPerHost: 64,
			DisableCompression:  true,
		},
	}
	d.mu.Lock()
	d.clients = append(d.clients, c)
	d.mu.Unlock()
	return c
}

func (d *testDaemon) listenerProtocol(name string) string {
	for _, l := range d.srv.Snapshot().Listeners {
		if l.Name == name {
			return l.Protocol
		}
	}
	return ""
}

// forwardOf returns the forward snapshot of the named listener.
func (d *testDaemon) forwardOf(name string) *admin.ForwardSnapshot {
	d.t.Helper()
	f := d.listener(name).Forward
	if f == nil {
		d.t.Fatalf("listener %s has no forward snapshot", name)
	}
	return f
}

// forwardLimit returns the totals of the forward limit keyed by key.
func (d *testDaemon) forwardLimit(listener, key string) admin.LimitSnapshot {
	d.t.Helper()
	for _, l := range d.forwardOf(listener).Limits {
		if l.Key == key {
			return l
		}
	}
	d.t.Fatalf("listener %s has no %s limit", listener, key)
	return admin.LimitSnapshot{}
}

func basicAuth(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

// gatedTarget is an HTTP target on loopback whose /slow requests wait for
// release (or their client), and whose other paths echo the request.
type gatedTarget struct {
	srv         *httptest.Server
	addr        string // 127.0.0.1:port
	inFlight    atomic.Int64
	maxInFlight atomic.Int64
	entered     chan struct{}
	release     chan struct{}
	once        sync.Once
}

// echoed is what a target's echo answers: the request as it saw it.
type echoed struct {
	Host   string
	URI    string
	Header http.Header
}

func newGatedTarget(t testing.TB, useTLS bool) *gatedTarget {
	t.Helper()
	g := &gatedTarget{entered: make(chan struct{}, 64), release: make(chan struct{})}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/slow" {
			_ = json.NewEncoder(w).Encode(echoed{Host: r.Host, URI: r.RequestURI, Header: r.Header})
			return
		}
		n := g.inFlight.Add(1)
		defer g.inFlight.Add(-1)
		for m := g.maxInFlight.Load(); n > m && !g.maxInFlight.CompareAndSwap(m, n); m = g.maxInFlight.Load() {
		}
		g.entered <- struct{}{}
		select {
		case <-g.release:
		case <-r.Context().Done():
		case <-time.After(waitLimit):
		}
		_, _ = io.WriteString(w, "slow done\n")
	})
	g.srv = httptest.NewUnstartedServer(h)
	if useTLS {
		g.srv.TLS = &tls.Config{Certificates: []tls.Certificate{sharedCert(t).TLS}}
		g.srv.StartTLS()
	} else {
		g.srv.Start()
	}
	t.Cleanup(func() {
		g.open()
		g.srv.Close()
	})
	g.addr = strings.TrimPrefix(strings.TrimPrefix(g.srv.URL, "http://"), "https://")
	return g
}

// open lets every /slow request through, now and later.
func (g *gatedTarget) open() { g.once.Do(func() { close(g.release) }) }

// url returns the URL of path at the target.
func (g *gatedTarget) url(path string) string { return g.srv.URL + path }

// tcpEcho starts a TCP server on loopback that echoes what it reads on
// each connection until EOF, then closes it. It returns its address.
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
				_ = c.SetDeadline(time.Now().Add(2 * waitLimit))
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// tunnel is a CONNECT tunnel opened through the daemon on a raw
// connection.
type tunnel struct {
	c  net.Conn
	br *bufio.Reader
}

// openTunnel sends CONNECT authority from ip to the named listener, with
// proxy credentials creds (none when ""), and returns the connection and
// the answer.
func (d *testDaemon) openTunnel(listener, ip, authority, creds string) (*tunnel, *http.Response) {
	d.t.Helper()
	c := dialFrom(d.t, ip, d.srv.Addr(listener).String())
	_ = c.SetDeadline(time.Now().Add(2 * waitLimit))
	head := "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n"
	if creds != "" {
		head += "Proxy-Authorization: " + creds + "\r\n"
	}
	if _, err := io.WriteString(c, head+"\r\n"); err != nil {
		d.t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		d.t.Fatalf("CONNECT %s: %v", authority, err)
	}
	return &tunnel{c: c, br: br}, resp
}

// echo sends line through the tunnel and reads it back.
func (tu *tunnel) echo(t testing.TB, line string) {
	t.Helper()
	if _, err := io.WriteString(tu.c, line+"\n"); err != nil {
		t.Fatalf("write to the tunnel: %v", err)
	}
	got, err := tu.br.ReadString('\n')
	if err != nil || got != line+"\n" {
		t.Fatalf("through the tunnel: %q, %v; want %q", got, err, line)
	}
}

// caFile writes the test certificate for tools that read a CA file.
func caFile(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(path, sharedCert(t).CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// certFiles writes the test certificate and key for an https listener.
func certFiles(t testing.TB) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile, err := sharedCert(t).WriteFiles(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
