package listen_test

import (
	"context"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/seed-a07d1050/portcullis/internal/h3test"

	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/listen"
	"github.com/seed-a07d1050/portcullis/internal/testcert"
	"github.com/seed-a07d1050/portcullis/internal/waitfor"
)

// h3Client returns an HTTP/3 client whose QUIC connections come from ip.
func h3Client(t *testing.T, ip string, pool *x509.CertPool) (*http.Client, *http3.Transport) {
	t.Helper()
	return h3test.Client(t, ip, pool, 5*time.Second)
}

// An http3 listener admits QUIC connections through Admission.FilterQUIC
// and its per-client cap, serves the handler of Serving, gives the port to
// the TCP listener whose routes it shares (LinkAltSvc), and gives every
// per-client permit back.
func TestFrontH3(t *testing.T) {
	cert, err := testcert.New()
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := cert.WriteFiles(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse("test.yaml", []byte(`
listeners:
  - name: web
    protocol: http
    http1_server: net/http
    listen: "127.0.0.1:0"
    routes:
      - name: r
        upstreams: ["http://127.0.0.1:1"]
  - name: quic
    protocol: http3
    listen: "127.0.0.1:0"
    routes_from: web
    max_conns_per_client: 1
    tls: {cert_file: "`+certFile+`", key_file: "`+keyFile+`"}
`))
	if err != nil {
		t.Fatal(err)
	}
	eff := cfg.Effective()
	web := bindTCP(t, eff.Listeners[0], listen.Admission{})
	var filtered atomic.Int32
	refuse := errors.New("test: denied")
	h3, err := listen.BindH3(eff.Listeners[1], listen.Admission{Log: slog.New(slog.DiscardHandler), FilterQUIC: func(tr *quic.Transport) {
		admit := tr.ConnContext
		tr.ConnContext = func(ctx context.Context, info *quic.ClientInfo) (context.Context, error) {
			if info != nil && info.RemoteAddr.(*net.UDPAddr).IP.Equal(net.IPv4(127, 0, 0, 3)) {
				filtered.Add(1)
				return nil, refuse
			}
			return admit(ctx, info)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h3.Close)
	if h3.Conns() != nil || h3.Cert() == nil || h3.HTTP1Server() != "" {
		t.Fatalf("http3 front: conns %v, cert %v, HTTP/1.1 server %q", h3.Conns(), h3.Cert() != nil, h3.HTTP1Server())
	}
	listen.LinkAltSvc([]*listen.Front{web, h3})
	serve(t, web, listen.Serving{Handler: named("web")})
	serve(t, h3, listen.Serving{Handler: named("h3")})

	want := `h3=":` + strconv.Itoa(h3.Addr().(*net.UDPAddr).Port) + `"; ma=86400`
	c := clientFrom("127.0.0.2")
	if code, body, alt := get(t, c, web.Addr()); code != 200 || body != "web" || alt != want {
		t.Fatalf("GET on the TCP listener = %d %q Alt-Svc %q, want 200 \"web\" and %q", code, body, alt, want)
	}
	c.CloseIdleConnections()

	url := "https://" + h3.Addr().String() + "/"
	first, firstTr := h3Client(t, "127.0.0.2", cert.Pool)
	resp, err := first.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "h3" || resp.Header.Get("Alt-Svc") != "" {
		t.Fatalf("GET over HTTP/3 = %d %q Alt-Svc %q, want 200 \"h3\" and none", resp.StatusCode, body, resp.Header.Get("Alt-Svc"))
	}
	if st := h3.QUICStats(); st.Accepted != 1 || st.Open != 1 {
		t.Fatalf("after one connection: %d accepted, %d open; want 1 and 1", st.Accepted, st.Open)
	}
	second, _ := h3Client(t, "127.0.0.2", cert.Pool)
	if _, err := second.Get(url); err == nil {
		t.Fatal("a second QUIC connection of a client capped at 1 was served")
	}
	// The client may try more than once; quicadmit's tests count exactly.
	if st := h3.QUICStats(); st.Refused.ClientCap == 0 || st.Open != 1 {
		t.Fatalf("after a second connection: %d per-client refusals, %d open; want some and 1", st.Refused.ClientCap, st.Open)
	}
	denied, _ := h3Client(t, "127.0.0.3", cert.Pool)
	if _, err := denied.Get(url); err == nil {
		t.Fatal("a client FilterQUIC refuses was served")
	}
	if filtered.Load() == 0 {
		t.Fatal("FilterQUIC's hook never saw the refused client")
	}
	_ = firstTr.Close()
	_, perClient := h3.QUIC()
	waitfor.Cond(t, "every per-client permit back", func() bool { return perClient.Totals().InUse == 0 })
	shutdown(t, h3)
	shutdown(t, web)
}
