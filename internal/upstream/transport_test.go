package upstream

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestNewRejectsInvalidConfig(t *testing.T) {
	_, err := New(Config{MaxResponseHeaderBytes: -1})
	if err == nil || !strings.Contains(err.Error(), "MaxResponseHeaderBytes") {
		t.Fatalf("New with negative MaxResponseHeaderBytes: err = %v, want one naming the field", err)
	}
	_, err = New(Config{MaxIdleConns: -1})
	if err == nil || !strings.Contains(err.Error(), "MaxIdleConns") {
		t.Fatalf("New with negative MaxIdleConns: err = %v, want one naming the field", err)
	}
}

func TestNewDoesNotMutateConfig(t *testing.T) {
	cfg := Config{}
	newTransport(t, cfg)
	if cfg.DialContext != nil || cfg.Fallback != nil || cfg.MaxIdleConnsPerHost != 0 {
		t.Fatal("New changed the caller's Config")
	}
}

func TestReusesOneConnection(t *testing.T) {
	srv := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s", r.URL.Path)
	}))
	tr := newTransport(t, Config{})
	for i := range 10 {
		resp, err := get(t, tr, fmt.Sprintf("%s/%d", srv.URL, i))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := readAll(t, resp), fmt.Sprintf("hello /%d", i); got != want {
			t.Fatalf("body %q, want %q", got, want)
		}
	}
	if n := srv.conns.Load(); n != 1 {
		t.Fatalf("server saw %d connections, want 1", n)
	}
	if s := tr.Stats(); s.Dials != 1 || s.Idle != 1 {
		t.Fatalf("stats %+v, want 1 dial and 1 idle", s)
	}
}

func TestSendsHeadAsGiven(t *testing.T) {
	got := make(chan *http.Request, 1)
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		got <- req
		io.WriteString(c, "HTTP/1.1 204 No Content\r\n\r\n")
	})
	tr := newTransport(t, Config{})
	req, _ := http.NewRequest(http.MethodGet, srv.url()+"/a%20b?q=1", nil)
	req.Host = "example.test"
	req.Header.Set("X-One", "1")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	r := <-got
	if r.Host != "example.test" || r.RequestURI != "/a%20b?q=1" || r.Header.Get("X-One") != "1" {
		t.Fatalf("server got host %q uri %q header %v", r.Host, r.RequestURI, r.Header)
	}
	for _, h := range []string{"User-Agent", "Accept-Encoding", "Content-Length"} {
		if _, ok := r.Header[h]; ok {
			t.Errorf("request carries %s, which the caller did not set", h)
		}
	}
}

func TestResponseFraming(t *testing.T) {
	cases := []struct {
		name     string
		method   string
		response string
		body     string
		reused   bool // a second request goes over the same connection
	}{
		{"content-length", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", "hello", true},
		{"chunked", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n", "hello", true},
		{"close-delimited", "GET", "HTTP/1.1 200 OK\r\n\r\nhello", "hello", false},
		{"connection-close", "GET", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello", "hello", false},
		{"http/1.0", "GET", "HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello", "hello", false},
		{"head", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", "", true},
		{"204", "GET", "HTTP/1.1 204 No Content\r\n\r\n", "", true},
		{"304", "GET", "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n", "", true},
		{"empty", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "", true},
		{"100-continue-skipped", "GET", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", "ok", true},
	}
	for _, via := range senders {
		for _, tc := range cases {
			t.Run(via.name+"/"+tc.name, func(t *testing.T) {
				closeAfter := 0
				if !tc.reused {
					closeAfter = 1 // the close-delimited body needs the close
				}
				srv := newRawServer(t, serveFixed(tc.response, closeAfter))
				tr := newTransport(t, Config{})
				for range 2 {
					resp, err := sendVia(t, via, tr, tc.method, srv.url()+"/", nil, SendOptions{})
					if err != nil {
						t.Fatal(err)
					}
					// Without a body to read, the connection is back at once.
					if idle := tr.Stats().Idle; tc.body == "" && tc.reused && idle != 1 {
						t.Fatalf("%d idle connections before the empty body is read, want 1", idle)
					}
					if got := readAll(t, resp); got != tc.body {
						t.Fatalf("body %q, want %q", got, tc.body)
					}
				}
				wantConns := int64(2)
				if tc.reused {
					wantConns = 1
				}
				if n := srv.conns.Load(); n != wantConns {
					t.Fatalf("server saw %d connections, want %d", n, wantConns)
				}
			})
		}
	}
}

func TestResponseHeadTooLarge(t *testing.T) {
	srvClosed := make(chan struct{}, 1)
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Big: "+strings.Repeat("a", 4096)+"\r\nContent-Length: 0\r\n\r\n")
		io.Copy(io.Discard, br)
		srvClosed <- struct{}{}
	})
	tr := newTransport(t, Config{MaxResponseHeaderBytes: 1024})
	_, err := get(t, tr, srv.url())
	if !errors.Is(err, ErrHeadTooLarge) {
		t.Fatalf("err = %v, want ErrHeadTooLarge", err)
	}
	waitChan(t, srvClosed)
	if s := tr.Stats(); s.Idle != 0 {
		t.Fatalf("%d idle connections after a failed exchange", s.Idle)
	}
}

func waitChan(t *testing.T, ch chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("no signal within 5s")
	}
}

func TestUnexpectedSwitchingProtocols(t *testing.T) {
	srv := newRawServer(t, serveFixed("HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n", 0))
	tr := newTransport(t, Config{})
	if _, err := get(t, tr, srv.url()); !errors.Is(err, ErrUnexpectedSwitch) {
		t.Fatalf("err = %v, want ErrUnexpectedSwitch", err)
	}
}

func TestRejectsInvalidRequest(t *testing.T) {
	cases := []struct {
		name string
		edit func(*http.Request)
	}{
		{"header name with space", func(r *http.Request) { r.Header["X Bad"] = []string{"1"} }},
		{"header name with colon", func(r *http.Request) { r.Header["X:Bad"] = []string{"1"} }},
		{"header value with CRLF", func(r *http.Request) { r.Header.Set("X-Inject", "a\r\nEvil: 1") }},
		{"header value with NUL", func(r *http.Request) { r.Header.Set("X-Nul", "a\x00b") }},
		{"host with space", func(r *http.Request) { r.Host = "a b" }},
		{"method with space", func(r *http.Request) { r.Method = "G T" }},
		{"target with CRLF", func(r *http.Request) { r.URL.RawQuery = "a\r\nb" }},
		{"target not origin-form", func(r *http.Request) { r.URL.Path = "relative" }},
		{"no host in URL", func(r *http.Request) { r.URL.Host = "" }},
	}
	srv := newCountingServer(t, http.NotFoundHandler())
	tr := newTransport(t, Config{})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
			tc.edit(req)
			_, err := tr.RoundTrip(req)
			if !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("err = %v, want ErrInvalidRequest", err)
			}
		})
	}
	if n := tr.Stats().Dials; n != 0 {
		t.Fatalf("%d dials for invalid requests, want 0", n)
	}
}

func TestRefusedDial(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	tr := newTransport(t, Config{})
	_, err = get(t, tr, "http://"+addr+"/")
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("err = %v, want one matching ECONNREFUSED", err)
	}
}

func TestDialTimeoutIsATimeout(t *testing.T) {
	tr := newTransport(t, Config{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		d := net.Dialer{Timeout: time.Nanosecond}
		return d.DialContext(ctx, network, addr)
	}})
	_, err := get(t, tr, "http://127.0.0.1:9/")
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want a net.Error timeout matching DeadlineExceeded", err)
	}
}
