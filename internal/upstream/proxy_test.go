package upstream

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// recorder is a fallback RoundTripper that records what it is given.
type recorder struct {
	mu   sync.Mutex
	reqs []*http.Request
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
	if req.Body != nil {
		req.Body.Close()
	}
	return &http.Response{StatusCode: 299, Body: http.NoBody, Request: req}, nil
}

func TestFallbackGetsWhatTheFastPathDoesNot(t *testing.T) {
	srv := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	cases := []struct {
		name     string
		req      func() *http.Request
		fallback bool
	}{
		{"plain GET", func() *http.Request { return mustReq(t, "GET", srv.URL, nil) }, false},
		{"bodyless POST", func() *http.Request { return mustReq(t, "POST", srv.URL, nil) }, false},
		{"https", func() *http.Request { return mustReq(t, "GET", "https://127.0.0.1:1/", nil) }, true},
		{"body", func() *http.Request { return mustReq(t, "POST", srv.URL, strings.NewReader("x")) }, true},
		{"unknown length", func() *http.Request {
			r := mustReq(t, "POST", srv.URL, nil)
			r.ContentLength = -1
			return r
		}, true},
		{"chunked", func() *http.Request {
			r := mustReq(t, "POST", srv.URL, nil)
			r.TransferEncoding = []string{"chunked"}
			return r
		}, true},
		{"upgrade", func() *http.Request {
			r := mustReq(t, "GET", srv.URL, nil)
			r.Header.Set("Upgrade", "websocket")
			r.Header.Set("Connection", "Upgrade")
			return r
		}, true},
		{"connection upgrade only", func() *http.Request {
			r := mustReq(t, "GET", srv.URL, nil)
			r.Header.Set("Connection", "keep-alive, upgrade")
			return r
		}, true},
		{"CONNECT", func() *http.Request {
			return &http.Request{Method: "CONNECT", URL: &url.URL{Scheme: "http", Host: "127.0.0.1:1"}, Header: http.Header{}}
		}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			tr := newTransport(t, Config{Fallback: rec})
			req := tc.req()
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			gotFallback := len(rec.reqs) == 1 && rec.reqs[0] == req
			if gotFallback != tc.fallback {
				t.Fatalf("went to the fallback: %v, want %v", gotFallback, tc.fallback)
			}
		})
	}
}

func mustReq(t *testing.T, method, url string, body io.Reader) *http.Request {
	t.Helper()
	r, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestFallbackHeadTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	tr := newTransport(t, Config{Fallback: srv.Client().Transport})
	start := time.Now()
	_, err := get(t, tr.WithHeadTimeout(100*time.Millisecond), srv.URL)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("the fallback timed out after %v", d)
	}
}

// newProxy serves a ReverseProxy to backend through rt on a real loopback
// server.
func newProxy(t *testing.T, backend string, rt http.RoundTripper) *httptest.Server {
	t.Helper()
	target, err := url.Parse(backend)
	if err != nil {
		t.Fatal(err)
	}
	rp := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport: rt,
		ErrorLog:  log.New(io.Discard, "", 0), // abandoned requests are expected
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			http.Error(w, err.Error(), http.StatusBadGateway)
		},
	}
	front := httptest.NewServer(rp)
	t.Cleanup(front.Close)
	return front
}

func TestEarlyHintsThroughReverseProxy(t *testing.T) {
	backend := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Link", "</style.css>; rel=preload; as=style")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "final")
	}))
	tr := newTransport(t, Config{})
	front := newProxy(t, backend.URL, tr)

	var hints []textproto.MIMEHeader
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			if code == http.StatusEarlyHints {
				hints = append(hints, h)
			}
			return nil
		},
	})
	client := front.Client()
	client.Timeout = 10 * time.Second
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, front.URL, nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "final" || resp.StatusCode != 200 {
		t.Fatalf("status %d body %q", resp.StatusCode, got)
	}
	if len(hints) != 1 || !strings.Contains(hints[0].Get("Link"), "style.css") {
		t.Fatalf("client got early hints %v, want one with the Link header", hints)
	}
	if tr.Stats().Dials != 1 {
		t.Fatal("the request did not take the fast path")
	}
}

// TestUpgradeThroughReverseProxy switches a connection to an echo protocol
// through a ReverseProxy, which the default fallback must carry.
func TestUpgradeThroughReverseProxy(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			http.Error(w, "upgrade required", http.StatusUpgradeRequired)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		brw.Flush()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.Copy(c, brw)
	}))
	defer backend.Close()
	tr := newTransport(t, Config{})
	front := newProxy(t, backend.URL, tr)

	c, err := net.DialTimeout("tcp", front.Listener.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d, want 101", resp.StatusCode)
	}
	io.WriteString(c, "ping")
	got := make([]byte, 4)
	if _, err := io.ReadFull(br, got); err != nil || string(got) != "ping" {
		t.Fatalf("echo %q, %v", got, err)
	}
	if tr.Stats().Dials != 0 {
		t.Fatal("the upgrade took the fast path")
	}
}

// TestStressThroughReverseProxy runs many clients through a ReverseProxy
// on the fast path, with some requests abandoned mid-body, checking every
// body and the idle cap.
func TestStressThroughReverseProxy(t *testing.T) {
	checkNoLeak(t)
	backend := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := r.URL.Query().Get("n")
		if r.URL.Path == "/slow" {
			io.WriteString(w, "part:")
			http.NewResponseController(w).Flush()
			time.Sleep(20 * time.Millisecond)
		}
		io.WriteString(w, strings.Repeat("body-"+n+";", 50))
	}))
	const idleCap = 4
	tr := newTransport(t, Config{MaxIdleConnsPerHost: idleCap})
	front := newProxy(t, backend.URL, tr)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}}
	defer client.CloseIdleConnections()

	const workers, each = 24, 40
	var failures atomic.Int64
	stop := make(chan struct{})
	capDone := make(chan struct{})
	go func() {
		defer close(capDone)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			if s := tr.Stats(); s.MaxIdlePerHost > idleCap {
				t.Errorf("%d idle connections, cap %d", s.MaxIdlePerHost, idleCap)
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				n := fmt.Sprintf("%d-%d", w, i)
				if err := stressOne(client, front.URL, n, i%10 == 9); err != nil {
					failures.Add(1)
					t.Errorf("request %s: %v", n, err)
					return
				}
			}
		}()
	}
	waitGroup(t, &wg)
	close(stop)
	<-capDone
	if failures.Load() != 0 {
		return
	}
	s := tr.Stats()
	t.Logf("stats %+v, backend connections %d", s, backend.conns.Load())
	if s.Dials != int64ToUint(backend.conns.Load()) || s.Dials >= workers*each/2 {
		t.Fatalf("stats %+v vs %d backend connections", s, backend.conns.Load())
	}
	client.CloseIdleConnections()
}

func int64ToUint(n int64) uint64 { return uint64(n) }

// stressOne makes one request; an abandoned one cancels after the first
// part of a slow body.
func stressOne(client *http.Client, base, n string, abandon bool) error {
	want := strings.Repeat("body-"+n+";", 50)
	if abandon {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/slow?n="+n, nil)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		part := make([]byte, 5)
		if _, err := io.ReadFull(resp.Body, part); err != nil || string(part) != "part:" {
			return fmt.Errorf("slow body start %q: %v", part, err)
		}
		cancel()
		return nil
	}
	resp, err := client.Get(base + "/?n=" + n)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 || string(b) != want {
		return fmt.Errorf("status %d body %.60q", resp.StatusCode, b)
	}
	return nil
}
