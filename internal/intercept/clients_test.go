//lint:file-ignore SA1019 x/net/http2's Transport is the client that sends a plain CONNECT over HTTP/2 to a chosen address.

package intercept_test

import (
	"context"
	"crypto/tls"
	"github.com/seed-a07d1050/portcullis/internal/proxytest"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/seed-a07d1050/portcullis/httplimit"
	"github.com/seed-a07d1050/portcullis/internal/intercept"
	"github.com/seed-a07d1050/portcullis/internal/logtest"
	"github.com/seed-a07d1050/portcullis/internal/waitfor"
)

// need returns the path of a tool, or skips (fails under CI=true).
func need(t *testing.T, tool string) string {
	t.Helper()
	path, err := exec.LookPath(tool)
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is missing (CI=true); .ci/run installs it", tool)
	}
	t.Skipf("%s is missing: skipping (install it to run this test)", tool)
	return ""
}

// cleanEnv is the environment without any proxy setting.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasSuffix(strings.ToLower(name), "_proxy") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// TestCurl drives the interception with curl trusting the CA through
// --cacert, over HTTP/1.1 and HTTP/2 inside the session.
func TestCurl(t *testing.T) {
	curl := need(t, "curl")
	tg := newTarget(t)
	s := newStack(t, stackOptions{users: []string{"alice", "alice-pw"}, limits: []httplimit.Config{userLimit(2)}})
	s.ca.certFile = writeTemp(t, s.ca.certPEM)
	for _, tc := range []struct {
		name, flag, version string
	}{
		{"HTTP/1.1", "--http1.1", "1.1"},
		{"HTTP/2", "--http2", "2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := s.ic.Stats()
			ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
			defer cancel()
			cmd := exec.CommandContext(ctx, curl, "-sS", "--max-time", "10", tc.flag,
				"-x", "http://alice:alice-pw@"+s.addr, "--cacert", s.ca.certFile,
				"-w", "\n%{http_connect} %{http_code} %{http_version}", "https://localhost:"+tg.Port()+"/echo")
			cmd.Env = cleanEnv()
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("curl: %v\n%s", err, out)
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if got, want := lines[len(lines)-1], "200 200 "+tc.version; got != want {
				t.Fatalf("curl reports %q, want %q\n%s", got, want, out)
			}
			e := proxytest.DecodeEcho(t, []byte(strings.Join(lines[:len(lines)-1], "\n")))
			if e.Host != "localhost:"+tg.Port() || !strings.Contains(e.Header.Get("Via"), "portcullis") {
				t.Errorf("target saw %+v", e)
			}
			after := s.ic.Stats()
			if after.Sessions != before.Sessions+1 || after.Requests != before.Requests+1 {
				t.Errorf("stats %+v after %+v, want one more intercepted session and request", after, before)
			}
			proxytest.ExpectIdle(t, s.limits...)
		})
	}
	// Without --cacert curl refuses our certificate, and the failure is
	// counted on our side.
	before := s.ic.Stats().HandshakeFailures
	cmd := exec.CommandContext(t.Context(), curl, "-sS", "--max-time", "10", "-x", "http://alice:alice-pw@"+s.addr,
		"--cacert", originCertFile(t), "https://localhost:"+tg.Port()+"/echo")
	cmd.Env = cleanEnv()
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("curl accepted the leaf without trusting the CA:\n%s", out)
	}
	waitfor.Cond(t, "curl's refusal to be counted", func() bool { return s.ic.Stats().HandshakeFailures == before+1 })
	proxytest.ExpectIdle(t, s.limits...)
}

func writeTemp(t testing.TB, data []byte) string {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "*.pem")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

func originCertFile(t testing.TB) string { return writeTemp(t, originCert(t).CertPEM) }

// A target whose certificate the proxy does not trust gets the client a
// 502 naming why; the refusal is logged once per host per minute.
func TestUpstreamBadCertificate(t *testing.T) {
	tg := newTarget(t)
	var logs logtest.Buffer
	s := newStack(t, stackOptions{
		systemRoots: true, // the origin's self-signed certificate is in no system store
		upstream:    intercept.UpstreamConfig{Logger: slog.New(slog.NewTextHandler(&logs, nil))},
	})
	now := time.Now()
	var clockMu sync.Mutex
	intercept.SetCertLogClock(s.upstream, func() time.Time {
		clockMu.Lock()
		defer clockMu.Unlock()
		return now
	})
	c := client(t, s, "", "", "127.0.0.2", s.ca.pool)
	lines := func() int { return strings.Count(logs.String(), "target certificate refused") }
	for range 3 {
		a := mustGet(t, c, "https://localhost:"+tg.Port()+"/echo")
		if a.status != http.StatusBadGateway || !strings.Contains(string(a.body), "certificate was refused: signed by an unknown authority") {
			t.Fatalf("answer %d %q, want 502 naming the unknown authority", a.status, a.body)
		}
	}
	if n := lines(); n != 1 {
		t.Errorf("%d log lines for 3 refusals within a minute, want 1:\n%s", n, logs.String())
	}
	clockMu.Lock()
	now = now.Add(61 * time.Second)
	clockMu.Unlock()
	mustGet(t, c, "https://localhost:"+tg.Port()+"/echo")
	if n := lines(); n != 2 {
		t.Errorf("%d log lines after a minute, want 2", n)
	}
	if !strings.Contains(logs.String(), "not_logged_since_last=2") {
		t.Errorf("the second line does not count the 2 refusals left out:\n%s", logs.String())
	}
	if st := s.upstream.Stats(); st.BadCertificates != 4 {
		t.Errorf("upstream stats %+v, want 4 bad certificates", st)
	}

	// A certificate for another name: the origin's is for localhost, the
	// client asked for other.test (resolved to the same address).
	s2 := newStack(t, stackOptions{})
	a := mustGet(t, client(t, s2, "", "", "127.0.0.2", s2.ca.pool), "https://other.test:"+tg.Port()+"/echo")
	if a.status != http.StatusBadGateway || !strings.Contains(string(a.body), "not other.test") {
		t.Errorf("answer %d %q, want 502 naming the name mismatch", a.status, a.body)
	}
}

// A proxy served over TLS with HTTP/2 takes CONNECTs as streams; an
// intercepted one carries the client's TLS session inside the stream.
func TestHTTP2ConnectStreamIntercepted(t *testing.T) {
	tg := newTarget(t)
	s := newStack(t, stackOptions{proxyTLS: true, users: []string{"alice", "alice-pw"}, limits: []httplimit.Config{userLimit(1)}})
	tr := &http2.Transport{
		TLSClientConfig: &tls.Config{RootCAs: originCert(t).Pool, ServerName: "localhost", NextProtos: []string{"h2"}},
		DialTLSContext: func(ctx context.Context, network, _ string, cfg *tls.Config) (net.Conn, error) {
			return (&tls.Dialer{NetDialer: proxytest.DialerFrom("127.0.0.2"), Config: cfg}).DialContext(ctx, network, s.addr)
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodConnect, "https://localhost:"+tg.Port(), pr)
	req.Header.Set("Proxy-Authorization", basic("alice", "alice-pw"))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT over HTTP/2: %d", resp.StatusCode)
	}
	stream := &pipeConn{r: resp.Body, w: pw}
	tc := tls.Client(stream, &tls.Config{ServerName: "localhost", RootCAs: s.ca.pool, NextProtos: []string{"http/1.1"}})
	if err := tc.HandshakeContext(t.Context()); err != nil {
		t.Fatal(err)
	}
	proxytest.ExpectIdle(t, s.limits...) // the CONNECT stream holds nothing once intercepted
	r, body := roundTrip(t, tc, "GET /echo HTTP/1.1\r\nHost: localhost:"+tg.Port()+"\r\n\r\n")
	if r.StatusCode != http.StatusOK || !strings.Contains(string(body), `"Host":"localhost:`+tg.Port()) {
		t.Errorf("answer %d %q", r.StatusCode, body)
	}
	tc.Close()
	resp.Body.Close()
	waitfor.Cond(t, "the session to end", func() bool { return s.ic.Sessions() == 0 })
	proxytest.ExpectIdle(t, s.limits...)
}

// pipeConn is the client side of an HTTP/2 CONNECT stream as a net.Conn.
type pipeConn struct {
	r io.ReadCloser
	w *io.PipeWriter
}

func (c *pipeConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *pipeConn) Write(p []byte) (int, error)      { return c.w.Write(p) }
func (c *pipeConn) Close() error                     { c.w.Close(); return c.r.Close() }
func (c *pipeConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *pipeConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *pipeConn) SetDeadline(time.Time) error      { return nil }
func (c *pipeConn) SetReadDeadline(time.Time) error  { return nil }
func (c *pipeConn) SetWriteDeadline(time.Time) error { return nil }
