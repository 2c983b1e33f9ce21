package connlimit

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/testcert"
)

// testCert is a self-signed certificate for 127.0.0.1, made once.
var testCert = sync.OnceValue(func() tls.Certificate {
	c, err := testcert.New()
	if err != nil {
		panic(err)
	}
	return c.TLS
})

// serverTLS returns a server config counting the handshakes that reach it.
func serverTLS(handshakes *atomic.Int64) *tls.Config {
	cfg := &tls.Config{Certificates: []tls.Certificate{testCert()}}
	cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		handshakes.Add(1)
		return nil, nil
	}
	return cfg
}

func tlsDialFrom(t testing.TB, src string, addr net.Addr) (*tls.Conn, error) {
	t.Helper()
	raw := dialFrom(t, src, addr)
	c := tls.Client(raw, &tls.Config{InsecureSkipVerify: true})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	return c, c.HandshakeContext(ctx)
}

// Under tls.NewListener a refused connection is closed before the TLS
// handshake: the server never sees its ClientHello.
func TestTLSRefusedBeforeHandshake(t *testing.T) {
	var handshakes atomic.Int64
	l := newTestListener(t, nil, Config{Policy: Policy{Permits: 2}})
	tl := tls.NewListener(l, serverTLS(&handshakes))
	go func() {
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if c.(*tls.Conn).Handshake() == nil {
					io.Copy(io.Discard, c)
				}
			}()
		}
	}()
	for range 2 {
		if _, err := tlsDialFrom(t, "127.0.0.2", l.Addr()); err != nil {
			t.Fatalf("handshake under the cap: %v", err)
		}
	}
	if _, err := tlsDialFrom(t, "127.0.0.2", l.Addr()); err == nil {
		t.Fatal("handshake over the cap succeeded")
	}
	if got := handshakes.Load(); got != 2 {
		t.Fatalf("server saw %d ClientHellos, want 2", got)
	}
	if s := l.Stats(); s.Refused.ClientCap != 1 {
		t.Fatalf("refusals = %+v, want 1", s.Refused)
	}
}

func httpClientFrom(src string) *http.Client {
	d := &net.Dialer{Timeout: waitTimeout, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	return &http.Client{Timeout: waitTimeout, Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 16}}
}

func startHTTP(t testing.TB, l net.Listener, srv *http.Server) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(l)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
}

func keyInUse(l *Listener, key string) int { return l.levels[0].lim.InUse(mustKey(key)) }

// Idle keep-alive connections count; closing them frees their slots; a
// hijacked connection holds its slot until the hijacker closes it.
func TestHTTPKeepAliveAndHijack(t *testing.T) {
	l := newTestListener(t, nil, Config{Policy: Policy{Permits: 3}})
	arrived := make(chan struct{}, 3)
	release := make(chan struct{})
	hijacked := make(chan net.Conn, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("/wait", func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-release:
		case <-time.After(waitTimeout):
		}
	})
	mux.HandleFunc("/hijack", func(w http.ResponseWriter, r *http.Request) {
		c, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Errorf("Hijack: %v", err)
			return
		}
		hijacked <- c
	})
	startHTTP(t, l, &http.Server{Handler: mux})
	client := httpClientFrom("127.0.0.2")
	url := "http://" + l.Addr().String()

	// Three requests at once make three connections, then idle ones.
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			resp, err := client.Get(url + "/wait")
			if err != nil {
				t.Errorf("GET: %v", err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	for range 3 {
		select {
		case <-arrived:
		case <-time.After(waitTimeout):
			t.Fatal("requests did not arrive")
		}
	}
	close(release)
	wg.Wait()
	if got := keyInUse(l, "127.0.0.2"); got != 3 {
		t.Fatalf("idle keep-alive connections hold %d slots, want 3", got)
	}
	mustBeRefused(t, dialFrom(t, "127.0.0.2", l.Addr()))
	client.CloseIdleConnections()
	waitFor(t, "idle connections' slots", func() bool { return keyInUse(l, "127.0.0.2") == 0 })

	// Hijack.
	raw := dialFrom(t, "127.0.0.2", l.Addr())
	io.WriteString(raw, "GET /hijack HTTP/1.1\r\nHost: x\r\n\r\n")
	var hc net.Conn
	select {
	case hc = <-hijacked:
	case <-time.After(waitTimeout):
		t.Fatal("no hijack")
	}
	if _, ok := KeyOf(hc); !ok {
		t.Fatalf("hijacked conn %T is not ours", hc)
	}
	time.Sleep(20 * time.Millisecond) // let the server finish with the handler; the slot must stay
	if got := keyInUse(l, "127.0.0.2"); got != 1 {
		t.Fatalf("hijacked connection holds %d slots, want 1", got)
	}
	hc.Close()
	if got := keyInUse(l, "127.0.0.2"); got != 0 {
		t.Fatalf("after the hijacker's Close the key holds %d slots, want 0", got)
	}
}

// http.Server's idle timeout closes keep-alive connections, and with them
// go their slots.
func TestHTTPIdleTimeoutReleases(t *testing.T) {
	l := newTestListener(t, nil, Config{Policy: Policy{Permits: 3}})
	startHTTP(t, l, &http.Server{IdleTimeout: 50 * time.Millisecond, Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})})
	client := httpClientFrom("127.0.0.2")
	resp, err := client.Get("http://" + l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	waitFor(t, "the idle timeout to free the slot", func() bool { return keyInUse(l, "127.0.0.2") == 0 && l.Stats().Open == 0 })
}

// No slot leaks, however connections are abandoned: client reset,
// half-close, a close inside the TLS handshake, a panicking handler, a PROXY
// header never sent, and server shutdown with idle and pending
// connections.
func TestNoLeakedSlot(t *testing.T) {
	var handshakes atomic.Int64
	l := newTestListener(t, nil, Config{
		Policy: Policy{Permits: 8}, MaxConns: 64, Levels: []Level{{IPv4Bits: 24, Max: 40}},
		Trusted: mustProxySet("127.0.0.5"), ProxyProtocol: true,
	})
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	mux.HandleFunc("/panic", func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) })
	srv := &http.Server{Handler: mux, TLSConfig: serverTLS(&handshakes), ErrorLog: log.New(io.Discard, "", 0)}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(tls.NewListener(l, srv.TLSConfig)) }()

	request := func(c *tls.Conn, path string) error {
		c.SetDeadline(time.Now().Add(waitTimeout))
		if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	mustRequest := func(src, path string) *tls.Conn {
		c, err := tlsDialFrom(t, src, l.Addr())
		if err == nil {
			err = request(c, path)
		}
		if err != nil {
			t.Fatalf("request %s from %s: %v", path, src, err)
		}
		return c
	}
	proxied := func(client string) *tls.Conn {
		raw := dialFrom(t, "127.0.0.5", l.Addr())
		raw.Write(proxyHeader(t, 2, client+":4000", "127.0.0.1:443"))
		c := tls.Client(raw, &tls.Config{InsecureSkipVerify: true})
		if err := c.Handshake(); err != nil {
			t.Fatalf("handshake through the proxy: %v", err)
		}
		if err := request(c, "/"); err != nil {
			t.Fatalf("request through the proxy: %v", err)
		}
		return c
	}

	t.Run("client reset", func(t *testing.T) {
		c := mustRequest("127.0.0.2", "/")
		c.NetConn().(*net.TCPConn).SetLinger(0)
		c.NetConn().Close()
	})
	t.Run("half-close", func(t *testing.T) {
		c := mustRequest("127.0.0.2", "/")
		c.CloseWrite() // close_notify, then the TCP write side
		c.NetConn().(*net.TCPConn).CloseWrite()
	})
	t.Run("close inside the TLS handshake", func(t *testing.T) {
		raw := dialFrom(t, "127.0.0.3", l.Addr())
		raw.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00}) // a ClientHello cut short
		raw.Close()
	})
	t.Run("panicking handler", func(t *testing.T) {
		c, err := tlsDialFrom(t, "127.0.0.3", l.Addr())
		if err != nil {
			t.Fatal(err)
		}
		if err := request(c, "/panic"); err == nil {
			t.Fatal("the panicking handler answered")
		}
	})
	t.Run("proxied then reset", func(t *testing.T) {
		c := proxied("192.0.2.7")
		c.NetConn().(*net.TCPConn).SetLinger(0)
		c.NetConn().Close()
	})
	// Left for shutdown: idle keep-alive connections, direct and proxied,
	// and a trusted peer whose header never comes.
	mustRequest("127.0.0.4", "/")
	mustRequest("127.0.0.4", "/")
	proxied("192.0.2.8")
	dialFrom(t, "127.0.0.5", l.Addr())
	waitFor(t, "the silent peer to be pending", func() bool { return l.Stats().Pending == 1 })
	if s := l.Stats(); s.Open < 3 {
		t.Fatalf("before shutdown only %d connections are open", s.Open)
	}

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	<-served
	checkDrained(t, l)
	if s := l.Stats(); s.Refused.Shutdown != 1 || s.Refused.Total() != 1 {
		t.Fatalf("refusals = %+v; want just the pending header, as shutdown", s.Refused)
	}
}
