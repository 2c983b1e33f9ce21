package daemon_test

import (
	"bytes"
	"crypto/tls"
	"encoding/pem"
	"os"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/config"
)

// A reload reads the certificate files again, so a renewed certificate is
// served without a restart and without closing the listener.
func TestReloadPicksUpARenewedCertificate(t *testing.T) {
	defaultServer(t, testReloadPicksUpARenewedCertificate)
}

func testReloadPicksUpARenewedCertificate(t *testing.T) {
	certFile, keyFile, _ := selfSigned(t)
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: https
    listen: "127.0.0.1:0"
    tls: {cert_file: "`+certFile+`", key_file: "`+keyFile+`"}
    routes:
      - upstreams: ["{{backend}}"]
`)
	served := func() []byte {
		t.Helper()
		conn, err := tls.Dial("tcp", d.srv.Addr("web").String(), &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Raw
	}
	der := func(file string) []byte {
		t.Helper()
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		blk, _ := pem.Decode(b)
		return blk.Bytes
	}
	if !bytes.Equal(served(), der(certFile)) {
		t.Fatal("listener does not serve the configured certificate")
	}
	addr := d.srv.Addr("web").String()
	renewedCert, renewedKey, _ := selfSigned(t)
	for src, dst := range map[string]string{renewedCert: certFile, renewedKey: keyFile} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.srv.Reload(d.sameAddrHTTPS(certFile, keyFile)); err != nil {
		t.Fatal(err)
	}
	if got := d.srv.Addr("web").String(); got != addr {
		t.Fatalf("listener moved to %s", got)
	}
	if !bytes.Equal(served(), der(renewedCert)) {
		t.Fatal("the renewed certificate is not served after the reload")
	}
	if n := d.listener("web").Connections.Accepted; n != 2 {
		t.Fatalf("accepted %d, want 2: the listener and its counts were kept", n)
	}
}

func (d *testDaemon) sameAddrHTTPS(certFile, keyFile string) *config.Config {
	return d.sameAddr(`
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: https
    listen: "127.0.0.1:0"
    tls: {cert_file: "` + certFile + `", key_file: "` + keyFile + `"}
    routes:
      - upstreams: ["{{backend}}"]
`)
}
