package daemon_test

import (
	"context"
	"crypto/tls"
	"net/http"
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/daemon"
	"github.com/seed-a07d1050/portcullis/internal/redistest"
	"github.com/seed-a07d1050/portcullis/internal/testcert"
)

// Three daemons reach Redis over TLS at the default timeout, and a burst
// right after start (30 slow requests of one client at once, 10 on each
// node, against a route limit of 5) is held exactly: the pool is warmed
// before the listeners serve and the TLS default timeout (250 ms) fits a
// handshake, so no call falls back to the node's own count. (Before, with
// cold connections and 50 ms, a black-box run admitted 7 to 13 of 30.)
func TestClusterOverTLSExactAtStart(t *testing.T) {
	cert, err := testcert.New()
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := cert.WriteFiles(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	redis := redistest.StartTLS(t, certFile, keyFile, &tls.Config{RootCAs: cert.Pool})
	text := `
admin: {listen: "127.0.0.1:0"}
cluster:
  redis: {addrs: ["` + redis.Addr() + `"], tls: {enabled: true, ca_file: "` + certFile + `"}}
  prefix: "test:` + strings.ReplaceAll(t.Name(), "/", "-") + `:"
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - name: r
        upstreams: ["{{backend}}"]
        limit: {permits: 5}
`
	a := startDaemon(t, text)
	urls := []string{a.url("web", "/?ms=1500")}
	for range 2 {
		n, err := daemon.Start(parseConfig(t, text, a.backend.URL()), daemon.Options{Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = n.Shutdown(context.Background()) }()
		urls = append(urls, "http://"+n.Addr("web").String()+"/?ms=1500")
	}
	c := a.client("127.0.0.2")
	defer c.CloseIdleConnections()
	var chans []<-chan result
	for i := range 30 {
		chans = append(chans, getAsync(c, urls[i%3]))
	}
	ok, refused := 0, 0
	for _, ch := range chans {
		switch r := await(t, ch); r.status {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
			refused++
		default:
			t.Errorf("a request: %d %v", r.status, r.err)
		}
	}
	t.Logf("over TLS at the default timeout: %d of 30 admitted, %d refused, limit 5", ok, refused)
	if ok != 5 {
		t.Fatalf("three nodes admitted %d of 30 against a cluster-wide limit of 5", ok)
	}
}
