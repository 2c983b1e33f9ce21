package daemon_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestSendTimeoutEndsStalledExchange asks for an endless body and never
// reads it: within send_timeout the exchange ends, the route's permit comes
// back and the upstream's response is cut off, so a client that stops
// reading cannot hold its permit (or an upstream connection) for good.
func TestSendTimeoutEndsStalledExchange(t *testing.T) {
	bothServers(t, testSendTimeoutEndsStalledExchange)
}

func testSendTimeoutEndsStalledExchange(t *testing.T) {
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    send_timeout: 1s
    routes:
      - name: big
        upstreams: ["{{backend}}"]
        limit: {permits: 1}
`)
	c := dialFrom(t, "127.0.0.2", d.srv.Addr("web").String())
	fmt.Fprint(c, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
	checkStalledExchangeEnds(t, d, "web")
	if st, _, _ := get(t, d.client("127.0.0.2"), d.url("web", "/")); st != http.StatusOK {
		t.Errorf("next request of the client: %d, want 200", st)
	}
}

// TestSendTimeoutSparesSlowReaders reads a large body slowly but steadily:
// a client that makes progress is never cut off by send_timeout.
func TestSendTimeoutSparesSlowReaders(t *testing.T) { bothServers(t, testSendTimeoutSparesSlowReaders) }

func testSendTimeoutSparesSlowReaders(t *testing.T) {
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    send_timeout: 1s
    routes:
      - upstreams: ["{{backend}}"]
`)
	resp, err := d.client("127.0.0.2").Get(d.url("web", "/big"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 256<<10)
	deadline := time.Now().Add(3 * time.Second) // three send timeouts
	for time.Now().Before(deadline) {
		if _, err := io.ReadFull(resp.Body, buf); err != nil {
			t.Fatalf("slow reader cut off: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestMaxConcurrentStreams opens one HTTP/2 connection and starts more
// streams than max_concurrent_streams at once: the server refuses the
// extra streams, so that the upstream never sees more than the limit from
// one connection.
func TestMaxConcurrentStreams(t *testing.T) { bothServers(t, testMaxConcurrentStreams) }

func testMaxConcurrentStreams(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t)
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: tls
    protocol: https
    listen: "127.0.0.1:0"
    max_concurrent_streams: 3
    tls: {cert_file: "`+certFile+`", key_file: "`+keyFile+`"}
    routes:
      - upstreams: ["{{backend}}"]
`)
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: waitLimit}
	conn, err := tls.DialWithDialer(dialer, "tcp", d.srv.Addr("tls").String(),
		&tls.Config{RootCAs: pool, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(waitLimit))
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	// Read the server's settings and ack them, so the server's limit is in
	// force (before its ack a server may only refuse, not reset).
	var maxStreams uint32
	for maxStreams == 0 {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			if v, ok := sf.Value(http2.SettingMaxConcurrentStreams); ok {
				maxStreams = v
			}
			_ = fr.WriteSettingsAck()
		}
	}
	if maxStreams != 3 {
		t.Fatalf("server advertised %d concurrent streams, want 3", maxStreams)
	}
	const streams = 8
	var hbuf []byte
	for i := range streams {
		hbuf = hbuf[:0]
		enc := hpack.NewEncoder(&byteWriter{&hbuf})
		for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "x"}, {":path", "/?ms=1500"}} {
			_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: hbuf, EndStream: true, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
	}
	answered, reset := 0, 0
	for answered+reset < streams {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("after %d answers and %d resets: %v", answered, reset, err)
		}
		switch f := f.(type) {
		case *http2.HeadersFrame:
			answered++
		case *http2.RSTStreamFrame:
			reset++
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY %v after %d answers and %d resets", f.ErrCode, answered, reset)
		}
	}
	if answered != 3 || reset != streams-3 {
		t.Errorf("%d streams answered and %d reset, want 3 and %d", answered, reset, streams-3)
	}
	if m := d.backend.maxInFlight.Load(); m > 3 {
		t.Errorf("the upstream saw %d requests at once from one connection, want at most 3", m)
	}
}

type byteWriter struct{ b *[]byte }

func (w *byteWriter) Write(p []byte) (int, error) { *w.b = append(*w.b, p...); return len(p), nil }

// TestSendTimeoutEndsStalledHTTP2Stream is TestSendTimeoutEndsStalledExchange
// over HTTP/2: a client that opens its flow-control windows wide, asks for
// an endless body and reads nothing. The connection's writes stall on the
// full socket (the frames batched ahead of them included), yet within
// send_timeout the stream's exchange ends, the upstream's response is cut
// off and the permit comes back. HTTP/2 is x/net/http2's with either
// http1_server: one server suffices.
func TestSendTimeoutEndsStalledHTTP2Stream(t *testing.T) {
	defaultServer(t, testSendTimeoutEndsStalledHTTP2Stream)
}

func testSendTimeoutEndsStalledHTTP2Stream(t *testing.T) {
	d, pool := startSendTimeoutH2(t)
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: waitLimit}
	conn, err := tls.DialWithDialer(dialer, "tcp", d.srv.Addr("tls").String(),
		&tls.Config{RootCAs: pool, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	const wide = 1<<31 - 1
	if err := fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: wide}); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteWindowUpdate(0, wide-65535); err != nil {
		t.Fatal(err)
	}
	var hbuf []byte
	enc := hpack.NewEncoder(&byteWriter{&hbuf})
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "x"}, {":path", "/big"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hbuf, EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	// From here on the client reads nothing.
	checkStalledExchangeEnds(t, d, "tls")
}

// TestSendTimeoutSparesSlowHTTP2Readers reads a large body over HTTP/2
// slowly but steadily: the connection's bound on its writes never cuts
// off a client that makes progress.
func TestSendTimeoutSparesSlowHTTP2Readers(t *testing.T) {
	defaultServer(t, testSendTimeoutSparesSlowHTTP2Readers)
}

func testSendTimeoutSparesSlowHTTP2Readers(t *testing.T) {
	d, pool := startSendTimeoutH2(t)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("https://" + d.srv.Addr("tls").String() + "/big")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Fatalf("%s, want HTTP/2", resp.Proto)
	}
	buf := make([]byte, 256<<10)
	deadline := time.Now().Add(3 * time.Second) // three send timeouts
	for time.Now().Before(deadline) {
		if _, err := io.ReadFull(resp.Body, buf); err != nil {
			t.Fatalf("slow reader cut off: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startSendTimeoutH2 starts the daemon of the HTTP/2 send_timeout tests: an
// https listener "tls" with a send_timeout of 1s and one route, "big", of
// one permit. It returns the pool that trusts the listener's certificate.
func startSendTimeoutH2(t *testing.T) (*testDaemon, *x509.CertPool) {
	certFile, keyFile, pool := selfSigned(t)
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: tls
    protocol: https
    listen: "127.0.0.1:0"
    send_timeout: 1s
    tls: {cert_file: "`+certFile+`", key_file: "`+keyFile+`"}
    routes:
      - name: big
        upstreams: ["{{backend}}"]
        limit: {permits: 1}
`)
	return d, pool
}

// checkStalledExchangeEnds waits for the exchange of listener's route
// "big", whose client reads nothing, to hold its permit, and checks that
// within about send_timeout (1s) the upstream's endless body is cut off
// and the permit comes back.
func checkStalledExchangeEnds(t *testing.T, d *testDaemon, listener string) {
	t.Helper()
	d.waitFor("the exchange to hold its permit", func() bool { return d.route(listener, "big").Limit.Totals.InUse == 1 })
	start := time.Now()
	select {
	case err := <-d.backend.bigEnded:
		if err == nil {
			t.Fatal("the whole endless body was sent to a client that reads nothing")
		}
	case <-time.After(waitLimit):
		t.Fatal("the stalled exchange was not ended")
	}
	d.waitFor("the permit to come back", func() bool { return d.route(listener, "big").Limit.Totals.InUse == 0 })
	if waited := time.Since(start); waited > 5*time.Second {
		t.Errorf("the stalled exchange ended after %v, want about send_timeout (1s)", waited)
	}
}
