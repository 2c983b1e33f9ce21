//lint:file-ignore SA1019 x/net/http2's Transport is the client that sends a plain CONNECT over HTTP/2 to a chosen address.

package httplimit_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"golang.org/x/net/http2"

	"github.com/seed-a07d1050/portcullis/httplimit"
)

// releasingConnect answers CONNECT over HTTP/1.1 like connectEcho, but
// gives the tunnel's permits back once the 200 is out, as an intercepting
// proxy does when interception starts; it reports what
// ReleaseTunnelPermits returned, twice.
func releasingConnect(released chan<- [2]int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		brw.WriteString("HTTP/1.1 200 Connection established\r\n\r\n")
		brw.Flush()
		first := httplimit.ReleaseTunnelPermits(w)
		released <- [2]int{first, httplimit.ReleaseTunnelPermits(w)}
		go func() {
			defer conn.Close()
			io.Copy(conn, brw)
		}()
	}
}

func TestReleaseTunnelPermitsHTTP1(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  httplimit.Config
	}{
		{"shared permits", httplimit.Config{Policy: httplimit.Policy{Permits: 1}}},
		{"separate tunnel permits", httplimit.Config{Policy: httplimit.Policy{Permits: 1}, TunnelPermits: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			outer := newLimiter(t, tc.cfg)
			inner := newLimiter(t, tc.cfg)
			released := make(chan [2]int, 4)
			ts := startServer(t, outer.Wrap(inner.Wrap(releasingConnect(released))))
			addr := ts.Listener.Addr().String()

			conn, br, status := dialCONNECT(t, addr, "127.0.0.2", "example.com:443")
			if !strings.HasPrefix(status, "HTTP/1.1 200") {
				t.Fatalf("status %q", status)
			}
			if got := <-released; got != [2]int{2, 0} {
				t.Errorf("ReleaseTunnelPermits returned %v, want [2 0]: both limiters, then nothing", got)
			}
			br.ReadString('\n')
			// The tunnel is open and works, and counts nowhere.
			fmt.Fprint(conn, "hello\n")
			if echo, err := br.ReadString('\n'); err != nil || echo != "hello\n" {
				t.Fatalf("echo %q %v", echo, err)
			}
			expectIdle(t, outer)
			expectIdle(t, inner)
			// So a second tunnel of the same client fits under Permits 1.
			conn2, _, status := dialCONNECT(t, addr, "127.0.0.2", "example.org:443")
			if !strings.HasPrefix(status, "HTTP/1.1 200") {
				t.Errorf("second tunnel beside the first: %q, want 200", status)
			}
			<-released
			conn.Close()
			conn2.Close()
			expectIdle(t, outer)
			expectIdle(t, inner)
			// Each tunnel was granted once per limiter (twice with separate
			// tunnel permits: the exchange permit and the tunnel permit),
			// and nothing was released twice: a double release would have
			// let InUse go negative or handed out a ghost permit.
			wantGranted := uint64(2)
			if tc.cfg.TunnelPermits != 0 {
				wantGranted = 4
			}
			for name, l := range map[string]*httplimit.Limiter{"outer": outer, "inner": inner} {
				if tot := l.Totals(); tot.Granted != wantGranted || tot.Refused != 0 || tot.InUse != 0 {
					t.Errorf("%s totals %+v, want %d granted, none refused or in use", name, tot, wantGranted)
				}
			}
		})
	}
}

// An ordinary exchange is no tunnel: ReleaseTunnelPermits leaves its permit
// alone, and the exchange keeps counting until it ends.
func TestReleaseTunnelPermitsOrdinaryExchange(t *testing.T) {
	l := newLimiter(t, httplimit.Config{Policy: httplimit.Policy{Permits: 1}})
	got := make(chan string, 1)
	ts := startServer(t, l.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := httplimit.ReleaseTunnelPermits(w)
		got <- fmt.Sprint(n, l.Totals().InUse)
	})))
	if code, err := getStatus(t.Context(), clientFrom(t, "127.0.0.2"), ts.URL); err != nil || code != http.StatusOK {
		t.Fatalf("GET: %d %v", code, err)
	}
	if s := <-got; s != "0 1" {
		t.Errorf("released, in use = %s; want 0 1", s)
	}
	if httplimit.ReleaseTunnelPermits(nil) != 0 {
		t.Error("ReleaseTunnelPermits(nil) released something")
	}
	expectIdle(t, l)
}

// Over HTTP/2 a CONNECT is a stream, never hijacked: the permits come back
// while the stream stays open.
func TestReleaseTunnelPermitsHTTP2(t *testing.T) {
	l := newLimiter(t, httplimit.Config{Policy: httplimit.Policy{Permits: 1}})
	released := make(chan int, 2)
	ts, _ := startTLSServer(t, l.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		released <- httplimit.ReleaseTunnelPermits(w)
		io.Copy(flushWriter{w}, r.Body)
	})))
	tlsConf := ts.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	tlsConf.NextProtos = []string{"h2"}
	tlsConf.ServerName = "example.com" // the certificate's name, whatever the CONNECT names
	addr := ts.Listener.Addr().String()
	tr := &http2.Transport{
		TLSClientConfig: tlsConf,
		DialTLSContext: func(ctx context.Context, network, _ string, cfg *tls.Config) (net.Conn, error) {
			return (&tls.Dialer{NetDialer: dialerFrom("127.0.0.2"), Config: cfg}).DialContext(ctx, network, addr)
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	open := func(host string) (*http.Response, *io.PipeWriter) {
		pr, pw := io.Pipe()
		t.Cleanup(func() { pw.Close() })
		req, err := http.NewRequestWithContext(t.Context(), http.MethodConnect, "https://"+host, pr)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatalf("CONNECT %s: %v", host, err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT %s: %d", host, resp.StatusCode)
		}
		return resp, pw
	}
	resp, pw := open("example.com:443")
	if n := <-released; n != 1 {
		t.Errorf("ReleaseTunnelPermits returned %d, want 1", n)
	}
	expectIdle(t, l)
	resp2, pw2 := open("example.org:443") // fits: the first holds nothing
	<-released
	fmt.Fprint(pw, "ping")
	buf := make([]byte, 4)
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo %q %v", buf, err)
	}
	pw.Close()
	pw2.Close()
	resp.Body.Close()
	resp2.Body.Close()
	expectIdle(t, l)
	if tot := l.Totals(); tot.Granted != 2 || tot.Refused != 0 {
		t.Errorf("totals %+v, want 2 granted", tot)
	}
}

// flushWriter writes to an HTTP/2 stream and flushes every write, so that
// an echo goes back at once.
type flushWriter struct{ w http.ResponseWriter }

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	http.NewResponseController(f.w).Flush()
	return n, err
}
