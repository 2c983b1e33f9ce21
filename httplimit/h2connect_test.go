//lint:file-ignore SA1019 net/http's Transport refuses the :protocol pseudo-header of extended CONNECT (validateHeaders), so this client is x/net/http2's.

package httplimit_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/net/http2"

	"github.com/seed-a07d1050/portcullis/httplimit"
)

// Go's HTTP/2 server accepts extended CONNECT (RFC 8441, the :protocol
// pseudo-header used by WebSocket over HTTP/2) only when the process starts
// with GODEBUG=http2xconnect=1: net/http reads the environment once, at
// init. The test therefore runs itself again in a child process with it.
const h2xChildEnv = "HTTPLIMIT_TEST_H2XCONNECT_CHILD"

func TestHTTP2ExtendedConnect(t *testing.T) {
	if os.Getenv(h2xChildEnv) == "" {
		ctx, cancel := context.WithTimeout(t.Context(), 2*waitLimit)
		defer cancel()
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHTTP2ExtendedConnect$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), h2xChildEnv+"=1", "GODEBUG=http2xconnect=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestHTTP2ExtendedConnect") {
			t.Fatalf("child test: %v\n%s", err, out)
		}
		return
	}
	for _, tc := range []struct {
		name    string
		release bool
	}{
		{"held until the stream ends", false},
		{"released once established", true},
	} {
		t.Run(tc.name, func(t *testing.T) { testExtendedConnect(t, tc.release) })
	}
}

func testExtendedConnect(t *testing.T, releaseTunnels bool) {
	l := newLimiter(t, httplimit.Config{Policy: httplimit.Policy{Permits: 1}, ReleaseTunnels: releaseTunnels})
	ts, _ := startTLSServer(t, l.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect || r.Header.Get(":protocol") != "echo" {
			http.Error(w, "want extended CONNECT", http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		sc := bufio.NewScanner(r.Body)
		for sc.Scan() {
			fmt.Fprintln(w, sc.Text())
			http.NewResponseController(w).Flush()
		}
	})))
	tlsConf := ts.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	tlsConf.NextProtos = []string{"h2"}
	tr := &http2.Transport{
		TLSClientConfig: tlsConf,
		DialTLSContext: func(ctx context.Context, network, addr string, cfg *tls.Config) (net.Conn, error) {
			return (&tls.Dialer{NetDialer: dialerFrom("127.0.0.2"), Config: cfg}).DialContext(ctx, network, addr)
		},
	}
	t.Cleanup(tr.CloseIdleConnections)

	open := func() (*http.Response, *io.PipeWriter) {
		pr, pw := io.Pipe()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodConnect, ts.URL+"/tunnel", pr)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(":protocol", "echo")
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatalf("extended CONNECT: %v", err)
		}
		return resp, pw
	}
	resp, pw := open()
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
		t.Fatalf("answer %s %d, want HTTP/2 200", resp.Proto, resp.StatusCode)
	}
	fmt.Fprintln(pw, "hello")
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "hello\n" {
		t.Fatalf("echo %q %v", line, err)
	}

	second, secondPW := open()
	second.Body.Close()
	secondPW.Close()
	want := http.StatusTooManyRequests
	if releaseTunnels {
		want = http.StatusOK
	}
	if second.StatusCode != want {
		t.Errorf("second tunnel while the first is open: %d, want %d", second.StatusCode, want)
	}
	if !releaseTunnels && l.Totals().InUse != 1 {
		t.Errorf("totals %+v, want the open tunnel in use", l.Totals())
	}
	pw.Close()
	resp.Body.Close()
	expectIdle(t, l)
}
