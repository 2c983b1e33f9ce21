package daemon_test

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/admin"
	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/intercept"
)

// interceptAuthed is a forward listener "egress" that intercepts every
// CONNECT it is not told to bypass, with a proxy_user limit of 2, for
// users of testUsers. The target certificates are trusted through the
// upstream ca_file.
const interceptAuthed = `
admin: {listen: "127.0.0.1:0"}
shutdown_timeout: 2s
listeners:
  - name: egress
    protocol: http
    listen: "127.0.0.1:0"
    mode: forward
    auth: {htpasswd: "{{htpasswd}}"}
    forward:
      destinations: {allow: ["127.0.0.0/8", "::1"]}
      limits:
        - {key: proxy_user, permits: 2}
      intercept:
        ca_cert: "{{ca_cert}}"
        ca_key: "{{ca_key}}"
        bypass: [{{bypass}}]
        upstream: {ca_file: "{{origin_ca}}"}
`

// testCA is an interception CA written for a test.
type testCA struct {
	certFile, keyFile string
	pool              *x509.CertPool
}

func newTestCA(t testing.TB, name string) *testCA {
	t.Helper()
	certFile, keyFile, err := intercept.WriteCA(t.TempDir(), intercept.CAOptions{CommonName: name})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := intercept.LoadCA(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Certificate())
	return &testCA{certFile: certFile, keyFile: keyFile, pool: pool}
}

// icDaemon is a daemon with an intercepting forward listener, its CA, and
// the TLS target its tests reach.
type icDaemon struct {
	*testDaemon
	text     string // the configuration, CA and origin filled in; {{htpasswd}} and {{bypass}} left
	htpasswd string
	ca       *testCA
	target   *gatedTarget
}

// startIntercept starts text (see interceptAuthed) with a new CA, a TLS
// target, and bypass as the bypass list's YAML entries.
func startIntercept(t *testing.T, text, bypass string) *icDaemon {
	t.Helper()
	ca := newTestCA(t, "portcullis proxy test CA")
	text = strings.NewReplacer("{{ca_cert}}", ca.certFile, "{{ca_key}}", ca.keyFile, "{{origin_ca}}", caFile(t)).Replace(text)
	d, file := startForward(t, strings.ReplaceAll(text, "{{bypass}}", bypass))
	return &icDaemon{testDaemon: d, text: text, htpasswd: file, ca: ca, target: newGatedTarget(t, true)}
}

// reload applies d's configuration again with bypass as the bypass list,
// after replacing each old string of replace with the new one after it.
func (d *icDaemon) reload(bypass string, replace ...string) error {
	return d.srv.Reload(d.nextConfig(bypass, replace...))
}

// nextConfig is the configuration reload applies.
func (d *icDaemon) nextConfig(bypass string, replace ...string) *config.Config {
	d.t.Helper()
	text := strings.NewReplacer(replace...).Replace(d.text)
	return d.reloadConfig(strings.ReplaceAll(text, "{{bypass}}", bypass), d.htpasswd)
}

// port is the target's port.
func (d *icDaemon) port() string {
	_, port, _ := net.SplitHostPort(d.target.addr)
	return port
}

// targetURL is the URL of path at the target by the name localhost, which
// clients send in SNI.
func (d *icDaemon) targetURL(path string) string {
	return "https://localhost:" + d.port() + path
}

// icClient returns a Go client sending every request through the listener
// as user (none when ""), from ip, trusting roots for HTTPS, speaking
// HTTP/2 inside TLS sessions when h2, over at most one connection per
// target.
func (d *icDaemon) icClient(user, pass, ip string, roots *x509.CertPool, h2 bool) *http.Client {
	d.t.Helper()
	u := &url.URL{Scheme: "http", Host: d.srv.Addr("egress").String()}
	if user != "" {
		u.User = url.UserPassword(user, pass)
	}
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: waitLimit}
	c := &http.Client{
		Timeout: 2 * waitLimit,
		Transport: &http.Transport{
			Proxy:              http.ProxyURL(u),
			DialContext:        dialer.DialContext,
			TLSClientConfig:    &tls.Config{RootCAs: roots},
			ForceAttemptHTTP2:  h2,
			MaxConnsPerHost:    1,
			DisableCompression: true,
		},
	}
	d.mu.Lock()
	d.clients = append(d.clients, c)
	d.mu.Unlock()
	return c
}

// intercepted returns the interception snapshot of the listener.
func (d *icDaemon) intercepted() admin.InterceptSnapshot {
	d.t.Helper()
	ic := d.forwardOf("egress").Intercept
	if ic == nil {
		d.t.Fatal("listener egress has no intercept snapshot")
	}
	return *ic
}

// metric reads the value of the first line of /metrics starting with
// name{labels} (labels as written, sorted by Prometheus).
func (d *icDaemon) metric(series string) float64 {
	d.t.Helper()
	re := regexp.MustCompile("(?m)^" + regexp.QuoteMeta(series) + " (\\S+)$")
	m := re.FindStringSubmatch(d.metrics())
	if m == nil {
		d.t.Fatalf("/metrics has no %s", series)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		d.t.Fatal(err)
	}
	return v
}

// minted is portcullis_intercept_leaves_minted_total of the listener.
func (d *icDaemon) minted() float64 {
	return d.metric(`portcullis_intercept_leaves_minted_total{listener="egress"}`)
}

// peerIssuer returns the common name of the issuer of the certificate the
// TLS server at the end of resp's connection showed.
func peerIssuer(t *testing.T, resp *http.Response) string {
	t.Helper()
	if resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 {
		t.Fatal("the response came over no TLS connection")
	}
	return resp.TLS.PeerCertificates[0].Issuer.CommonName
}

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
