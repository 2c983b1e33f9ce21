//lint:file-ignore SA1019 x/net/http2's Transport is the client that sends a plain CONNECT over HTTP/2 to a chosen address.

package daemon_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestInterceptHTTP2ConnectStream: over an https listener, a client that
// negotiated h2 sends its CONNECT as a stream; the daemon intercepts it,
// the TLS session runs inside the stream, the CONNECT's permit goes back
// once the handshake is done, the request inside is counted on its own,
// and everything is back to zero once the client ends the stream.
func TestInterceptHTTP2ConnectStream(t *testing.T) { defaultServer(t, testInterceptHTTP2ConnectStream) }

func testInterceptHTTP2ConnectStream(t *testing.T) {
	certFile, keyFile := certFiles(t)
	text := onHTTPS(interceptAuthed, certFile, keyFile)
	d := startIntercept(t, text, "")
	tr := &http2.Transport{
		TLSClientConfig: &tls.Config{RootCAs: sharedCert(t).Pool, ServerName: "localhost", NextProtos: []string{"h2"}},
		DialTLSContext: func(ctx context.Context, network, _ string, cfg *tls.Config) (net.Conn, error) {
			nd := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
			return (&tls.Dialer{NetDialer: nd, Config: cfg}).DialContext(ctx, network, d.srv.Addr("egress").String())
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	pr, pw := io.Pipe()
	defer pw.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitLimit)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodConnect, "https://localhost:"+d.port(), pr)
	req.Header.Set("Proxy-Authorization", basicAuth("alice", "alice-pw"))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
		t.Fatalf("CONNECT over HTTP/2: %d %s", resp.StatusCode, resp.Proto)
	}
	tc := tls.Client(&streamConn{r: resp.Body, w: pw}, &tls.Config{ServerName: "localhost", RootCAs: d.ca.pool, NextProtos: []string{"http/1.1"}})
	if err := tc.HandshakeContext(ctx); err != nil {
		t.Fatal(err)
	}
	d.waitFor("the CONNECT's permit back once intercepted", func() bool { return d.forwardLimit("egress", "proxy_user").Totals.InUse == 0 })
	if _, err := io.WriteString(tc, "GET /echo HTTP/1.1\r\nHost: localhost:"+d.port()+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	inner, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(inner.Body)
	inner.Body.Close()
	if inner.StatusCode != http.StatusOK {
		t.Fatalf("request inside the stream: %d %q", inner.StatusCode, body)
	}
	checkEchoed(t, string(body), "localhost:"+d.port())
	if tot := d.forwardLimit("egress", "proxy_user").Totals; tot.Granted != 2 {
		t.Errorf("proxy_user totals %+v: want the CONNECT and the request inside granted", tot)
	}
	tc.Close()
	resp.Body.Close()
	d.waitFor("the session to end", func() bool { return d.intercepted().SessionsOpen == 0 })
}

// streamConn is the client side of an HTTP/2 CONNECT stream as a net.Conn.
type streamConn struct {
	r io.ReadCloser
	w *io.PipeWriter
}

func (c *streamConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *streamConn) Write(p []byte) (int, error)      { return c.w.Write(p) }
func (c *streamConn) Close() error                     { c.w.Close(); return c.r.Close() }
func (c *streamConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *streamConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *streamConn) SetDeadline(time.Time) error      { return nil }
func (c *streamConn) SetReadDeadline(time.Time) error  { return nil }
func (c *streamConn) SetWriteDeadline(time.Time) error { return nil }
