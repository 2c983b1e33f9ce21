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
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/backend/misbehave"
	"github.com/seed-a07d1050/portcullis/internal/waitfor"
)

func startMisbehave(t *testing.T, cfg misbehave.Config) *misbehave.Server {
	t.Helper()
	s, err := misbehave.Start("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// recordingDialer dials TCP and keeps every connection it opened, so that
// a test can wait for what the upstream did to one to reach it.
type recordingDialer struct {
	d     net.Dialer
	mu    sync.Mutex
	conns []net.Conn
}

func (r *recordingDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := r.d.DialContext(ctx, network, addr)
	if err == nil {
		r.mu.Lock()
		r.conns = append(r.conns, c)
		r.mu.Unlock()
	}
	return c, err
}

func (r *recordingDialer) last() net.Conn {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conns[len(r.conns)-1]
}

// waitNotOpen waits until the idle check of c sees what the upstream did
// to it. A reset is sent before misbehave's Release returns but cannot be
// waited for by the sender, hence this wait on the receiving side. The
// check consumes nothing.
func waitNotOpen(t *testing.T, c net.Conn) {
	t.Helper()
	p := newSocketProber(c)
	if !waitfor.Until(5*time.Second, func() bool { return p.probeIdle() != idleOpen }) {
		t.Fatal("the upstream's action did not reach the connection within 5s")
	}
}

// checkOwn fails the test unless resp is the answer to method and target,
// or err (or an error reading the body) is allowed by the fault.
func checkOwn(t *testing.T, fault misbehave.Fault, method, target string, resp *http.Response, err error) (failed bool) {
	t.Helper()
	if err == nil {
		err = misbehave.CheckAnswer(resp, method, target)
	}
	switch {
	case err == nil:
		return false
	case errors.Is(err, misbehave.ErrWrongAnswer):
		t.Fatalf("%s %s: %v", method, target, err)
	case fault != misbehave.EarlyClose:
		t.Fatalf("%s %s under %s: %v", method, target, fault, err)
	}
	return true
}

// TestEachRequestGetsItsOwnAnswer sends, for every misbehaviour of the
// test backend and every method, requests with distinct targets one after
// another, as different clients would, releasing the late faults between
// them, so that whatever the backend puts on an idle connection is there
// when the next request takes it. Each request must get its own answer,
// or an error where the backend cut its answer short, and reach the
// backend once.
func TestEachRequestGetsItsOwnAnswer(t *testing.T) {
	const n = 4
	for _, fault := range misbehave.Faults {
		for _, method := range []string{"GET", "HEAD", "POST", "DELETE"} {
			t.Run(fault.String()+"/"+method, func(t *testing.T) {
				srv := startMisbehave(t, misbehave.Config{Fault: fault})
				rd := &recordingDialer{}
				tr := newTransport(t, Config{DialContext: rd.dial})
				errs := 0
				for i := range n {
					target := fmt.Sprintf("/client-%d", i)
					resp, err := doReq(t, tr, method, srv.URL()+target, nil)
					if checkOwn(t, fault, method, target, resp, err) {
						errs++
					}
					srv.Release()
					if fault == misbehave.IdleReset {
						waitNotOpen(t, rd.last())
					}
				}
				s := tr.Stats()
				if got := srv.Requests(); got != n || s.Retries != 0 {
					t.Fatalf("backend got %d requests, stats %+v; want %d and no retry", got, s, n)
				}
				checkReuseStats(t, fault, method, s, errs, n)
			})
		}
	}
}

// checkReuseStats checks what the Transport counted for n requests under
// fault: a connection reused only when nothing but its answer came.
func checkReuseStats(t *testing.T, fault misbehave.Fault, method string, s Stats, errs, n int) {
	t.Helper()
	fail := func(want string) { t.Fatalf("stats %+v with %d errors; want %s", s, errs, want) }
	switch {
	case fault == misbehave.SplitHead, fault == misbehave.HeadWithBody && method != "HEAD":
		if s.Dials != 1 || errs != 0 {
			fail("one connection for every request")
		}
	case fault == misbehave.EarlyClose && method == "HEAD":
		// No body to cut short: the close is found when the next request
		// takes the connection.
		if errs != 0 || s.Dials != uint64(n) || s.IdleClosed != uint64(n-1) {
			fail("no error, a connection per request, each found closed")
		}
	case fault == misbehave.EarlyClose:
		if errs != n || s.Dials != uint64(n) || s.Idle != 0 {
			fail("every body cut short, on a connection of its own, none kept")
		}
	case fault.IsLate() && fault != misbehave.LateResponse:
		if errs != 0 || s.Dials != uint64(n) || s.IdleClosed != uint64(n-1) || s.Unsolicited != 0 {
			fail("each idle connection found closed, and dropped")
		}
	default: // bytes that no request asked for, after the answer or while idle
		if errs != 0 || s.Dials != uint64(n) || s.Unsolicited < uint64(n-1) || s.IdleClosed != 0 {
			fail("each connection closed for its unsolicited bytes")
		}
	}
}

// TestIssueReproduction is the report's case: the backend answers GET /a
// with "first\n", then, 300 ms later, writes a second complete response on
// the idle connection. A request sent before that gets its own answer, and
// so does one sent after it, on a new connection.
func TestIssueReproduction(t *testing.T) {
	srv := startMisbehave(t, misbehave.Config{Fault: misbehave.LateResponse, LateAfter: 300 * time.Millisecond})
	rd := &recordingDialer{}
	tr := newTransport(t, Config{DialContext: rd.dial})
	for _, target := range []string{"/a", "/b"} {
		resp, err := get(t, tr, srv.URL()+target)
		checkOwn(t, misbehave.None, "GET", target, resp, err)
	}
	waitNotOpen(t, rd.last()) // the late responses arrived
	resp, err := get(t, tr, srv.URL()+"/c")
	checkOwn(t, misbehave.None, "GET", "/c", resp, err)
	if s := tr.Stats(); s.Dials != 2 || s.Unsolicited != 1 {
		t.Fatalf("stats %+v, want the first connection dropped for its stray response and a second one", s)
	}
}

// serve408OnSecond answers the first request on each connection with 200
// and the second with 408 and a close, as a backend does whose idle
// timeout fires just as the request arrives (the 408 left before the
// request was read). It counts the requests it read.
func serve408OnSecond(t *testing.T, prefix string) (*rawServer, *atomic.Int64) {
	var requests atomic.Int64
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		for n := 1; ; n++ {
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			requests.Add(1)
			if n == 1 {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				continue
			}
			io.WriteString(c, prefix+"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
			return
		}
	})
	return srv, &requests
}

// Test408OnReusedConnection covers a 408 that arrives after the check, as
// the first response on a reused connection: a replayable request is sent
// again on a new connection (RFC 9110 §15.5.9), any other gets the 408 and
// is never sent twice, and a 408 after an informational response, or on a
// new connection, is the answer; for every sender.
func Test408OnReusedConnection(t *testing.T) {
	cases := []struct {
		name     string
		method   string
		header   http.Header
		prefix   string // before the 408
		retried  bool
		requests int64
	}{
		{"GET", "GET", nil, "", true, 3},
		{"HEAD", "HEAD", nil, "", true, 3},
		{"POST", "POST", nil, "", false, 2},
		{"DELETE", "DELETE", nil, "", false, 2},
		{"POST with Idempotency-Key", "POST", http.Header{"Idempotency-Key": {"k"}}, "", true, 3},
		{"GET, 408 after 103", "GET", nil, "HTTP/1.1 103 Early Hints\r\n\r\n", false, 2},
	}
	for _, via := range senders {
		for _, tc := range cases {
			t.Run(via.name+"/"+tc.name, func(t *testing.T) {
				srv, requests := serve408OnSecond(t, tc.prefix)
				tr := newTransport(t, Config{})
				resp, err := sendVia(t, via, tr, http.MethodGet, srv.url(), nil, SendOptions{})
				if err != nil {
					t.Fatal(err)
				}
				readAll(t, resp)
				resp, err = sendVia(t, via, tr, tc.method, srv.url(), tc.header, SendOptions{})
				if err != nil {
					t.Fatal(err)
				}
				readAll(t, resp)
				want, retries := http.StatusRequestTimeout, uint64(0)
				if tc.retried {
					want, retries = http.StatusOK, 1
				}
				if resp.StatusCode != want || requests.Load() != tc.requests || tr.Stats().Retries != retries {
					t.Fatalf("status %d, %d requests, stats %+v; want %d, %d requests, %d retries",
						resp.StatusCode, requests.Load(), tr.Stats(), want, tc.requests, retries)
				}
			})
		}
	}
	for _, via := range senders {
		t.Run(via.name+"/new connection", func(t *testing.T) {
			srv := newRawServer(t, serveFixed("HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", 1))
			tr := newTransport(t, Config{})
			resp, err := sendVia(t, via, tr, http.MethodGet, srv.url(), nil, SendOptions{})
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
			if resp.StatusCode != http.StatusRequestTimeout || tr.Stats().Retries != 0 || srv.conns.Load() != 1 {
				t.Fatalf("status %d, stats %+v, %d connections; want the 408, as net/http on a new connection", resp.StatusCode, tr.Stats(), srv.conns.Load())
			}
		})
	}
}

// failingConn is a TCP connection whose next write can be made to fail,
// having written nothing or a part: a reset that arrived after the check.
type failingConn struct {
	*net.TCPConn
	probe idleProber
	fail  *atomic.Int32 // 1: nothing written, 2: five bytes written
}

func (c *failingConn) probeIdle() idleState { return c.probe.probeIdle() }

func (c *failingConn) Write(p []byte) (int, error) {
	switch c.fail.Swap(0) {
	case 1:
		return 0, syscall.EPIPE
	case 2:
		n, _ := c.TCPConn.Write(p[:5])
		return n, syscall.EPIPE
	}
	return c.TCPConn.Write(p)
}

// TestRetryWhenNothingWasWritten checks net/http's rule for a reused
// connection whose write fails: a request of which no byte left is sent
// again whatever its method; one partly written only if replayable; for
// every sender.
func TestRetryWhenNothingWasWritten(t *testing.T) {
	cases := []struct {
		method   string
		mode     int32
		retried  bool
		requests int64 // complete requests the backend read
	}{
		{"POST", 1, true, 2},
		{"DELETE", 1, true, 2},
		{"GET", 1, true, 2},
		{"GET", 2, true, 2},
		{"POST", 2, false, 1},
	}
	for _, via := range senders {
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%s/%s/mode-%d", via.name, tc.method, tc.mode), func(t *testing.T) {
				var requests atomic.Int64
				srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
					for {
						if _, err := http.ReadRequest(br); err != nil {
							return
						}
						requests.Add(1)
						io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
					}
				})
				var fail atomic.Int32
				var d net.Dialer
				tr := newTransport(t, Config{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
					nc, err := d.DialContext(ctx, network, addr)
					if err != nil {
						return nil, err
					}
					return &failingConn{TCPConn: nc.(*net.TCPConn), probe: newSocketProber(nc), fail: &fail}, nil
				}})
				resp, err := sendVia(t, via, tr, http.MethodGet, srv.url(), nil, SendOptions{})
				if err != nil {
					t.Fatal(err)
				}
				readAll(t, resp)
				fail.Store(tc.mode)
				resp, err = sendVia(t, via, tr, tc.method, srv.url(), nil, SendOptions{})
				if tc.retried != (err == nil) {
					t.Fatalf("err = %v, want retried %v", err, tc.retried)
				}
				if err == nil {
					readAll(t, resp)
				}
				if requests.Load() != tc.requests {
					t.Fatalf("backend read %d complete requests, want %d", requests.Load(), tc.requests)
				}
			})
		}
	}
}

// outcome classifies the answer to one request.
func outcome(resp *http.Response, err error, method, target string) string {
	if err == nil {
		err = misbehave.CheckAnswer(resp, method, target)
	}
	switch {
	case err == nil:
		return "own"
	case errors.Is(err, misbehave.ErrWrongAnswer):
		return "WRONG: " + err.Error()
	}
	return "error"
}

// closeWatcher dials TCP and reports when the client closes a connection.
type closeWatcher struct {
	d      net.Dialer
	closed chan net.Conn
}

type watchedConn struct {
	net.Conn
	once sync.Once
	w    *closeWatcher
}

func (c *watchedConn) Close() error {
	c.once.Do(func() { c.w.closed <- c.Conn })
	return c.Conn.Close()
}

func (w *closeWatcher) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := w.d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &watchedConn{Conn: c, w: w}, nil
}

// TestDifferentialWithHTTPTransport runs every misbehaviour against the
// Transport and against net/http's Transport, on the same requests: both
// must give every request its own answer or an error, and the same ones.
// net/http notices bytes on an idle connection in its read loop, a
// goroutine: the test waits for it to close the connection before the
// next request, where the fault closes it, so that its own scheduling
// window does not decide the outcome.
func TestDifferentialWithHTTPTransport(t *testing.T) {
	defer log.SetOutput(log.Writer())
	log.SetOutput(io.Discard) // net/http logs every unsolicited response
	for _, fault := range misbehave.Faults {
		for _, method := range []string{"GET", "HEAD"} {
			t.Run(fault.String()+"/"+method, func(t *testing.T) {
				var results [2][]string
				var up *Transport
				for k := range results {
					srv := startMisbehave(t, misbehave.Config{Fault: fault})
					var rt http.RoundTripper
					w := &closeWatcher{closed: make(chan net.Conn, 16)}
					if k == 0 {
						std := &http.Transport{DialContext: w.dial, MaxIdleConnsPerHost: 1024, DisableCompression: true}
						t.Cleanup(std.CloseIdleConnections)
						rt = std
					} else {
						up = newTransport(t, Config{})
						rt = up
					}
					for i := range 4 {
						target := fmt.Sprintf("/client-%d", i)
						resp, err := doReq(t, rt, method, srv.URL()+target, nil)
						results[k] = append(results[k], outcome(resp, err, method, target))
						srv.Release()
						if k == 0 && closesConnection(fault, method) {
							select {
							case <-w.closed:
							case <-time.After(5 * time.Second):
								t.Fatal("net/http did not close the connection within 5s")
							}
						}
					}
				}
				for i := range results[0] {
					if results[0][i] != results[1][i] || results[1][i] != "own" && results[1][i] != "error" {
						t.Fatalf("request %d: net/http %q, upstream %q\nall: %q\n     %q", i, results[0][i], results[1][i], results[0], results[1])
					}
				}
				if s := up.Stats(); !closesConnection(fault, method) && s.Dials != 1 {
					t.Fatalf("stats %+v: the Transport did not reuse its connection", s)
				}
			})
		}
	}
}

// closesConnection reports whether fault leaves every connection unusable
// after an exchange with method.
func closesConnection(fault misbehave.Fault, method string) bool {
	switch fault {
	case misbehave.SplitHead:
		return false
	case misbehave.HeadWithBody:
		return method == "HEAD"
	}
	return true
}

// TestConcurrentClientsOwnAnswers runs eight requests at a time through one
// Transport, for every misbehaviour, in rounds separated by the release of
// the late faults: no request ever gets another's answer.
func TestConcurrentClientsOwnAnswers(t *testing.T) {
	for _, fault := range misbehave.Faults {
		t.Run(fault.String(), func(t *testing.T) {
			srv := startMisbehave(t, misbehave.Config{Fault: fault, Every: 2})
			tr := newTransport(t, Config{MaxIdleConnsPerHost: 4})
			for round := range 5 {
				var wg sync.WaitGroup
				for c := range 8 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						method := []string{"GET", "HEAD"}[c%2]
						target := fmt.Sprintf("/round-%d/client-%d", round, c)
						resp, err := doReq(t, tr, method, srv.URL()+target, nil)
						if err == nil {
							err = misbehave.CheckAnswer(resp, method, target)
						}
						if errors.Is(err, misbehave.ErrWrongAnswer) || err != nil && fault != misbehave.EarlyClose {
							t.Errorf("round %d: %v", round, err)
						}
					}()
				}
				waitGroup(t, &wg)
				// A reset that reaches a connection after its check fails
				// the request's write or read before any response byte:
				// GET and HEAD are then sent again.
				srv.Release()
			}
		})
	}
}

// TestResidualWindowAsNetHTTP characterizes the window no HTTP/1.1 client
// can close, on the Transport and on net/http's side by side: the first
// connection's backend writes a stray response as soon as it reads the
// first request, before its real answer. That exchange gets the stray,
// with either client. If the real answer then arrives while the connection
// is idle, the next request finds it and takes a new connection; if the
// backend holds each real answer until the next request has arrived, every
// later exchange on that connection is one answer behind, with either
// client, until the surplus shows.
func TestResidualWindowAsNetHTTP(t *testing.T) {
	defer log.SetOutput(log.Writer())
	log.SetOutput(io.Discard)
	answer := func(target string) string {
		return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\nanswer to %s", len("answer to "+target), target)
	}
	cases := []struct {
		name string
		lag  bool // the backend writes each real answer once the next request arrived
		want []string
	}{
		{"answer arrives while idle", false, []string{"stray", "answer to /2", "answer to /3"}},
		{"answer arrives after the next request", true, []string{"stray", "answer to /1", "answer to /2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got [2][]string
			for k := range got {
				release := make(chan struct{})
				var first atomic.Bool
				srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					if first.Swap(true) {
						io.WriteString(c, answer(req.RequestURI))
						serveEcho(c, br, answer)
						return
					}
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstray")
					if !tc.lag {
						<-release
						io.WriteString(c, answer(req.RequestURI))
						serveEcho(c, br, answer)
						return
					}
					for prev := req.RequestURI; ; {
						next, err := http.ReadRequest(br)
						if err != nil {
							return
						}
						io.WriteString(c, answer(prev))
						prev = next.RequestURI
					}
				})
				w := &closeWatcher{closed: make(chan net.Conn, 16)}
				rd := &recordingDialer{}
				var rt http.RoundTripper
				if k == 0 {
					std := &http.Transport{DialContext: w.dial, MaxIdleConnsPerHost: 1024, DisableCompression: true}
					t.Cleanup(std.CloseIdleConnections)
					rt = std
				} else {
					rt = newTransport(t, Config{DialContext: rd.dial})
				}
				for i := 1; i <= 3; i++ {
					resp, err := get(t, rt, fmt.Sprintf("%s/%d", srv.url(), i))
					if err != nil {
						t.Fatal(err)
					}
					got[k] = append(got[k], readAll(t, resp))
					if i == 1 && !tc.lag {
						close(release)
						if k == 0 {
							<-w.closed // net/http's read loop saw the surplus
						} else {
							waitNotOpen(t, rd.last())
						}
					}
				}
			}
			if !slices.Equal(got[0], tc.want) || !slices.Equal(got[1], tc.want) {
				t.Fatalf("net/http got %q, upstream %q; want %q for both", got[0], got[1], tc.want)
			}
		})
	}
}

// serveEcho answers every request on br with answer(its target).
func serveEcho(c net.Conn, br *bufio.Reader, answer func(string) string) {
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.WriteString(c, answer(req.RequestURI))
	}
}
