package daemon_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
)

// quicDaemon starts a daemon with one http3 listener "quic" whose quic block
// is quicBlock, and returns it with the URL of the listener.
func quicDaemon(t *testing.T, quicBlock string) (*testDaemon, string, *x509.CertPool) {
	t.Helper()
	certFile, keyFile, pool := selfSigned(t)
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: quic
    protocol: http3
    listen: "127.0.0.1:0"
    tls: {cert_file: "`+certFile+`", key_file: "`+keyFile+`"}
    quic: `+quicBlock+`
    routes:
      - upstreams: ["{{backend}}"]
`)
	port := d.srv.Addr("quic").(*net.UDPAddr).Port
	return d, "https://127.0.0.1:" + strconv.Itoa(port), pool
}

// quicMetric reads one value of the daemon's QUIC metrics: name is the
// metric with its labels but the listener's, such as
// `portcullis_quic_attempts_total{outcome="retried"}`.
func quicMetric(t *testing.T, d *testDaemon, name string) float64 {
	t.Helper()
	metric, labels, _ := strings.Cut(name, "{")
	want := metric + `{listener="quic"`
	if labels != "" {
		want += "," + labels
	} else {
		want += "}"
	}
	for _, line := range strings.Split(d.metrics(), "\n") {
		if v, ok := strings.CutPrefix(line, want+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric line %q", line)
			}
			return f
		}
	}
	t.Fatalf("no metric %s in /metrics", want)
	return 0
}

// deafConn is a UDP socket that sends and never receives: a QUIC client on
// it starts a handshake and never completes it, as a stalled or spoofed
// client does.
type deafConn struct {
	*net.UDPConn
	closed chan struct{}
	once   sync.Once
}

// ReadMsgUDP hides the UDPConn's own, so that quic-go reads through
// ReadFrom.
func (c *deafConn) ReadMsgUDP() {}

func (c *deafConn) ReadFrom([]byte) (int, net.Addr, error) {
	<-c.closed
	return 0, nil, net.ErrClosed
}

func (c *deafConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.UDPConn.Close()
}

// stallHandshake starts a QUIC handshake from ip to addr that never
// completes: the client hears nothing, and only resends its Initial. It
// returns a function that abandons it.
func stallHandshake(t *testing.T, ip, addr string) (stop func()) {
	t.Helper()
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(ip)})
	if err != nil {
		t.Fatal(err)
	}
	conn := &deafConn{UDPConn: udp, closed: make(chan struct{})}
	tr := &quic.Transport{Conn: conn}
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = tr.Dial(ctx, ua, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h3"}}, &quic.Config{HandshakeIdleTimeout: waitLimit})
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
			_ = conn.Close() // first: the transport waits for its reader to see the close
			_ = tr.Close()
		})
	}
	t.Cleanup(stop)
	return stop
}

// h3Get makes one HTTP/3 request from ip with a new client and reports its
// error.
func h3Get(t *testing.T, ip, url string, pool *x509.CertPool) error {
	t.Helper()
	c, tr := h3Client(t, ip, pool)
	defer tr.Close()
	resp, err := c.Get(url + "/")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return errors.New("status " + resp.Status)
	}
	return nil
}

// retry: always answers the first attempt of every unproven address with a
// Retry, which quic-go's client follows without the application seeing it:
// the request is served, and the daemon counts the Retry.
func TestQUICRetryAlways(t *testing.T) {
	d, url, files := quicDaemon(t, "{retry: always}")
	if got := quicMetric(t, d, "portcullis_quic_retry_threshold"); got != 0 {
		t.Fatalf("retry threshold %v with retry: always, want 0", got)
	}
	for i, ip := range []string{"127.0.0.2", "127.0.0.3"} {
		if err := h3Get(t, ip, url, files); err != nil {
			t.Fatalf("client %s behind a Retry: %v", ip, err)
		}
		if got := quicMetric(t, d, `portcullis_quic_attempts_total{outcome="retried"}`); got < float64(i+1) {
			t.Fatalf("after %d new clients, %v Retries, want one each at least", i+1, got)
		}
	}
	if got := quicMetric(t, d, `portcullis_quic_attempts_total{outcome="completed"}`); got != 2 {
		t.Fatalf("%v handshakes completed, want 2", got)
	}
}

// Without retry: always, a lone new client on an idle listener gets no
// Retry: the comparison that shows the setting is what made the Retry.
func TestQUICNoRetryWhenIdle(t *testing.T) {
	d, url, files := quicDaemon(t, "{}")
	if err := h3Get(t, "127.0.0.2", url, files); err != nil {
		t.Fatal(err)
	}
	if got := quicMetric(t, d, `portcullis_quic_attempts_total{outcome="retried"}`); got != 0 {
		t.Fatalf("%v Retries for one client on an idle listener, want 0", got)
	}
}

// A minimum above the maximum pins the threshold at the minimum: with a
// minimum of 3 and a maximum of 1, two stalled handshakes leave a new
// client without a Retry, and a third turns Retry on.
func TestQUICMinimumAboveMaximumPinsThreshold(t *testing.T) {
	// Stalled handshakes end 2 × handshake_timeout after they start: long
	// enough for the test, short enough for the daemon to be idle soon after.
	d, url, files := quicDaemon(t, "{retry_threshold_min: 3, retry_threshold_max: 1, handshake_timeout: 2s}")
	addr := d.srv.Addr("quic").String()
	if got := quicMetric(t, d, "portcullis_quic_retry_threshold"); got != 3 {
		t.Fatalf("retry threshold %v, want 3 (the minimum)", got)
	}
	inProgress := func(n float64) func() bool {
		return func() bool { return quicMetric(t, d, "portcullis_quic_in_progress") == n }
	}
	stallHandshake(t, "127.0.0.5", addr)
	stallHandshake(t, "127.0.0.6", addr)
	d.waitFor("2 handshakes in progress", inProgress(2))
	if err := h3Get(t, "127.0.0.2", url, files); err != nil {
		t.Fatal(err)
	}
	if got := quicMetric(t, d, `portcullis_quic_attempts_total{outcome="retried"}`); got != 0 {
		t.Fatalf("%v Retries with 2 handshakes in progress under a threshold of 3, want 0", got)
	}
	stallHandshake(t, "127.0.0.7", addr)
	d.waitFor("3 handshakes in progress", inProgress(3))
	if err := h3Get(t, "127.0.0.3", url, files); err != nil {
		t.Fatalf("a client behind a Retry: %v", err)
	}
	if got := quicMetric(t, d, `portcullis_quic_attempts_total{outcome="retried"}`); got < 1 {
		t.Fatal("no Retry with 3 handshakes in progress at a threshold of 3")
	}
}

// max_in_progress below the threshold's maximum caps the threshold: at
// max_in_progress attempts are refused with CONNECTION_REFUSED, and no
// Retry comes first.
func TestQUICMaxInProgressCapsThreshold(t *testing.T) {
	d, url, files := quicDaemon(t, "{retry_threshold_min: 10, retry_threshold_max: 100, max_in_progress: 2, handshake_timeout: 2s}")
	if got := quicMetric(t, d, "portcullis_quic_retry_threshold"); got != 2 {
		t.Fatalf("retry threshold %v, want 2 (max_in_progress)", got)
	}
	addr := d.srv.Addr("quic").String()
	stopA := stallHandshake(t, "127.0.0.5", addr)
	stopB := stallHandshake(t, "127.0.0.6", addr)
	d.waitFor("2 handshakes in progress", func() bool { return quicMetric(t, d, "portcullis_quic_in_progress") == 2 })
	err := h3Get(t, "127.0.0.2", url, files)
	var te *quic.TransportError
	if !errors.As(err, &te) || te.ErrorCode != quic.ConnectionRefused {
		t.Fatalf("a new client at max_in_progress: %v, want CONNECTION_REFUSED", err)
	}
	if got := quicMetric(t, d, `portcullis_quic_attempts_total{outcome="retried"}`); got != 0 {
		t.Fatalf("%v Retries before refusing at max_in_progress, want 0", got)
	}
	stopA()
	stopB()
	d.waitFor("the stalled handshakes timed out", func() bool { return quicMetric(t, d, "portcullis_quic_in_progress") == 0 })
	if err := h3Get(t, "127.0.0.3", url, files); err != nil {
		t.Fatalf("a new client below max_in_progress: %v", err)
	}
}

// handshake_timeout is quic-go's HandshakeIdleTimeout: a stalled handshake
// ends as timed out within twice it, far sooner than quic-go's default of
// 5 s (10 s for the whole handshake) would end it. (The deaf client goes on
// resending its first Initial, which the listener takes as new attempts:
// each of them times out the same way, and none is left once it stops.)
func TestQUICHandshakeTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	d, _, _ := quicDaemon(t, "{handshake_timeout: "+timeout.String()+"}")
	start := time.Now()
	stop := stallHandshake(t, "127.0.0.5", d.srv.Addr("quic").String())
	d.waitFor("a stalled handshake timed out", func() bool {
		return quicMetric(t, d, `portcullis_quic_attempts_total{outcome="timed_out"}`) >= 1
	})
	if took := time.Since(start); took > 4*time.Second {
		t.Fatalf("the stalled handshake ended after %v: not the handshake_timeout of %v", took, timeout)
	}
	stop()
	d.waitFor("no handshake left in progress", func() bool { return quicMetric(t, d, "portcullis_quic_in_progress") == 0 })
	if n := quicMetric(t, d, `portcullis_quic_attempts_total{outcome="completed"}`); n != 0 {
		t.Fatalf("%v handshakes of a deaf client completed", n)
	}
}
