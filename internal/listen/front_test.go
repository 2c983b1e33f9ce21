package listen_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/evloop"
	"github.com/seed-a07d1050/portcullis/internal/listen"
	"github.com/seed-a07d1050/portcullis/internal/logtest"
	"github.com/seed-a07d1050/portcullis/internal/waitfor"
)

// listenerOf returns the effective configuration of the one listener
// text describes (YAML under listeners:).
func listenerOf(t *testing.T, text string) config.Listener {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte("listeners:\n"+text))
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Effective().Listeners[0]
}

// httpListener is an http listener on 127.0.0.1, its server as named.
func httpListener(t *testing.T, name string, server config.HTTP1Server) config.Listener {
	t.Helper()
	lc := listenerOf(t, `
  - name: `+name+`
    protocol: http
    listen: "127.0.0.1:0"
    max_conns_per_client: 2
    routes:
      - name: r
        upstreams: ["http://127.0.0.1:1"]
`)
	lc.HTTP1Server = server
	return lc
}

// bindTCP binds lc with adm and closes the front when the test ends.
func bindTCP(t *testing.T, lc config.Listener, adm listen.Admission) *listen.Front {
	t.Helper()
	raw, err := listen.ListenTCP(lc)
	if err != nil {
		t.Fatal(err)
	}
	f, err := listen.NewTCP(raw, lc, adm)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

// named answers every request with its name.
func named(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, name)
	})
}

// clientFrom returns an HTTP client whose connections come from the
// loopback address ip.
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: d.DialContext}}
}

// get fetches path from the listener at addr and returns the status, the
// body and the Alt-Svc field.
func get(t *testing.T, c *http.Client, addr net.Addr) (int, string, string) {
	t.Helper()
	resp, err := c.Get("http://" + addr.String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body), resp.Header.Get("Alt-Svc")
}

// serve starts f serving with s.
func serve(t *testing.T, f *listen.Front, s listen.Serving) {
	t.Helper()
	if err := f.Serve(s); err != nil {
		t.Fatal(err)
	}
}

func shutdown(t *testing.T, f *listen.Front) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := f.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

// Every HTTP/1.1 server a listener can be given serves the handler of
// Serving (the byte path declining, with no table), names itself, and
// gives every connection slot back when it shuts down.
func TestFrontServesEachHTTP1Server(t *testing.T) {
	loops := config.HTTP1ServerLean
	if evloop.Supported() {
		loops = config.HTTP1ServerEventLoop
	}
	for _, tc := range []struct {
		server, want config.HTTP1Server
	}{
		{config.HTTP1ServerEventLoop, loops},
		{config.HTTP1ServerNetHTTP, config.HTTP1ServerNetHTTP},
		{config.HTTP1ServerLean, config.HTTP1ServerLean},
		{config.HTTP1ServerFast, config.HTTP1ServerFast},
	} {
		t.Run(strings.ReplaceAll(string(tc.server), "/", "_"), func(t *testing.T) {
			f := bindTCP(t, httpListener(t, "web", tc.server), listen.Admission{})
			if f.Serving() {
				t.Fatal("a bound front serves before Serve")
			}
			serve(t, f, listen.Serving{Handler: named("web")})
			if !f.Serving() {
				t.Fatal("not serving after Serve")
			}
			if got := f.HTTP1Server(); got != tc.want {
				t.Errorf("HTTP1Server() = %q, want %q", got, tc.want)
			}
			if (f.Loops() != nil) != (tc.want == config.HTTP1ServerEventLoop) {
				t.Errorf("Loops() = %v with %s", f.Loops(), tc.want)
			}
			c := clientFrom("127.0.0.2")
			for range 3 { // keep-alive: one connection, three requests
				if code, body, alt := get(t, c, f.Addr()); code != 200 || body != "web" || alt != "" {
					t.Fatalf("GET = %d %q Alt-Svc %q, want 200 \"web\" and none", code, body, alt)
				}
			}
			c.CloseIdleConnections()
			shutdown(t, f)
			if st := f.Conns().Stats(); st.Open != 0 || st.Accepted != 1 {
				t.Fatalf("after shutdown: %d open, %d accepted; want 0 and 1", st.Open, st.Accepted)
			}
		})
	}
}

// The admission at accept: Admission.Filter refuses before the caps, the
// per-client cap (keyed by Admission.Keyer) refuses a client's third
// connection, and the slots come back when the connections close.
func TestFrontAdmission(t *testing.T) {
	refuse := errors.New("test: denied")
	denied := netip.MustParseAddr("127.0.0.3")
	keyer, err := clientkey.NewKeyer(32, 128)
	if err != nil {
		t.Fatal(err)
	}
	f := bindTCP(t, httpListener(t, "web", config.HTTP1ServerNetHTTP), listen.Admission{
		Keyer: keyer,
		Filter: func(a netip.Addr) error {
			if a == denied {
				return refuse
			}
			return nil
		},
		Log: slog.New(slog.DiscardHandler),
	})
	serve(t, f, listen.Serving{Handler: named("web")})

	var held []net.Conn
	for range 2 {
		c := dialFrom(t, "127.0.0.2", f.Addr())
		if !answers(c) {
			t.Fatal("a connection under the cap was not served")
		}
		held = append(held, c)
	}
	if answers(dialFrom(t, "127.0.0.2", f.Addr())) {
		t.Fatal("a third connection of a client capped at 2 was served")
	}
	if answers(dialFrom(t, "127.0.0.3", f.Addr())) {
		t.Fatal("a connection from a client the filter refuses was served")
	}
	other := dialFrom(t, "127.0.0.4", f.Addr())
	if !answers(other) {
		t.Fatal("another client was not served")
	}
	held = append(held, other)
	st := f.Conns().Stats()
	if st.Refused.ClientCap != 1 || st.Refused.Filtered != 1 {
		t.Fatalf("refused: %d at the cap, %d filtered; want 1 and 1", st.Refused.ClientCap, st.Refused.Filtered)
	}
	for _, c := range held {
		_ = c.Close()
	}
	waitfor.Cond(t, "every connection slot back", func() bool { return f.Conns().Stats().Open == 0 })
	shutdown(t, f)
}

// dialFrom opens a connection from the loopback address ip to addr; the
// test closes it when it ends.
func dialFrom(t *testing.T, ip string, addr net.Addr) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	c, err := d.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// answers reports whether c is served a request: a refused connection is
// closed before any answer.
func answers(c net.Conn) bool {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return false
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return err == nil && resp.StatusCode == 200
}

// A tcp listener copies each admitted connection to its upstream and back,
// logs an access line when it ends, and drains on shutdown.
func TestFrontTCPProxy(t *testing.T) {
	up := echoUpstream(t)
	lc := listenerOf(t, `
  - name: db
    protocol: tcp
    listen: "127.0.0.1:0"
    upstream: "`+up+`"
`)
	var out logtest.Buffer
	f := bindTCP(t, lc, listen.Admission{Log: slog.New(slog.NewTextHandler(&out, nil))})
	serve(t, f, listen.Serving{AccessLog: true})
	if f.HTTP1Server() != "" || f.Loops() != nil {
		t.Fatalf("a tcp listener has an HTTP server: %q", f.HTTP1Server())
	}
	c := dialFrom(t, "127.0.0.2", f.Addr())
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "ping"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo: %q, %v", buf, err)
	}
	_ = c.Close()
	waitfor.Cond(t, "the connection's slot back", func() bool { return f.Conns().Stats().Open == 0 })
	waitfor.Cond(t, "the access line", func() bool {
		for l := range strings.Lines(out.String()) {
			if strings.Contains(l, "msg=access listener=db client=127.0.0.2:") && strings.Contains(l, " bytes_in=4 bytes_out=4 ") {
				return true
			}
		}
		return false
	})
	shutdown(t, f)
}

// echoUpstream returns the address of a TCP server that echoes every
// connection.
func echoUpstream(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

// A front built on a shared socket takes it over from the running one
// without refusing a connection, and counts its connections (Adopt).
func TestShareTakesOverSocket(t *testing.T) {
	lc := httpListener(t, "web", config.HTTP1ServerNetHTTP)
	old := bindTCP(t, lc, listen.Admission{})
	serve(t, old, listen.Serving{Handler: named("old")})
	c := clientFrom("127.0.0.2")
	if _, body, _ := get(t, c, old.Addr()); body != "old" {
		t.Fatalf("old front answered %q", body)
	}
	next := lc
	next.Listen = old.Addr().String()
	next.MaxConnsPerClient = 5
	if old.SameSocket(next) {
		t.Fatal("SameSocket with another cap reports true")
	}
	if same := lc; !func() bool { same.Listen = old.Addr().String(); return old.SameSocket(same) }() {
		t.Fatal("SameSocket with the bound port for port 0 reports false")
	}
	raw, err := listen.Share(old, "web")
	if err != nil {
		t.Fatal(err)
	}
	nf, err := listen.NewTCP(raw, next, listen.Admission{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nf.Close)
	old.StopAccepting()
	nf.Conns().Adopt(old.Conns())
	serve(t, nf, listen.Serving{Handler: named("new")})
	nf.DetachSocketFilter() // none installed: a no-op
	fresh := clientFrom("127.0.0.2")
	if _, body, _ := get(t, fresh, nf.Addr()); body != "new" {
		t.Fatalf("new front answered %q", body)
	}
	if got := nf.Conns().Stats().Open; got != 2 {
		t.Fatalf("new front counts %d open connections, want 2 (one adopted)", got)
	}
	c.CloseIdleConnections()
	fresh.CloseIdleConnections()
	shutdown(t, old)
	shutdown(t, nf)
	if st := nf.Conns().Stats(); st.Open != 0 {
		t.Fatalf("%d connections still counted after both shut down", st.Open)
	}
}

// Binding fails with an error that says which listener and what, and
// leaves nothing open.
func TestBindErrors(t *testing.T) {
	lc := httpListener(t, "web", config.HTTP1ServerNetHTTP)
	f := bindTCP(t, lc, listen.Admission{})
	taken := lc
	taken.Listen = f.Addr().String()
	_, err := listen.ListenTCP(taken)
	if !errors.Is(err, syscall.EADDRINUSE) || !strings.HasPrefix(err.Error(), "listen: listener web: ") {
		t.Fatalf("bind to a taken port: %v", err)
	}
	bad := lc
	bad.MaxConnsPerClient = -7
	raw, err := listen.ListenTCP(bad)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := listen.NewTCP(raw, bad, listen.Admission{}); err == nil || !strings.HasPrefix(err.Error(), "listen: listener web: connection caps: ") {
		t.Fatalf("NewTCP with a cap of -7: %v", err)
	}
	if _, err := raw.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("the socket of a failed NewTCP: Accept = %v, want net.ErrClosed", err)
	}
	if _, err := listen.BindH3(lc, listen.Admission{}); err == nil || err.Error() != "listen: listener web: BindH3 binds http3 listeners, not http" {
		t.Fatalf("BindH3 of an http listener: %v", err)
	}
	h3 := lc
	h3.Protocol = config.ProtocolHTTP3
	raw, err = listen.ListenTCP(lc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := listen.NewTCP(raw, h3, listen.Admission{}); err == nil || !strings.Contains(err.Error(), "bound with BindH3") {
		t.Fatalf("NewTCP of an http3 listener: %v", err)
	}
	if _, err := raw.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("the socket of a refused NewTCP: Accept = %v, want net.ErrClosed", err)
	}
	h3.TLS = config.TLS{CertFile: t.TempDir() + "/none.pem", KeyFile: t.TempDir() + "/none-key.pem"}
	if _, err := listen.BindH3(h3, listen.Admission{}); err == nil || !strings.HasPrefix(err.Error(), "listen: listener web: load certificate: ") {
		t.Fatalf("BindH3 without its certificate: %v", err)
	}
}

// Serve refuses, starting nothing, an HTTP listener without a handler
// and a listener that serves already.
func TestServeErrors(t *testing.T) {
	f := bindTCP(t, httpListener(t, "web", config.HTTP1ServerNetHTTP), listen.Admission{})
	if err := f.Serve(listen.Serving{}); err == nil || err.Error() != "listen: listener web: serve: no handler for an http listener" {
		t.Fatalf("Serve without a handler: %v", err)
	}
	if f.Serving() {
		t.Fatal("serving after a failed Serve")
	}
	serve(t, f, listen.Serving{Handler: named("web")})
	if err := f.Serve(listen.Serving{Handler: named("again")}); err == nil || err.Error() != "listen: listener web: serve: already serving" {
		t.Fatalf("Serve twice: %v", err)
	}
	c := clientFrom("127.0.0.2")
	if _, body, _ := get(t, c, f.Addr()); body != "web" {
		t.Fatalf("after a second Serve the listener answers %q, want the first handler's", body)
	}
	c.CloseIdleConnections()
	shutdown(t, f)
}

func TestSameBoundAddr(t *testing.T) {
	tcp := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}
	any := &net.TCPAddr{IP: net.IPv4zero, Port: 8080}
	udp := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8443}
	for _, tc := range []struct {
		name   string
		a      net.Addr
		listen string
		want   bool
	}{
		{"same", tcp, "127.0.0.1:8080", true},
		{"other port", tcp, "127.0.0.1:8081", false},
		{"other ip", tcp, "127.0.0.2:8080", false},
		{"port 0", tcp, "127.0.0.1:0", false},
		{"unspecified", any, ":8080", true},
		{"udp", udp, "127.0.0.1:8443", true},
		{"bad", tcp, "nonsense", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := listen.SameBoundAddr(tc.a, tc.listen); got != tc.want {
				t.Fatalf("SameBoundAddr(%v, %q) = %v, want %v", tc.a, tc.listen, got, tc.want)
			}
		})
	}
}
