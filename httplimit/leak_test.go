package httplimit_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/httplimit"
)

// TestPanicReleasesAndRepanics calls the middleware directly: the panic
// value, http.ErrAbortHandler included, comes out unchanged, after the
// permit was released.
func TestPanicReleasesAndRepanics(t *testing.T) {
	for _, tc := range []struct {
		name   string
		method string
		header http.Header
		value  any
	}{
		{"exchange", http.MethodGet, nil, "boom"},
		{"exchange abort", http.MethodGet, nil, http.ErrAbortHandler},
		{"tunnel", http.MethodGet, http.Header{"Upgrade": {"websocket"}, "Connection": {"Upgrade"}}, "boom"},
		{"connect", http.MethodConnect, nil, http.ErrAbortHandler},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLimiter(t, httplimit.Config{Policy: httplimit.Policy{Permits: 1}})
			var inUse int
			h := l.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				inUse = l.Totals().InUse
				panic(tc.value)
			}))
			r := httptest.NewRequest(tc.method, "/", nil)
			r.RemoteAddr = "192.0.2.7:1234"
			if tc.header != nil {
				r.Header = tc.header
			}
			got := func() (v any) {
				defer func() { v = recover() }()
				h.ServeHTTP(httptest.NewRecorder(), r)
				return nil
			}()
			if got != tc.value {
				t.Errorf("recovered %v, want %v", got, tc.value)
			}
			if inUse != 1 {
				t.Errorf("%d in use inside the handler, want 1", inUse)
			}
			expectIdle(t, l)
		})
	}
}

// TestNoLeakOverTheWire drives failure paths over a real server: a handler
// that panics, one that aborts, a client that resets the connection in the
// middle of a response. Counts return to zero after each.
func TestNoLeakOverTheWire(t *testing.T) {
	l := newLimiter(t, httplimit.Config{Policy: httplimit.Policy{Permits: 2, QueueSize: 2}})
	writing := make(chan struct{}, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("/panic", func(w http.ResponseWriter, r *http.Request) { panic("boom") })
	mux.HandleFunc("/abort", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("partial"))
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		chunk := []byte(strings.Repeat("x", 16<<10))
		for i := 0; i < 100000; i++ {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			if i == 0 {
				writing <- struct{}{}
			}
		}
	})
	ts := startServer(t, l.Wrap(mux))
	c := clientFrom(t, "127.0.0.2")

	for _, path := range []string{"/panic", "/abort"} {
		if _, err := getStatus(t.Context(), c, ts.URL+path); err == nil {
			t.Errorf("%s: no error, want the connection cut", path)
		}
		expectIdle(t, l)
	}

	conn, err := dialerFrom("127.0.0.3").Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
	if _, err := bufio.NewReader(conn).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	<-writing
	conn.(*net.TCPConn).SetLinger(0) // close with a reset
	conn.Close()
	expectIdle(t, l)
	if tot := l.Totals(); tot.Granted != 3 || tot.Reclaimed != 0 {
		t.Errorf("totals %+v, want 3 granted", tot)
	}
}

// TestShutdownReleasesEverything shuts a server down while requests hold
// permits and others wait: a graceful Shutdown cannot finish while they
// run; Close cuts the connections, handlers and waiters end, and every
// count returns to zero.
func TestShutdownReleasesEverything(t *testing.T) {
	l := newLimiter(t, httplimit.Config{Policy: httplimit.Policy{Permits: 2, QueueSize: 8}})
	g := newGate()
	ts := startServer(t, l.Wrap(g))
	var done []<-chan int
	for _, ip := range []string{"127.0.0.2", "127.0.0.3"} {
		c := clientFrom(t, ip)
		done = append(done, holdOne(t, c, ts.URL, g), holdOne(t, c, ts.URL, g))
		for range 3 {
			ch := make(chan int, 1)
			go func() { code, _ := getStatus(t.Context(), c, ts.URL); ch <- code }()
			done = append(done, ch)
		}
	}
	waitFor(t, "6 waiters", func() bool { return l.Totals().Waiting == 6 })
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := ts.Config.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown: %v, want the deadline (requests are running)", err)
	}
	ts.CloseClientConnections()
	for _, ch := range done {
		<-ch
	}
	expectIdle(t, l)
	// A waiter may get a permit freed by a holder whose connection was cut
	// first, before its own is: each waiter was either granted or abandoned.
	if tot := l.Totals(); tot.Granted < 4 || tot.Granted-4+tot.Abandoned != 6 {
		t.Errorf("totals %+v, want 4 granted and each of the 6 waiters granted or abandoned", tot)
	}
}

// TestCloseRefusesWaiters closes the Limiter while a request waits: the
// waiter gets 503, the holder keeps its permit until it ends, and a later
// request is refused with 503.
func TestCloseRefusesWaiters(t *testing.T) {
	l := newLimiter(t, httplimit.Config{Policy: httplimit.Policy{Permits: 1, QueueSize: 1}})
	g := newGate()
	ts := startServer(t, l.Wrap(g))
	c := clientFrom(t, "127.0.0.2")
	held := holdOne(t, c, ts.URL, g)
	waiter := make(chan int, 1)
	go func() { code, _ := getStatus(t.Context(), c, ts.URL); waiter <- code }()
	waitFor(t, "the waiter", func() bool { return l.Totals().Waiting == 1 })
	l.Close()
	if code := <-waiter; code != http.StatusServiceUnavailable {
		t.Errorf("waiter got %d, want 503", code)
	}
	if code, _ := getStatus(t.Context(), clientFrom(t, "127.0.0.3"), ts.URL); code != http.StatusServiceUnavailable {
		t.Errorf("request after Close got %d, want 503", code)
	}
	g.release <- struct{}{}
	<-held
	expectIdle(t, l)
}
