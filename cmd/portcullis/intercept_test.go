package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/intercept"
)

// TestRunForwardIntercept runs `portcullis ca create`, then `portcullis run
// --forward --intercept-ca DIR`, and sends an HTTPS request through it: the
// client, trusting the new CA, gets a leaf of it for the target, and the
// target (a test server whose certificate is in no system store) is refused
// by the proxy's verification against the system's roots, with a 502 that
// says so. The client limit of 1 counts the request inside the session.
func TestRunForwardIntercept(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	var out, errOut bytes.Buffer
	if code := run([]string{"ca", "create", "--out", dir, "--name", "cmd test CA"}, &out, &errOut); code != exitOK {
		t.Fatalf("ca create: exit %d\n%s", code, errOut.String())
	}
	ca, err := intercept.LoadCA(filepath.Join(dir, intercept.CACertFile), filepath.Join(dir, intercept.CAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Certificate())
	target := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer target.Close()

	sig := &signals{}
	srv, code := startRun(t, []string{"run", "--forward", "--listen", "127.0.0.1:0", "--intercept-ca", dir,
		"--forward-allow", "127.0.0.0/8", "--forward-connect-port", "1024-65535", "--max-concurrent-per-client", "1"}, sig, io.Discard)
	c := &http.Client{Timeout: waitLimit, Transport: &http.Transport{
		Proxy:           http.ProxyURL(&url.URL{Scheme: "http", Host: srv.Addr("forward").String()}),
		TLSClientConfig: &tls.Config{RootCAs: pool},
	}}
	defer c.CloseIdleConnections()
	resp, err := c.Get(target.URL + "/")
	if err != nil {
		t.Fatalf("through the intercepting proxy: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if issuer := resp.TLS.PeerCertificates[0].Issuer.CommonName; issuer != "cmd test CA" {
		t.Errorf("the client saw a certificate issued by %q, want the CA of --intercept-ca", issuer)
	}
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "certificate was refused: signed by an unknown authority") {
		t.Errorf("a target outside the system's roots: %d %q, want 502 naming the unknown authority", resp.StatusCode, body)
	}
	l := srv.Snapshot().Listeners[0]
	if ic := l.Forward.Intercept; ic == nil || ic.Sessions != 1 || ic.UpstreamFailures != 1 {
		t.Errorf("intercept snapshot %+v: want one session and one target failure", l.Forward.Intercept)
	}
	if tot := l.ClientLimit.Totals; tot.Granted != 2 {
		t.Errorf("client limit totals %+v: want the CONNECT and the request inside granted", tot)
	}

	// SIGHUP reads the CA files again: a CA renewed in place signs the
	// leaves of new sessions.
	renewed := filepath.Join(t.TempDir(), "ca")
	if code := run([]string{"ca", "create", "--out", renewed, "--name", "renewed cmd test CA"}, &out, &errOut); code != exitOK {
		t.Fatalf("ca create: exit %d\n%s", code, errOut.String())
	}
	for _, name := range []string{intercept.CACertFile, intercept.CAKeyFile} {
		b, err := os.ReadFile(filepath.Join(renewed, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sig.send(syscall.SIGHUP)
	rca, err := intercept.LoadCA(filepath.Join(renewed, intercept.CACertFile), filepath.Join(renewed, intercept.CAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	both := pool.Clone()
	both.AddCert(rca.Certificate())
	c2 := &http.Client{Timeout: waitLimit, Transport: &http.Transport{
		Proxy:             http.ProxyURL(&url.URL{Scheme: "http", Host: srv.Addr("forward").String()}),
		TLSClientConfig:   &tls.Config{RootCAs: both},
		DisableKeepAlives: true,
	}}
	if !waitFor(func() bool {
		resp, err := c2.Get(target.URL + "/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.TLS.PeerCertificates[0].Issuer.CommonName == "renewed cmd test CA"
	}) {
		t.Fatal("after SIGHUP the leaves are not signed by the CA renewed in --intercept-ca")
	}
	sig.send(syscall.SIGTERM)
	if c := waitCode(t, code); c != exitOK {
		t.Fatalf("exit code %d", c)
	}
}

// The example interception CA must not expire under the example that uses
// it, and must keep the name constraints its README promises.
func TestExampleInterceptCAIsCurrent(t *testing.T) {
	ca, err := intercept.LoadCA(filepath.Join(examplesDir, "files", "intercept-ca.pem"), filepath.Join(examplesDir, "files", "intercept-ca-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	cert := ca.Certificate()
	if left := time.Until(cert.NotAfter); left < 90*24*time.Hour {
		t.Errorf("examples/files/intercept-ca.pem expires %v (in %v): make a new one as examples/files/README.md says",
			cert.NotAfter, left.Round(time.Hour))
	}
	for host, want := range map[string]bool{
		"localhost": true, "www.example.com": true, "a.test": true, "127.0.0.1": true, "::1": true,
		"bank.example": false, "google.com": false, "10.0.0.1": false,
	} {
		if got := ca.Permits(host); got != want {
			t.Errorf("the example CA permits %s: %v, want %v", host, got, want)
		}
	}
}
