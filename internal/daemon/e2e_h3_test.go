package daemon_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/quic-go/quic-go/http3"

	"github.com/seed-a07d1050/portcullis/internal/h3test"
)

// h3Client returns an HTTP/3 client whose QUIC connections come from ip.
func h3Client(t *testing.T, ip string, pool *x509.CertPool) (*http.Client, *http3.Transport) {
	t.Helper()
	return h3test.Client(t, ip, pool, waitLimit)
}

func TestHTTP3SharesTheRoutesAndIsAdvertised(t *testing.T) {
	defaultServer(t, testHTTP3SharesTheRoutesAndIsAdvertised)
}

func testHTTP3SharesTheRoutesAndIsAdvertised(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t)
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: tls
    protocol: https
    listen: "127.0.0.1:0"
    tls: {cert_file: "`+certFile+`", key_file: "`+keyFile+`"}
    routes:
      - name: r
        upstreams: ["{{backend}}"]
        limit: {permits: 1}
  - name: quic
    protocol: http3
    listen: "127.0.0.1:0"
    max_conns_per_client: 1
    tls: {cert_file: "`+certFile+`", key_file: "`+keyFile+`"}
    routes_from: tls
`)
	port := d.srv.Addr("quic").(*net.UDPAddr).Port
	// The TCP listener advertises HTTP/3.
	tcp := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: waitLimit}
	d.mu.Lock()
	d.clients = append(d.clients, tcp)
	d.mu.Unlock()
	resp, err := tcp.Get("https://" + d.srv.Addr("tls").String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got, want := resp.Header.Get("Alt-Svc"), `h3=":`+strconv.Itoa(port)+`"; ma=86400`; got != want {
		t.Fatalf("Alt-Svc %q, want %q", got, want)
	}

	c, tr := h3Client(t, "127.0.0.2", pool)
	url := "https://127.0.0.1:" + strconv.Itoa(port)
	resp, err = c.Get(url + "/headers")
	if err != nil {
		t.Fatal(err)
	}
	var h map[string]string
	_ = json.NewDecoder(resp.Body).Decode(&h)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Proto != "HTTP/3.0" || h["X-Forwarded-For"] != "127.0.0.2" {
		t.Fatalf("HTTP/3: %d %s, X-Forwarded-For %q", resp.StatusCode, resp.Proto, h["X-Forwarded-For"])
	}
	// The route limit is the https listener's: one count for both.
	slow := getAsync(c, url+"/?ms=2000")
	d.waitFor("permit held over HTTP/3", func() bool { return d.route("tls", "r").Limit.Totals.InUse == 1 })
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	sameClient := &http.Client{Timeout: waitLimit, Transport: &http.Transport{DialContext: dialer.DialContext, TLSClientConfig: &tls.Config{RootCAs: pool}}}
	d.mu.Lock()
	d.clients = append(d.clients, sameClient)
	d.mu.Unlock()
	if st, _, _ := get(t, sameClient, "https://"+d.srv.Addr("tls").String()+"/"); st != http.StatusTooManyRequests {
		t.Fatalf("same client over HTTPS while its HTTP/3 request holds the permit: %d, want 429", st)
	}
	if r := await(t, slow); r.status != http.StatusOK {
		t.Fatalf("slow over HTTP/3: %d %v", r.status, r.err)
	}
	// A second QUIC connection of the same client is over its cap of 1.
	c2, _ := h3Client(t, "127.0.0.2", pool)
	if resp, err := c2.Get(url + "/"); err == nil {
		resp.Body.Close()
		t.Fatalf("second QUIC connection of the client served (%d) over a cap of 1", resp.StatusCode)
	}
	if l := d.listener("quic"); l.Connections.Refused.ClientCap == 0 || l.Connections.Open != 1 {
		t.Fatalf("quic listener: %+v, want one open connection and a client_cap refusal", l.Connections)
	}
	_ = tr.Close()
	d.waitFor("QUIC permits back", func() bool { return d.listener("quic").Connections.Open == 0 })
	if m := d.metrics(); !strings.Contains(m, `portcullis_quic_attempts_total{listener="quic",outcome="completed"}`) {
		t.Errorf("/metrics lacks QUIC attempts")
	}
	if m := d.metrics(); !strings.Contains(m, `portcullis_quic_retry_on{listener="quic"} 0`) {
		t.Errorf("/metrics lacks whether Retry is on")
	}
}
