package daemon_test

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/config"
)

// TestHTTPSReloadAtTheSameAddress changes an https listener's socket
// settings at its address, which makes the new listener take over the
// socket once the old one's accept loop has ended: the reload completes
// (an HTTP/2 server waiting for handed-off connections must not hold it
// up), and the listener serves HTTP/1.1 and HTTP/2 before and after, on
// both servers. Then a change of http1_server on a reload, the same way.
func TestHTTPSReloadAtTheSameAddress(t *testing.T) {
	bothServers(t, testHTTPSReloadAtTheSameAddress)
}

func testHTTPSReloadAtTheSameAddress(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t)
	text := `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: https
    listen: "127.0.0.1:0"
    max_conns_per_client: CAP
    tls: {cert_file: "` + certFile + `", key_file: "` + keyFile + `"}
    routes:
      - upstreams: ["{{backend}}"]
`
	d := startDaemon(t, strings.Replace(text, "CAP", "8", 1))
	addr := d.srv.Addr("web").String()
	check := func(when string) {
		t.Helper()
		for _, h2 := range []bool{false, true} {
			if proto := httpsProto(t, pool, addr, h2); proto != map[bool]string{false: "HTTP/1.1", true: "HTTP/2.0"}[h2] {
				t.Fatalf("%s: answered over %q with h2 %v", when, proto, h2)
			}
		}
	}
	check("before the reload")
	reload := func(cfg *config.Config) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- d.srv.Reload(cfg) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(waitLimit):
			t.Fatal("the reload did not return")
		}
		if got := d.srv.Addr("web").String(); got != addr {
			t.Fatalf("the listener moved to %s", got)
		}
	}
	reload(d.sameAddr(strings.Replace(text, "CAP", "9", 1)))
	check("after a reload at the same address")
	other := config.HTTP1ServerNetHTTP
	if serverOf(t) == config.HTTP1ServerNetHTTP {
		other = config.HTTP1ServerEventLoop
	}
	cfg := d.sameAddr(strings.Replace(text, "CAP", "9", 1))
	cfg.Listeners[0].HTTP1Server = other
	reload(cfg)
	check("after a reload to the other server")
}

// httpsProto sends GET / to addr over TLS, offering HTTP/2 or not, from a
// connection of its own, and returns the protocol of the answer.
func httpsProto(t *testing.T, pool *x509.CertPool, addr string, h2 bool) string {
	t.Helper()
	tr := &http.Transport{
		DialContext:       (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.3")}}).DialContext,
		TLSClientConfig:   &tls.Config{RootCAs: pool},
		ForceAttemptHTTP2: h2,
	}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: waitLimit}).Get("https://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	return resp.Proto
}
