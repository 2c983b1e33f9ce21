package daemon_test

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/testcert"
)

// These match the fields of an exchange that the forward proxy
// and a reverse route treat differently by design (docs/forward.md,
// docs/daemon.md): the forward proxy adds Via both ways and sends no
// forwarding fields; a reverse route adds X-Forwarded-For,
// X-Forwarded-Proto, X-Forwarded-Host and Forwarded for its upstream.
var (
	viaField        = regexp.MustCompile(`(?m)^Via: [^\n]*\n`)
	viaLine         = regexp.MustCompile(`(?m)^Via: [^\r]*\r\n`)
	forwardingField = regexp.MustCompile(`(?m)^(X-Forwarded-[A-Za-z]+|Forwarded|X-Real-Ip): [^\n]*\n`)
	// A reverse route also strips the fields some applications read as
	// the client's address or URL when no trusted proxy sent them
	// (forwarding.go's spoof rules); a forward proxy vouches for nothing
	// to its targets and passes them on.
	spoofField = regexp.MustCompile(`(?m)^(X-Original-Url|X_[A-Za-z_]+): [^\n]*\n`)
)

// TestForwardRelayMatchesReverseRelay is the differential test of the
// daemon's two relay engines: the relay of reverse routes (relay.go) and
// the httputil.ReverseProxy of forward listeners (internal/forward). The
// requests of relayCases go once to a reverse route and once, in absolute
// form, through a forward listener, to the same recording backend. Apart
// from Via and the forwarding fields, the backend must receive the same
// request and the client the same bytes back: the same hop-by-hop fields
// removed, the same query kept as written, the same 1xx, trailers,
// streams, bodies and framing.
func TestForwardRelayMatchesReverseRelay(t *testing.T) {
	b := startRecordingBackend(t)
	backend := b.ln.Addr().String()
	d := startDaemonBefore(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - upstreams: ["{{backend}}"]
        limit: {permits: 8}
  - name: egress
    protocol: http
    mode: forward
    listen: "127.0.0.1:0"
    forward:
      destinations: {allow: ["127.0.0.0/8"]}
      connect_ports: [443]
      limits: [{key: client_ip, permits: 8}]
`, "http://"+backend)
	for _, tc := range relayCases {
		if strings.HasPrefix(tc.raw, "trusted ") {
			continue // about the forwarding fields a reverse route trusts
		}
		t.Run(tc.name, func(t *testing.T) {
			raw := asTarget(tc.raw, backend)
			revResp := exchangeRaw(t, d.srv.Addr("web").String(), raw.origin)
			revReq := b.take()
			fwdResp := exchangeRaw(t, d.srv.Addr("egress").String(), raw.absolute)
			fwdReq := b.take()
			if revReq == "" || fwdReq == "" {
				t.Fatalf("the backend saw %q through the reverse route and %q through the forward proxy", revReq, fwdReq)
			}
			if !strings.Contains(fwdReq, "\nVia: \"1.1 portcullis\"\n") {
				t.Errorf("no Via on the forwarded request:\n%s", fwdReq)
			}
			if !strings.HasPrefix(fwdResp, "HTTP/1.") || !strings.Contains(fwdResp, "\r\nVia: 1.1 portcullis\r\n") {
				t.Errorf("no Via on the forward proxy's answer: %q", fwdResp)
			}
			if spoofField.MatchString(revReq) {
				t.Errorf("the reverse route passed a spoofable field on:\n%s", revReq)
			}
			revReq = forwardingField.ReplaceAllString(revReq, "")
			fwdReq = viaField.ReplaceAllString(fwdReq, "")
			fwdReq = spoofField.ReplaceAllString(fwdReq, "")
			fwdReq = sameQueryAs(t, fwdReq, revReq, raw.origin)
			if revReq != fwdReq {
				t.Errorf("the backend received\n%s\nthrough the forward proxy, and\n%s\nthrough the reverse route", fwdReq, revReq)
			}
			fwdResp = viaLine.ReplaceAllString(fwdResp, "")
			fwdResp = strings.Replace(fwdResp, continue100+continue100, continue100, 1)
			revResp = strings.Replace(revResp, continue100+continue100, continue100, 1)
			if strings.HasPrefix(tc.name, "stream: ") {
				fwdResp, revResp = dechunk(t, fwdResp), dechunk(t, revResp)
			}
			if fwdResp != revResp {
				t.Errorf("the client received\n%q\nthrough the forward proxy, and\n%q\nthrough the reverse route", fwdResp, revResp)
			}
		})
	}
}

// targetForms is one request written for a reverse route (origin form)
// and for a forward proxy (absolute form), both naming backend as Host.
type targetForms struct{ origin, absolute string }

// asTarget rewrites a request of relayCases to name backend as its Host,
// in origin form and in absolute form.
func asTarget(raw, backend string) targetForms {
	raw = strings.Replace(raw, "Host: app.test\r\n", "Host: "+backend+"\r\n", 1)
	raw = strings.Replace(raw, " http://app.test/", " /", 1)
	method, rest, _ := strings.Cut(raw, " ")
	return targetForms{
		origin:   raw,
		absolute: method + " http://" + backend + rest,
	}
}

// sameQueryAs checks the one difference of request targets: a reverse
// route forwards a query Go's parser refuses (a ';', a malformed escape)
// re-encoded from what the parser accepts, as httputil.ReverseProxy does,
// so that its upstream cannot read a query the daemon did not; a forward
// proxy passes the query on as the client wrote it (a proxy's client
// talks to the target, not to the daemon). It returns fwdReq with the
// reverse route's request line, once the forward proxy's has been checked
// against the client's.
func sameQueryAs(t *testing.T, fwdReq, revReq, origin string) string {
	t.Helper()
	sent, _, _ := strings.Cut(origin, "\r\n")
	fwdLine, fwdRest, _ := strings.Cut(fwdReq, "\n")
	revLine, _, _ := strings.Cut(revReq, "\n")
	if fwdLine == revLine {
		return fwdReq
	}
	if fwdLine != sent {
		t.Errorf("the forward proxy sent %q for the client's %q", fwdLine, sent)
	}
	if !strings.ContainsAny(sent, ";%") {
		t.Errorf("the reverse route sent %q for the client's %q, a query Go parses", revLine, sent)
	}
	return revLine + "\n" + fwdRest
}

// TestInterceptRelayMatchesReverseRelay holds the relay of intercepted
// exchanges (internal/intercept's httputil.ReverseProxy, inside a TLS
// session the daemon terminates with a certificate it mints) to the relay
// of reverse routes, as TestForwardRelayMatchesReverseRelay holds the
// forward proxy's: the same requests, once to a reverse route and once
// inside an intercepted CONNECT, reach the same backend (over TLS for the
// intercepted ones), which must receive the same request, and the client
// the same bytes back, Via, the forwarding fields and the spoofable
// fields aside.
func TestInterceptRelayMatchesReverseRelay(t *testing.T) {
	b := startRecordingBackend(t)
	tlsAddr := b.serveTLS(t, sharedCert(t))
	_, tlsPort, _ := net.SplitHostPort(tlsAddr)
	target := "localhost:" + tlsPort
	ca := newTestCA(t, "portcullis relay test CA")
	text := strings.NewReplacer("{{ca_cert}}", ca.certFile, "{{ca_key}}", ca.keyFile, "{{origin_ca}}", caFile(t)).Replace(`
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - upstreams: ["{{backend}}"]
        limit: {permits: 8}
  - name: egress
    protocol: http
    listen: "127.0.0.1:0"
    mode: forward
    forward:
      destinations: {allow: ["127.0.0.0/8"]}
      connect_ports: [` + tlsPort + `]
      limits: [{key: client_ip, permits: 8}]
      intercept:
        ca_cert: "{{ca_cert}}"
        ca_key: "{{ca_key}}"
        upstream: {ca_file: "{{origin_ca}}"}
`)
	d := startDaemonBefore(t, text, "http://"+b.ln.Addr().String())
	for _, tc := range relayCases {
		if strings.HasPrefix(tc.raw, "trusted ") {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			raw := asTarget(tc.raw, target).origin
			revResp := exchangeRaw(t, d.srv.Addr("web").String(), raw)
			revReq := b.take()
			icResp := exchangeIntercepted(t, d.srv.Addr("egress").String(), target, ca.pool, raw)
			icReq := b.take()
			if revReq == "" || icReq == "" {
				t.Fatalf("the backend saw %q through the reverse route and %q inside the intercepted session", revReq, icReq)
			}
			if !strings.Contains(icReq, "\nVia: \"1.1 portcullis\"\n") || !strings.Contains(icResp, "\r\nVia: 1.1 portcullis\r\n") {
				t.Errorf("no Via both ways inside the intercepted session:\n%s\n%q", icReq, icResp)
			}
			revReq = forwardingField.ReplaceAllString(revReq, "")
			icReq = spoofField.ReplaceAllString(viaField.ReplaceAllString(icReq, ""), "")
			icReq = sameQueryAs(t, icReq, revReq, raw)
			if revReq != icReq {
				t.Errorf("the backend received\n%s\ninside the intercepted session, and\n%s\nthrough the reverse route", icReq, revReq)
			}
			icResp = viaLine.ReplaceAllString(icResp, "")
			icResp = strings.Replace(icResp, continue100+continue100, continue100, 1)
			revResp = strings.Replace(revResp, continue100+continue100, continue100, 1)
			if strings.HasPrefix(tc.name, "stream: ") {
				icResp, revResp = dechunk(t, icResp), dechunk(t, revResp)
			}
			if icResp != revResp {
				t.Errorf("the client received\n%q\ninside the intercepted session, and\n%q\nthrough the reverse route", icResp, revResp)
			}
		})
	}
}

// serveTLS serves b's handler over TLS with cert too, HTTP/1.1 only, and
// returns the address.
func (b *recordingBackend) serveTLS(t *testing.T, cert *testcert.Cert) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler:      b.srv.Handler,
		TLSConfig:    &tls.Config{Certificates: []tls.Certificate{cert.TLS}, NextProtos: []string{"http/1.1"}},
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
	}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// exchangeIntercepted opens a CONNECT tunnel to target through the
// forward listener at proxyAddr from 127.0.0.2, speaks TLS in it trusting
// roots (the interception CA), sends raw, and returns every byte of the
// answer, the Date fields masked.
func exchangeIntercepted(t *testing.T, proxyAddr, target string, roots *x509.CertPool, raw string) string {
	t.Helper()
	c := dialFrom(t, "127.0.0.2", proxyAddr)
	_ = c.SetDeadline(time.Now().Add(waitLimit))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT %s: %v %v", target, resp, err)
	}
	host, _, _ := net.SplitHostPort(target)
	tc := tls.Client(&bufferedConn{Conn: c, r: br}, &tls.Config{ServerName: host, RootCAs: roots, NextProtos: []string{"http/1.1"}})
	if _, err := io.WriteString(tc, raw); err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(tc)
	if err != nil {
		t.Fatalf("read the answer: %v (after %q)", err, out)
	}
	return dateLine.ReplaceAllString(string(out), "Date: -\r")
}

// bufferedConn is a connection whose first bytes were read into r.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
