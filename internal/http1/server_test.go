package http1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/logtest"
	"github.com/seed-a07d1050/portcullis/internal/waitfor"
)

func TestPipelinedRequestsAnsweredInOrder(t *testing.T) {
	srv := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.URL.Path)
	})}
	c := dial(t, serve(t, srv))
	br := bufio.NewReader(c)
	if _, err := io.WriteString(c, getPath("/1")+getPath("/2")+getPath("/3")); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"/1", "/2", "/3"} {
		resp, body := readResponse(t, br, "GET")
		if resp.StatusCode != 200 || body != want {
			t.Fatalf("got %d %q, want 200 %q", resp.StatusCode, body, want)
		}
	}
}

// TestClientGoneCancelsContext checks the guarantee the daemon relies on:
// a handler waiting on its request's context sees it cancelled when the
// client closes, resets or half-closes the connection, both with the
// kernel watch (a TCP socket) and the background read (no socket visible).
func TestClientGoneCancelsContext(t *testing.T) {
	for _, mode := range []string{"kernel", "background"} {
		for _, how := range []string{"close", "reset", "half-close"} {
			t.Run(mode+"/"+how, func(t *testing.T) {
				waitUnwatched(t) // the connections of earlier tests are forgotten
				started := make(chan struct{}, 1)
				cancelled := make(chan error, 1)
				srv := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					started <- struct{}{}
					select {
					case <-r.Context().Done():
						cancelled <- r.Context().Err()
					case <-time.After(10 * time.Second):
						cancelled <- errors.New("not cancelled within 10 s")
					}
				})}
				var addr string
				if mode == "kernel" {
					addr = serve(t, srv)
				} else {
					addr = servePlain(t, srv)
				}
				c := dial(t, addr)
				if _, err := io.WriteString(c, get); err != nil {
					t.Fatal(err)
				}
				<-started
				if n := kernelWatched(); mode == "kernel" && n == 0 || mode == "background" && n > 0 {
					t.Fatalf("%d connections in the kernel watch during a %s-mode request", n, mode)
				}
				leave(c, how)
				if err := <-cancelled; !errors.Is(err, context.Canceled) {
					t.Fatalf("handler's context: %v", err)
				}
			})
		}
	}
}

// waitUnwatched waits until the kernel watch holds no connection: every
// connection that ended was forgotten.
func waitUnwatched(t *testing.T) {
	t.Helper()
	if !waitfor.Until(5*time.Second, func() bool { return kernelWatched() == 0 }) {
		t.Fatalf("%d ended connections still in the kernel watch", kernelWatched())
	}
}

// TestPipelinedRequestDoesNotCancel: the next request arriving while a
// handler waits is not a client going away.
func TestPipelinedRequestDoesNotCancel(t *testing.T) {
	for _, mode := range []string{"kernel", "background"} {
		t.Run(mode, func(t *testing.T) {
			release := make(chan struct{})
			var served atomic.Int32
			srv := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if served.Add(1) == 1 {
					select {
					case <-r.Context().Done():
						http.Error(w, "cancelled", 500)
						return
					case <-release:
					}
				}
				_, _ = io.WriteString(w, r.URL.Path)
			})}
			addr := serve(t, srv)
			if mode == "background" {
				addr = servePlain(t, srv)
			}
			c := dial(t, addr)
			br := bufio.NewReader(c)
			_, _ = io.WriteString(c, getPath("/1"))
			time.Sleep(50 * time.Millisecond) // the handler waits on its context
			_, _ = io.WriteString(c, getPath("/2"))
			time.Sleep(50 * time.Millisecond)
			close(release)
			for _, want := range []string{"/1", "/2"} {
				resp, body := readResponse(t, br, "GET")
				if resp.StatusCode != 200 || body != want {
					t.Fatalf("got %d %q, want 200 %q", resp.StatusCode, body, want)
				}
			}
		})
	}
}

func TestRequestContext(t *testing.T) {
	type key struct{}
	base, cancelBase := context.WithCancel(context.WithValue(context.Background(), key{}, "base"))
	defer cancelBase()
	var kept context.Context
	got := make(chan string, 1)
	block := make(chan struct{})
	srv := &Server{
		BaseContext: func(net.Listener) context.Context { return base },
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := r.Context()
			kept = ctx
			var errs []string
			if ctx.Err() != nil || context.Cause(ctx) != nil {
				errs = append(errs, "cancelled at start")
			}
			if ctx.Value(key{}) != "base" {
				errs = append(errs, "base value missing")
			}
			if la, ok := ctx.Value(http.LocalAddrContextKey).(net.Addr); !ok || la.String() == "" {
				errs = append(errs, "no local address")
			}
			child, cancel := context.WithCancel(ctx)
			defer cancel()
			fired := make(chan struct{})
			stop := context.AfterFunc(ctx, func() { close(fired) })
			defer stop()
			if r.URL.Path == "/base" {
				close(block)
				select {
				case <-child.Done():
				case <-time.After(5 * time.Second):
					errs = append(errs, "base cancellation did not reach a child")
				}
				select {
				case <-fired:
				case <-time.After(5 * time.Second):
					errs = append(errs, "AfterFunc did not run")
				}
				if !errors.Is(context.Cause(ctx), context.Canceled) {
					errs = append(errs, fmt.Sprintf("Cause = %v", context.Cause(ctx)))
				}
			}
			got <- strings.Join(errs, "; ")
		}),
	}
	c := dial(t, serve(t, srv))
	br := bufio.NewReader(c)
	roundTrip(t, c, br, get, "GET")
	if e := <-got; e != "" {
		t.Fatal(e)
	}
	if !errors.Is(kept.Err(), context.Canceled) || !errors.Is(context.Cause(kept), context.Canceled) {
		t.Fatalf("after the handler: Err %v, Cause %v", kept.Err(), context.Cause(kept))
	}
	select {
	case <-kept.Done():
	default:
		t.Fatal("Done not closed after the handler returned")
	}
	go func() { <-block; cancelBase() }()
	roundTrip(t, c, br, getPath("/base"), "GET")
	if e := <-got; e != "" {
		t.Fatal(e)
	}
}

func TestShutdown(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	srv := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	addr := ln.Addr().String()

	idle := dial(t, addr)
	roundTrip(t, idle, bufio.NewReader(idle), get, "GET")
	active := dial(t, addr)
	abr := bufio.NewReader(active)
	_, _ = io.WriteString(active, getPath("/slow"))
	<-entered

	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(context.Background()) }()
	// The idle connection is closed at once; the listener too.
	if _, d := waitClosed(t, idle, 5*time.Second); d > 2*time.Second {
		t.Errorf("idle connection closed after %v", d)
	}
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve returned %v", err)
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with a handler running", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	resp, body := readResponse(t, abr, "GET")
	if body != "ok" || !resp.Close {
		t.Errorf("active request answered %q, close %v; want ok and Connection: close", body, resp.Close)
	}
	select {
	case err := <-shut:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown did not return once the handler finished")
	}
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Error("listener still accepts after Shutdown")
	}
	p1, p2 := net.Pipe()
	defer p2.Close()
	if err := srv.ServeConn(p1); !errors.Is(err, ErrServerClosed) {
		t.Errorf("ServeConn after Shutdown: %v", err)
	}
}

func TestShutdownDeadlineThenClose(t *testing.T) {
	entered := make(chan struct{})
	srv := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-r.Context().Done() // until Close cuts the connection
	})}
	c := dial(t, serve(t, srv))
	_, _ = io.WriteString(c, get)
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := srv.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v, want DeadlineExceeded", err)
	}
	_ = srv.Close()
	waitClosed(t, c, 5*time.Second)
}

// TestCloseBeforeInflightCancelsContext lands Server.Close between the
// serve loop's shutdown check and the request being marked in flight: the
// handler, waiting on nothing but its context, must still see it end. The
// request is the connection's second, so that the client-gone watch is
// already in place and closing the socket silently drops it from the
// kernel's set instead of failing a watch that starts then.
func TestCloseBeforeInflightCancelsContext(t *testing.T) {
	var srv *Server
	var requests atomic.Int32
	testHookBeforeInflight = func() {
		if requests.Add(1) == 2 {
			_ = srv.Close()
		}
	}
	t.Cleanup(func() { testHookBeforeInflight = nil })
	cancelled := make(chan error, 1)
	srv = &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/first" {
			return
		}
		select {
		case <-r.Context().Done():
			cancelled <- nil
		case <-time.After(5 * time.Second):
			cancelled <- errors.New("the handler's context was not cancelled within 5 s of Close")
		}
	})}
	c := dial(t, serve(t, srv))
	roundTrip(t, c, bufio.NewReader(c), getPath("/first"), "GET")
	_, _ = io.WriteString(c, get)
	if err := <-cancelled; err != nil {
		t.Fatal(err)
	}
	waitClosed(t, c, 5*time.Second)
}

// TestTimeouts checks each timeout ends the connection, no earlier than
// it should. Each bound is measured from a moment before the one the
// server counts from (the dial, the request's first bytes, the request
// answered), so that the time the server takes to see them cannot make a
// timeout that fired on time look early.
func TestTimeouts(t *testing.T) {
	t.Run("read header", func(t *testing.T) {
		srv := &Server{ReadHeaderTimeout: 200 * time.Millisecond, Handler: http.NotFoundHandler()}
		addr := serve(t, srv)
		start := time.Now()
		c := dial(t, addr)
		_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n")
		out, _ := waitClosed(t, c, 5*time.Second)
		if d := time.Since(start); out != "" || d < 200*time.Millisecond {
			t.Fatalf("closed after %v with %q; want silence after ≥ 200ms", d, out)
		}
	})
	t.Run("read header of a later request", func(t *testing.T) {
		srv := &Server{ReadHeaderTimeout: 200 * time.Millisecond, IdleTimeout: 10 * time.Second, Handler: http.NotFoundHandler()}
		c := dial(t, serve(t, srv))
		roundTrip(t, c, bufio.NewReader(c), get, "GET")
		time.Sleep(300 * time.Millisecond) // idle: under IdleTimeout
		start := time.Now()
		_, _ = io.WriteString(c, "GET / HTTP/1.1\r\n")
		waitClosed(t, c, 5*time.Second)
		if d := time.Since(start); d < 200*time.Millisecond {
			t.Fatalf("closed after %v, want ≥ 200ms", d)
		}
	})
	t.Run("idle", func(t *testing.T) {
		srv := &Server{IdleTimeout: 200 * time.Millisecond, Handler: http.NotFoundHandler()}
		c := dial(t, serve(t, srv))
		start := time.Now()
		roundTrip(t, c, bufio.NewReader(c), get, "GET")
		waitClosed(t, c, 5*time.Second)
		if d := time.Since(start); d < 200*time.Millisecond {
			t.Fatalf("closed after %v, want ≥ 200ms", d)
		}
	})
	t.Run("read body", func(t *testing.T) {
		errc := make(chan error, 1)
		srv := &Server{ReadTimeout: 300 * time.Millisecond, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, err := io.ReadAll(r.Body)
			errc <- err
		})}
		c := dial(t, serve(t, srv))
		_, _ = io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
		select {
		case err := <-errc:
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("body read: %v, want a timeout", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("body read did not time out")
		}
	})
	t.Run("write", func(t *testing.T) {
		errc := make(chan error, 1)
		srv := &Server{WriteTimeout: 300 * time.Millisecond, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			chunk := make([]byte, 64<<10)
			for range 1 << 12 { // 256 MiB: more than any socket buffer
				if _, err := w.Write(chunk); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		})}
		c := dial(t, serve(t, srv))
		_, _ = io.WriteString(c, get) // and never read
		select {
		case err := <-errc:
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("write: %v, want a timeout", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("write did not time out")
		}
	})
	t.Run("response controller write deadline", func(t *testing.T) {
		errc := make(chan error, 1)
		srv := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rc := http.NewResponseController(w)
			chunk := make([]byte, 64<<10)
			for range 1 << 12 {
				if err := rc.SetWriteDeadline(time.Now().Add(200 * time.Millisecond)); err != nil {
					errc <- err
					return
				}
				if _, err := w.Write(chunk); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		})}
		c := dial(t, serve(t, srv))
		_, _ = io.WriteString(c, get)
		select {
		case err := <-errc:
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("write: %v, want a timeout", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("write did not time out")
		}
	})
}

// deadlineCounter counts the deadline calls on a connection.
type deadlineCounter struct {
	net.Conn
	reads, writes *atomic.Int32
}

func (c deadlineCounter) SetReadDeadline(t time.Time) error {
	c.reads.Add(1)
	return c.Conn.SetReadDeadline(t)
}

func (c deadlineCounter) SetWriteDeadline(t time.Time) error {
	c.writes.Add(1)
	return c.Conn.SetWriteDeadline(t)
}

// TestDeadlinesSetPerStateNotPerRequest: with every timeout set, a busy
// keep-alive connection sets its deadlines a few times, not for each
// request (net/http sets them six or seven times a request).
func TestDeadlinesSetPerStateNotPerRequest(t *testing.T) {
	var reads, writes atomic.Int32
	srv := &Server{
		ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 60 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }),
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a, b := net.Pipe()
	_ = ln.Close()
	go func() { _ = srv.ServeConn(deadlineCounter{Conn: a, reads: &reads, writes: &writes}) }()
	defer b.Close()
	br := bufio.NewReader(b)
	const n = 200
	for range n {
		roundTrip(t, b, br, get, "GET")
	}
	if r, w := reads.Load(), writes.Load(); r > 4 || w > 4 {
		t.Fatalf("%d requests set the read deadline %d times and the write deadline %d times", n, r, w)
	}
}

func TestHijack(t *testing.T) {
	var states sync.Map
	srv := &Server{
		ConnState: func(c net.Conn, st http.ConnState) { states.Store(st, true) },
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("Hijack: %v", err)
				return
			}
			defer conn.Close()
			if _, err := w.Write([]byte("x")); !errors.Is(err, http.ErrHijacked) {
				t.Errorf("Write after Hijack: %v", err)
			}
			_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
			_ = brw.Flush()
			line, _ := brw.ReadString('\n') // sent in the same write as the request
			_, _ = brw.WriteString("echo " + line)
			_ = brw.Flush()
			line, _ = brw.ReadString('\n') // sent later
			_, _ = brw.WriteString("echo " + line)
			_ = brw.Flush()
		}),
	}
	c := dial(t, serve(t, srv))
	br := bufio.NewReader(c)
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\nfirst\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("response: %v %v", resp, err)
	}
	if l, _ := br.ReadString('\n'); l != "echo first\n" {
		t.Fatalf("got %q", l)
	}
	_, _ = io.WriteString(c, "second\n")
	if l, _ := br.ReadString('\n'); l != "echo second\n" {
		t.Fatalf("got %q", l)
	}
	if _, ok := states.Load(http.StateHijacked); !ok {
		t.Error("ConnState never reported StateHijacked")
	}
}

func TestExpectContinueOverTCP(t *testing.T) {
	srv := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/refuse" {
			http.Error(w, "no", http.StatusForbidden)
			return
		}
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	})}
	addr := serve(t, srv)
	c := dial(t, addr)
	br := bufio.NewReader(c)
	_, _ = io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
	resp, _ := readResponse(t, br, "POST")
	if resp.StatusCode != 100 {
		t.Fatalf("got %d before the body, want 100", resp.StatusCode)
	}
	_, _ = io.WriteString(c, "hello")
	if resp, body := readResponse(t, br, "POST"); resp.StatusCode != 200 || body != "hello" {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	c2 := dial(t, addr)
	br2 := bufio.NewReader(c2)
	_, _ = io.WriteString(c2, "POST /refuse HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
	resp, _ = readResponse(t, br2, "POST")
	if resp.StatusCode != 403 || !resp.Close {
		t.Fatalf("refusal: %d, close %v; want 403 and close (the body never sent)", resp.StatusCode, resp.Close)
	}
}

func TestPanicRecovered(t *testing.T) {
	var logs logtest.Buffer
	srv := &Server{
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/panic":
				panic("boom")
			case "/abort":
				panic(http.ErrAbortHandler)
			}
			_, _ = io.WriteString(w, "ok")
		}),
	}
	addr := serve(t, srv)
	for _, p := range []string{"/panic", "/abort"} {
		c := dial(t, addr)
		_, _ = io.WriteString(c, getPath(p))
		if out, _ := waitClosed(t, c, 5*time.Second); out != "" {
			t.Errorf("%s: answered %q, want the connection closed", p, out)
		}
	}
	c := dial(t, addr)
	if _, body := roundTrip(t, c, bufio.NewReader(c), get, "GET"); body != "ok" {
		t.Fatalf("after the panics: %q", body)
	}
	if n := strings.Count(logs.String(), "panic serving"); n != 1 {
		t.Fatalf("%d panic lines logged, want 1 (ErrAbortHandler is not logged):\n%s", n, logs.String())
	}
}

func TestConnState(t *testing.T) {
	var mu sync.Mutex
	var seen []http.ConnState
	done := make(chan struct{})
	srv := &Server{
		ConnState: func(c net.Conn, st http.ConnState) {
			mu.Lock()
			seen = append(seen, st)
			mu.Unlock()
			if st == http.StateClosed {
				close(done)
			}
		},
		Handler: http.NotFoundHandler(),
	}
	c := dial(t, serve(t, srv))
	br := bufio.NewReader(c)
	roundTrip(t, c, br, get, "GET")
	roundTrip(t, c, br, get, "GET")
	_ = c.Close()
	<-done
	mu.Lock()
	defer mu.Unlock()
	want := []http.ConnState{http.StateNew, http.StateActive, http.StateIdle, http.StateActive, http.StateIdle, http.StateClosed}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("states %v, want %v", seen, want)
	}
}

func TestMaxHeaderBytes(t *testing.T) {
	srv := &Server{MaxHeaderBytes: 1024, Handler: http.NotFoundHandler()}
	addr := serve(t, srv)
	c := dial(t, addr)
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nX: "+strings.Repeat("a", 10000)+"\r\n\r\n")
	if out, _ := waitClosed(t, c, 5*time.Second); !strings.HasPrefix(out, "HTTP/1.1 431 ") {
		t.Fatalf("got %q, want 431", out)
	}
	c = dial(t, addr)
	if resp, _ := roundTrip(t, c, bufio.NewReader(c), "GET / HTTP/1.1\r\nHost: x\r\nX: "+strings.Repeat("a", 900)+"\r\n\r\n", "GET"); resp.StatusCode != 404 {
		t.Fatalf("a head under the limit: %d", resp.StatusCode)
	}
}
