package proxytest_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/proxytest"
	"github.com/seed-a07d1050/portcullis/internal/testcert"
)

func TestResolver(t *testing.T) {
	r := proxytest.Resolver{
		Names:          map[string][]netip.Addr{"far.test": {netip.MustParseAddr("10.0.0.1")}},
		LoopbackSuffix: ".test",
	}
	for host, want := range map[string]string{"far.test": "10.0.0.1", "any.test": "127.0.0.1", "example.com": ""} {
		got, err := r.LookupNetIP(t.Context(), "ip", host)
		if want == "" {
			var dnsErr *net.DNSError
			if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
				t.Errorf("%s: got %v, %v; want not found", host, got, err)
			}
			continue
		}
		if err != nil || len(got) != 1 || got[0].String() != want {
			t.Errorf("%s: got %v, %v; want %s", host, got, err, want)
		}
	}
}

func TestTargetEchoesAndHoldsSlowRequests(t *testing.T) {
	cert, err := testcert.New()
	if err != nil {
		t.Fatal(err)
	}
	tg := proxytest.NewTarget(t, proxytest.TargetOptions{Cert: cert, HTTP2: true})
	pool := x509.NewCertPool()
	pool.AddCert(cert.TLS.Leaf)
	c := &http.Client{Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool},
		ForceAttemptHTTP2: true,
		DialContext:       proxytest.DialerFrom("127.0.0.3").DialContext,
	}, Timeout: proxytest.WaitLimit}
	t.Cleanup(c.CloseIdleConnections)

	resp, err := c.Post("https://"+tg.Addr+"/echo?x=1", "text/plain", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	e := proxytest.DecodeEcho(t, body)
	if e.Proto != "HTTP/2.0" || e.URI != "/echo?x=1" || e.Body != "hello" || e.Host != tg.Addr {
		t.Fatalf("echo = %+v", e)
	}

	done := make(chan error, 1)
	go func() {
		resp, err := c.Get("https://" + tg.Addr + "/slow?id=7")
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	if id := tg.Next(t); id != "7" {
		t.Fatalf("entered %q, want 7", id)
	}
	tg.Open()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := tg.Conns.Load(); n != 1 {
		t.Fatalf("target accepted %d connections, want 1 (HTTP/2 shares one)", n)
	}
}

func TestTCPEchoCountsBytes(t *testing.T) {
	c := proxytest.Dial(t, "127.0.0.4", proxytest.TCPEcho(t))
	if _, err := io.WriteString(c, "abc\n"); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "abc\nbytes=4\n" {
		t.Fatalf("read %q, %v", got, err)
	}
}
