package upstream

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/waitfor"
)

// checkNoLeak fails the test if, once every later cleanup has run, more
// goroutines are left than when it was called. Call it first.
func checkNoLeak(t *testing.T) {
	t.Helper()
	base := runtime.NumGoroutine()
	t.Cleanup(func() {
		if !waitfor.Until(5*time.Second, func() bool { return runtime.NumGoroutine() <= base }) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines left, %d before:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
	})
}

func newTransport(t *testing.T, cfg Config) *Transport {
	t.Helper()
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// countingServer is an httptest server that counts the connections it
// accepted.
type countingServer struct {
	*httptest.Server
	conns atomic.Int64
}

func newCountingServer(t *testing.T, h http.Handler) *countingServer {
	t.Helper()
	s := &countingServer{Server: httptest.NewUnstartedServer(h)}
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// rawServer accepts TCP connections on loopback and hands each to serve on
// its own goroutine, so that a test can misbehave at the byte level. The
// cleanup closes the listener and every connection and waits for serve to
// return.
type rawServer struct {
	ln    net.Listener
	conns atomic.Int64
	mu    sync.Mutex
	open  []net.Conn
	wg    sync.WaitGroup
}

func newRawServer(t *testing.T, serve func(c net.Conn, br *bufio.Reader)) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			s.mu.Lock()
			s.open = append(s.open, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				serve(c, bufio.NewReader(c))
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for _, c := range s.open {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *rawServer) url() string { return "http://" + s.ln.Addr().String() }

// serveFixed answers every request on a connection with resp, until the
// client closes it or closeAfter requests were answered (0: no limit).
func serveFixed(resp string, closeAfter int) func(net.Conn, *bufio.Reader) {
	return func(c net.Conn, br *bufio.Reader) {
		for n := 1; ; n++ {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			if _, err := io.WriteString(c, resp); err != nil {
				return
			}
			if closeAfter > 0 && n >= closeAfter {
				return
			}
		}
	}
}

func get(t *testing.T, rt http.RoundTripper, url string) (*http.Response, error) {
	t.Helper()
	return doReq(t, rt, http.MethodGet, url, nil)
}

func doReq(t *testing.T, rt http.RoundTripper, method, url string, h http.Header) (*http.Response, error) {
	t.Helper()
	// Every exchange of a test has a time limit, even one the code under
	// test would leave hanging.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return doReqCtx(t, ctx, rt, method, url, h)
}

func doReqCtx(t *testing.T, ctx context.Context, rt http.RoundTripper, method, url string, h http.Header) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	return rt.RoundTrip(req)
}

// readAll returns the whole body of resp and closes it.
func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return string(b)
}
