package clientkey_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/clientkey"
)

// keyServer starts an HTTP server on addr that answers each request with
// the key r gives it.
func keyServer(t *testing.T, addr string, r *clientkey.Resolver) *httptest.Server {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		io.WriteString(w, r.Key(req).String())
	}))
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// clientFrom returns an HTTP client whose connections leave from src.
func clientFrom(t *testing.T, src string) *http.Client {
	t.Helper()
	d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	tr := &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// getKey sends a GET with the given header lines and returns the body.
func getKey(t *testing.T, c *http.Client, url, header string, lines ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		req.Header.Add(header, l)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestResolverOverLoopback(t *testing.T) {
	r := &clientkey.Resolver{
		Trusted: clientkey.MustParseProxySet("127.0.0.3", "127.0.0.4"),
		Header:  clientkey.HeaderXForwardedFor,
	}
	srv := keyServer(t, "127.0.0.1:0", r)
	tests := []struct {
		name, src string
		lines     []string
		want      string
	}{
		{"untrusted client spoofing", "127.0.0.2", []string{"203.0.113.9"}, "127.0.0.2"},
		{"untrusted client without header", "127.0.0.2", nil, "127.0.0.2"},
		{"trusted proxy", "127.0.0.3", []string{"203.0.113.9"}, "203.0.113.9"},
		{"trusted proxy, ipv6 client", "127.0.0.3", []string{"[2001:db8:1:2::9]:5000"}, "2001:db8:1:2::/64"},
		{"trusted proxy, two lines", "127.0.0.3", []string{"6.6.6.6, 198.51.100.7", "127.0.0.4"}, "198.51.100.7"},
		{"trusted proxy, broken chain", "127.0.0.3", []string{"198.51.100.7, bogus"}, "127.0.0.3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := getKey(t, clientFrom(t, tt.src), srv.URL, "X-Forwarded-For", tt.lines...)
			if got != tt.want {
				t.Errorf("key = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestResolverOverLoopbackIPv6 runs a server on [::1], where RemoteAddr is
// "[::1]:port" and splitting on ':' would find no address.
func TestResolverOverLoopbackIPv6(t *testing.T) {
	r := &clientkey.Resolver{Trusted: clientkey.MustParseProxySet("::1"), Header: clientkey.HeaderForwarded}
	srv := keyServer(t, "[::1]:0", r)
	c := clientFrom(t, "::1")
	if got := getKey(t, c, srv.URL, "Forwarded", `for="[2001:db8:1:2::9]:4711";proto=http`); got != "2001:db8:1:2::/64" {
		t.Errorf("key = %q, want 2001:db8:1:2::/64", got)
	}
	if got := getKey(t, c, srv.URL, "Forwarded", "for=_hidden"); got != "::/64" {
		t.Errorf("key with obfuscated hop = %q, want the peer's ::/64", got)
	}
}

// TestResolverBehindReverseProxy puts net/http/httputil's reverse proxy,
// which appends the peer to X-Forwarded-For, between clients and a backend
// that trusts only the proxy's outgoing address. A client's own
// X-Forwarded-For cannot change its key.
func TestResolverBehindReverseProxy(t *testing.T) {
	backend := keyServer(t, "127.0.0.1:0", &clientkey.Resolver{
		Trusted: clientkey.MustParseProxySet("127.0.0.9"),
		Header:  clientkey.HeaderXForwardedFor,
	})
	target, err := url.Parse(backend.URL)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = clientFrom(t, "127.0.0.9").Transport
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	proxy := httptest.NewUnstartedServer(rp)
	proxy.Listener = ln
	proxy.Start()
	defer proxy.Close()

	for _, tt := range []struct{ src, spoof, want string }{
		{"127.0.0.2", "", "127.0.0.2"},
		{"127.0.0.2", "203.0.113.1", "127.0.0.2"},
		{"127.0.0.5", "127.0.0.9, 127.0.0.9", "127.0.0.5"},
	} {
		var lines []string
		if tt.spoof != "" {
			lines = []string{tt.spoof}
		}
		if got := getKey(t, clientFrom(t, tt.src), proxy.URL, "X-Forwarded-For", lines...); got != tt.want {
			t.Errorf("client %s spoofing %q: key %q, want %q", tt.src, tt.spoof, got, tt.want)
		}
	}
}
