package upstream

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestStaleConnectionRetry has the server read the second request on each
// connection and close it without an answer, as an upstream does that
// closes an idle connection just as a request arrives; for every sender.
func TestStaleConnectionRetry(t *testing.T) {
	cases := []struct {
		name    string
		method  string
		header  http.Header
		retried bool
	}{
		{"GET", http.MethodGet, nil, true},
		{"HEAD", http.MethodHead, nil, true},
		{"OPTIONS", http.MethodOptions, nil, true},
		{"POST", http.MethodPost, nil, false},
		{"DELETE", http.MethodDelete, nil, false},
		{"POST with Idempotency-Key", http.MethodPost, http.Header{"Idempotency-Key": {"k1"}}, true},
		{"POST with X-Idempotency-Key", http.MethodPost, http.Header{"X-Idempotency-Key": {"k2"}}, true},
	}
	for _, via := range senders {
		for _, tc := range cases {
			t.Run(via.name+"/"+tc.name, func(t *testing.T) {
				var requests atomic.Int64
				srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
					for n := 1; ; n++ {
						if _, err := http.ReadRequest(br); err != nil {
							return
						}
						requests.Add(1)
						if n == 2 {
							return // closes without an answer
						}
						io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
					}
				})
				tr := newTransport(t, Config{})
				resp, err := sendVia(t, via, tr, http.MethodGet, srv.url(), nil, SendOptions{})
				if err != nil {
					t.Fatal(err)
				}
				readAll(t, resp)
				resp, err = sendVia(t, via, tr, tc.method, srv.url(), tc.header, SendOptions{})
				if !tc.retried {
					if err == nil {
						resp.Body.Close()
						t.Fatalf("%s without idempotency key succeeded: it was sent again", tc.method)
					}
					if n := requests.Load(); n != 2 || tr.Stats().Retries != 0 {
						t.Fatalf("server got %d requests, stats %+v; want 2 and no retry", n, tr.Stats())
					}
					return
				}
				if err != nil {
					t.Fatalf("request on a stale connection failed: %v", err)
				}
				readAll(t, resp)
				if s := tr.Stats(); s.Retries != 1 || s.Dials != 2 || requests.Load() != 3 {
					t.Fatalf("stats %+v, %d requests; want 1 retry over 2 connections, 3 requests", s, requests.Load())
				}
			})
		}
	}
}

// hangingServer reads one request per connection, sends prefix and then
// waits for the client to close the connection, reporting it on closed.
func hangingServer(t *testing.T, prefix string) (srv *rawServer, closed chan struct{}) {
	closed = make(chan struct{}, 16)
	srv = newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		io.WriteString(c, prefix)
		io.Copy(io.Discard, br)
		closed <- struct{}{}
	})
	return srv, closed
}

var errClientGone = errors.New("client went away")

func TestCancelWhileWaitingForHead(t *testing.T) {
	for _, via := range senders {
		t.Run(via.name, func(t *testing.T) { testCancelWhileWaitingForHead(t, via) })
	}
}

func testCancelWhileWaitingForHead(t *testing.T, via sender) {
	checkNoLeak(t)
	srv, closed := hangingServer(t, "")
	tr := newTransport(t, Config{})
	ctx, cancel := context.WithCancelCause(context.Background())
	time.AfterFunc(50*time.Millisecond, func() { cancel(errClientGone) })
	start := time.Now()
	_, err := sendViaCtx(t, ctx, via, tr, http.MethodGet, srv.url(), nil, SendOptions{})
	if !errors.Is(err, errClientGone) {
		t.Fatalf("err = %v, want the context's cause", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("RoundTrip returned %v after the cancel", d)
	}
	waitChan(t, closed)
	if s := tr.Stats(); s.Idle != 0 {
		t.Fatalf("a cancelled connection was pooled: %+v", s)
	}
}

func TestCancelWhileReadingBody(t *testing.T) {
	for _, via := range senders {
		t.Run(via.name, func(t *testing.T) { testCancelWhileReadingBody(t, via) })
	}
}

func testCancelWhileReadingBody(t *testing.T, via sender) {
	checkNoLeak(t)
	srv, closed := hangingServer(t, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
	tr := newTransport(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, err := sendViaCtx(t, ctx, via, tr, http.MethodGet, srv.url(), nil, SendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 10)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, cancel)
	done := make(chan error, 1)
	go func() { _, err := resp.Body.Read(buf); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("body read error %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the body read did not end within 5s of the cancel")
	}
	waitChan(t, closed)
	if s := tr.Stats(); s.Idle != 0 {
		t.Fatalf("a cancelled connection was pooled: %+v", s)
	}
}

func TestCloseBeforeEOFClosesConnection(t *testing.T) {
	checkNoLeak(t)
	srv, closed := hangingServer(t, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
	tr := newTransport(t, Config{})
	resp, err := get(t, tr, srv.url())
	if err != nil {
		t.Fatal(err)
	}
	io.ReadFull(resp.Body, make([]byte, 10))
	resp.Body.Close()
	resp.Body.Close() // twice is harmless
	if _, err := resp.Body.Read(make([]byte, 1)); !errors.Is(err, http.ErrBodyReadAfterClose) {
		t.Fatalf("read after close: %v, want ErrBodyReadAfterClose", err)
	}
	waitChan(t, closed)
	if s := tr.Stats(); s.Idle != 0 {
		t.Fatalf("an unfinished connection was pooled: %+v", s)
	}
}

// TestConcurrentReadAndClose races a body's EOF against its Close: the
// connection must end up pooled or closed, once, never both.
func TestConcurrentReadAndClose(t *testing.T) {
	srv := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "0123456789")
	}))
	tr := newTransport(t, Config{})
	for range 200 {
		resp, err := get(t, tr, srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); io.Copy(io.Discard, resp.Body) }()
		go func() { defer wg.Done(); resp.Body.Close() }()
		waitGroup(t, &wg)
		resp.Body.Close()
		if s := tr.Stats(); s.Idle > 1 {
			t.Fatalf("%d idle connections with one in use at a time", s.Idle)
		}
		assertPoolDistinct(t, tr)
	}
}

// assertPoolDistinct fails if a connection sits in the idle pool twice.
func assertPoolDistinct(t *testing.T, tr *Transport) {
	t.Helper()
	tr.idle.mu.Lock()
	defer tr.idle.mu.Unlock()
	seen := map[*conn]bool{}
	for _, stack := range tr.idle.hosts {
		for _, c := range stack {
			if seen[c] {
				t.Fatal("a connection is in the idle pool twice")
			}
			seen[c] = true
		}
	}
}

func TestHeadTimeout(t *testing.T) {
	for _, via := range senders {
		t.Run(via.name, func(t *testing.T) { testHeadTimeout(t, via) })
	}
}

func testHeadTimeout(t *testing.T, via sender) {
	checkNoLeak(t)
	srv, closed := hangingServer(t, "")
	tr := newTransport(t, Config{})
	_, err := sendVia(t, via, tr, http.MethodGet, srv.url(), nil, SendOptions{HeadTimeout: 100 * time.Millisecond})
	var ne net.Error
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrHeadTimeout) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("err = %v, want ErrHeadTimeout matching DeadlineExceeded", err)
	}
	waitChan(t, closed)
	if s := tr.Stats(); s.Idle != 0 {
		t.Fatalf("a timed-out connection was pooled: %+v", s)
	}
}

// TestHeadTimeoutSpareSlowBody checks that the bound ends with the head: a
// body slower than the bound arrives whole.
func TestHeadTimeoutSparesSlowBody(t *testing.T) {
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		for {
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nsl")
			time.Sleep(300 * time.Millisecond)
			io.WriteString(c, "ow")
		}
	})
	tr := newTransport(t, Config{})
	rt := tr.WithHeadTimeout(100 * time.Millisecond)
	for range 2 {
		resp, err := get(t, rt, srv.url())
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, resp); got != "slow" {
			t.Fatalf("body %q, want %q", got, "slow")
		}
	}
	if n := srv.conns.Load(); n != 1 {
		t.Fatalf("%d connections, want 1: the connection must be reusable after a slow body", n)
	}
}

// TestRoutesShareThePool sends requests through two head timeouts and the
// bare Transport: one connection serves them all.
func TestRoutesShareThePool(t *testing.T) {
	srv := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	tr := newTransport(t, Config{})
	for _, rt := range []http.RoundTripper{tr.WithHeadTimeout(time.Second), tr.WithHeadTimeout(2 * time.Second), tr, tr.WithHeadTimeout(0)} {
		resp, err := get(t, rt, srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
	}
	if n := srv.conns.Load(); n != 1 {
		t.Fatalf("%d connections, want 1 shared by every route", n)
	}
}

func TestIdleTimeout(t *testing.T) {
	srv := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	tr := newTransport(t, Config{IdleConnTimeout: time.Minute})
	var mu sync.Mutex
	now := time.Now()
	tr.idle.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	fetch := func() {
		t.Helper()
		resp, err := get(t, tr, srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
	}

	fetch()
	advance(59 * time.Second)
	fetch() // still fresh: reused
	if n := srv.conns.Load(); n != 1 {
		t.Fatalf("%d connections before the timeout, want 1", n)
	}
	advance(time.Minute)
	fetch() // expired when taken: a new connection
	if n := tr.Stats().Dials; n != 2 {
		t.Fatalf("%d dials, want 2 after the idle timeout", n)
	}
	advance(time.Minute)
	tr.idle.sweep()
	if s := tr.Stats(); s.Idle != 0 {
		t.Fatalf("the sweep left %d idle connections", s.Idle)
	}
}

func TestIdleCapPerHost(t *testing.T) {
	srv := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	tr := newTransport(t, Config{MaxIdleConnsPerHost: 2})
	var resps []*http.Response
	for range 5 { // five at once: five connections
		resp, err := get(t, tr, srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resps = append(resps, resp)
	}
	for _, resp := range resps {
		readAll(t, resp)
	}
	if s := tr.Stats(); s.Dials != 5 || s.Idle != 2 {
		t.Fatalf("stats %+v, want 5 dials and 2 idle", s)
	}
	tr.CloseIdleConnections()
	if s := tr.Stats(); s.Idle != 0 {
		t.Fatalf("CloseIdleConnections left %d", s.Idle)
	}
}

// waitGroup waits for wg, failing the test after 5s.
func waitGroup(t *testing.T, wg *sync.WaitGroup) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("goroutines did not finish within 5s")
	}
}

// TestCancelAfterWholeBodyBuffered cancels once the whole body sits in the
// read buffer: reading it succeeds, but the connection, whose deadline the
// cancel poisons, must not go back to the pool.
func TestCancelAfterWholeBodyBuffered(t *testing.T) {
	srv := newRawServer(t, serveFixed("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 0))
	tr := newTransport(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := doReqCtx(t, ctx, tr, http.MethodGet, srv.url(), nil)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "ok" {
		t.Fatalf("body %q, want the buffered %q", b, "ok")
	}
	if s := tr.Stats(); s.Idle != 0 {
		t.Fatalf("a connection whose context ended was pooled: %+v", s)
	}
}

// TestCancelWhileWriting blocks the write of a head larger than the socket
// buffers on a server that never reads, then cancels.
func TestCancelWhileWriting(t *testing.T) {
	for _, via := range senders {
		t.Run(via.name, func(t *testing.T) { testCancelWhileWriting(t, via) })
	}
}

func testCancelWhileWriting(t *testing.T, via sender) {
	checkNoLeak(t)
	release := make(chan struct{})
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		<-release // never reads
	})
	t.Cleanup(func() { close(release) }) // runs before the server's cleanup waits
	ctx, cancel := context.WithCancelCause(context.Background())
	dialer := &net.Dialer{}
	cancelled := make(chan time.Time, 1)
	tr := newTransport(t, Config{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		// Cancel once the write has started: the head outgrows the socket
		// buffers, so the write is blocked by then or about to be.
		time.AfterFunc(50*time.Millisecond, func() {
			cancelled <- time.Now()
			cancel(errClientGone)
		})
		return c, err
	}})
	_, err := sendViaCtx(t, ctx, via, tr, http.MethodGet, srv.url(), http.Header{"X-Huge": {strings.Repeat("a", 32<<20)}}, SendOptions{})
	if !errors.Is(err, errClientGone) || !strings.Contains(err.Error(), "write request") {
		t.Fatalf("err = %v, want the cause while writing the request", err)
	}
	// Without the cancel the write would wait for ever on a server that
	// never reads: the bound only has to tell a return caused by the
	// cancel from that, on a machine as loaded as CI's (writing 32 MiB
	// with the race detector took 3 s there once).
	if d := time.Since(<-cancelled); d > 10*time.Second {
		t.Fatalf("RoundTrip returned %v after the cancel", d)
	}
	if s := tr.Stats(); s.Idle != 0 {
		t.Fatalf("a cancelled connection was pooled: %+v", s)
	}
}

// TestSweepClosesExpiredWithoutTraffic checks that idle connections expire
// with no request to meet them, by the pool's sweep timer.
func TestSweepClosesExpiredWithoutTraffic(t *testing.T) {
	srv, closed := hangingServer(t, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	tr := newTransport(t, Config{IdleConnTimeout: 40 * time.Millisecond})
	resp, err := get(t, tr, srv.url())
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if tr.Stats().Idle != 1 {
		t.Fatal("the connection was not pooled")
	}
	waitChan(t, closed) // the sweep closed it
	if s := tr.Stats(); s.Idle != 0 {
		t.Fatalf("%d idle after the sweep", s.Idle)
	}
}

// TestKeptHeadDeadline checks the head deadline a connection keeps between
// exchanges (when its body was buffered whole): it still bounds the next
// head on that connection, and a request without a head timeout is not
// bounded by it.
func TestKeptHeadDeadline(t *testing.T) {
	var n atomic.Int64
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		for {
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			switch n.Add(1) {
			case 2:
				time.Sleep(400 * time.Millisecond) // longer than the head timeout
			case 4:
				time.Sleep(2 * time.Second) // a hang, as far as a 200 ms bound goes
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	tr := newTransport(t, Config{})
	bounded := tr.WithHeadTimeout(200 * time.Millisecond)
	resp, err := get(t, bounded, srv.url())
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	// The deadline of the first exchange is still set on the connection.
	resp, err = get(t, tr, srv.url())
	if err != nil {
		t.Fatalf("a request without a head timeout failed on a connection that had one: %v", err)
	}
	readAll(t, resp)
	if c := srv.conns.Load(); c != 1 {
		t.Fatalf("%d connections, want 1", c)
	}
	resp, err = get(t, bounded, srv.url())
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	start := time.Now()
	_, err = get(t, bounded, srv.url())
	took := time.Since(start)
	if !errors.Is(err, ErrHeadTimeout) {
		t.Fatalf("err = %v, want ErrHeadTimeout", err)
	}
	if took > time.Second {
		t.Fatalf("a 200 ms head timeout on a reused connection fired after %v", took)
	}
}

// TestIdleCapTotal checks MaxIdleConns: a full pool makes room for a new
// idle connection by closing the one idle longest, whatever its host, and
// never holds more than the cap.
func TestIdleCapTotal(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	a, b, c := newCountingServer(t, ok), newCountingServer(t, ok), newCountingServer(t, ok)
	tr := newTransport(t, Config{MaxIdleConns: 2})
	fetch := func(url string) {
		t.Helper()
		resp, err := get(t, tr, url)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
	}
	fetch(a.URL)
	fetch(b.URL)
	if s := tr.Stats(); s.Idle != 2 || s.Evicted != 0 {
		t.Fatalf("after two hosts: %+v, want 2 idle, none evicted", s)
	}
	fetch(c.URL) // a's connection is the oldest idle: it goes
	if s := tr.Stats(); s.Idle != 2 || s.Evicted != 1 {
		t.Fatalf("after a third host: %+v, want 2 idle, 1 evicted", s)
	}
	fetch(b.URL) // reuses b's
	fetch(c.URL) // reuses c's
	fetch(a.URL) // dials again: its idle connection was closed
	if n := a.conns.Load(); n != 2 {
		t.Fatalf("host a saw %d connections, want 2 (the evicted one and a new one)", n)
	}
	if nb, nc := b.conns.Load(), c.conns.Load(); nb != 1 || nc != 1 {
		t.Fatalf("hosts b and c saw %d and %d connections, want 1 each (reused)", nb, nc)
	}
	if s := tr.Stats(); s.Idle != 2 || s.Dials != 4 {
		t.Fatalf("at the end: %+v, want 2 idle after 4 dials", s)
	}
}

// TestIdleCapTotalSameHost checks that eviction keeps a host's stack in
// order when the oldest idle connection is of the host being put back.
func TestIdleCapTotalSameHost(t *testing.T) {
	srv := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	tr := newTransport(t, Config{MaxIdleConns: 2})
	var resps []*http.Response
	for range 3 { // three at once: three connections to one host
		resp, err := get(t, tr, srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resps = append(resps, resp)
	}
	for _, resp := range resps {
		readAll(t, resp)
	}
	if s := tr.Stats(); s.Idle != 2 || s.MaxIdlePerHost != 2 || s.Evicted != 1 {
		t.Fatalf("stats %+v, want 2 idle of one host and 1 evicted", s)
	}
	for range 4 {
		resp, err := get(t, tr, srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
	}
	if s := tr.Stats(); s.Dials != 3 {
		t.Fatalf("stats %+v: sequential requests dialled again", s)
	}
}

// TestSendCountsFromNow checks that SendOptions.Now is the clock reading
// the exchange goes by: the head's deadline counts from it, and an idle
// connection is judged by it.
func TestSendCountsFromNow(t *testing.T) {
	for _, via := range senders {
		if via.name != "RoundTrip" { // which takes no Now
			t.Run(via.name, func(t *testing.T) { testSendCountsFromNow(t, via) })
		}
	}
}

func testSendCountsFromNow(t *testing.T, via sender) {
	t.Run("head deadline", func(t *testing.T) {
		checkNoLeak(t)
		srv, _ := hangingServer(t, "")
		tr := newTransport(t, Config{})
		req, _ := http.NewRequest(http.MethodGet, srv.url(), nil)
		// A guard: if Now were ignored, the context would end first, and
		// the error would not be ErrHeadTimeout.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := via.send(ctx, tr, req, SendOptions{HeadTimeout: 10 * time.Second, Now: time.Now().Add(-11 * time.Second)})
		if !errors.Is(err, ErrHeadTimeout) {
			t.Fatalf("err = %v, want ErrHeadTimeout: the deadline counts from Now", err)
		}
		if s := tr.Stats(); s.Idle != 0 {
			t.Fatalf("a timed-out connection was pooled: %+v", s)
		}
	})
	t.Run("idle expiry", func(t *testing.T) {
		srv := newCountingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
		tr := newTransport(t, Config{IdleConnTimeout: time.Minute})
		send := func(now time.Time) {
			t.Helper()
			req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
			resp, err := via.send(context.Background(), tr, req, SendOptions{Now: now})
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
		}
		send(time.Time{})
		send(time.Now().Add(30 * time.Second)) // still fresh then: reused
		if n := tr.Stats().Dials; n != 1 {
			t.Fatalf("%d dials, want 1: the connection was fresh at Now", n)
		}
		send(time.Now().Add(2 * time.Minute)) // expired by then: a new one
		if n := tr.Stats().Dials; n != 2 {
			t.Fatalf("%d dials, want 2: the connection had expired at Now", n)
		}
	})
}
