package http1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/benchclient"
	"github.com/seed-a07d1050/portcullis/internal/logtest"
)

// exchangeFunc is an ExchangeHandler made of a function.
type exchangeFunc func(x *Exchange) bool

func (f exchangeFunc) ServeExchange(x *Exchange) bool { return f(x) }

// rawResponse is a complete keep-alive response with body.
func rawResponse(body string) string {
	return "HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

// fieldsOf describes what fields hands out, and whether it got through.
func fieldsOf(fields func(fn func(name, value, line []byte) bool) bool) string {
	var b strings.Builder
	ok := fields(func(name, value, line []byte) bool {
		fmt.Fprintf(&b, "%q=%q(%q);", name, value, line)
		return true
	})
	fmt.Fprintf(&b, " ok=%v", ok)
	return b.String()
}

// scannedFields is fieldsOf for the HeadScanner's reading of head, which
// must be exactly one whole head.
func scannedFields(head []byte) (string, error) {
	var s HeadScanner
	n, err := s.Scan(head)
	if err != nil {
		return "", err
	}
	if n != len(head) {
		return "", fmt.Errorf("the head is %d bytes, not %d", n, len(head))
	}
	return fieldsOf(func(fn func(name, value, line []byte) bool) bool { return s.Fields(head, fn) }), nil
}

// headSeen is what a seen records of a request's head.
func headSeen(r *http.Request) seen {
	return seen{
		Method: r.Method, RequestURI: r.RequestURI, Proto: r.Proto,
		ProtoMajor: r.ProtoMajor, ProtoMinor: r.ProtoMinor,
		URL: describeURL(r), Host: r.Host, Header: describeHeader(r.Header),
		ContentLength: r.ContentLength, TransferEncoding: r.TransferEncoding,
		Close: r.Close, TrailerBefore: describeHeader(r.Trailer),
	}
}

// headCheck is an ExchangeHandler that checks what an Exchange shows of
// each request it is offered (RawHead and Fields against the HeadScanner,
// Head against the request Handler then gets), and then declines it
// ("decline"), declines it after making its context ("decline-context"),
// or serves it through Serve ("serve").
type headCheck struct {
	mode string

	mu      sync.Mutex
	errs    []string
	offered int
	pending *seen           // Head() of the request offered last, for the handler
	ctx     context.Context // the context the hook made, for the handler
}

func (hc *headCheck) errorf(format string, args ...any) {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	hc.errs = append(hc.errs, fmt.Sprintf(format, args...))
}

func (hc *headCheck) ServeExchange(x *Exchange) bool {
	raw := x.RawHead()
	want, err := scannedFields(raw)
	if err != nil {
		hc.errorf("RawHead %q: %v", raw, err)
	} else if got := fieldsOf(x.Fields); got != want {
		hc.errorf("head %q: Fields\n got  %s\n want %s", raw, got, want)
	}
	h := x.Head()
	if h.Context() != context.Background() || h.Body != http.NoBody || h.ContentLength != 0 {
		hc.errorf("head %q: Head has context %v, body %v, length %d", raw, h.Context(), h.Body, h.ContentLength)
	}
	s := headSeen(h)
	hc.mu.Lock()
	hc.offered++
	hc.pending = &s
	hc.ctx = nil
	hc.mu.Unlock()
	switch hc.mode {
	case "decline-context":
		ctx := x.Context()
		hc.mu.Lock()
		hc.ctx = ctx
		hc.mu.Unlock()
	case "serve":
		x.Serve(nil)
		return true
	}
	return false
}

// wrap returns h checking that the request it gets is the one Head showed.
func (hc *headCheck) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hc.mu.Lock()
		p, ctx := hc.pending, hc.ctx
		hc.pending, hc.ctx = nil, nil
		hc.mu.Unlock()
		if p != nil {
			if got := headSeen(r); got.String() != p.String() {
				hc.errorf("Head\n %s\nthe handler's request\n %s", p, got)
			}
		}
		if ctx != nil && r.Context() != ctx {
			hc.errorf("the handler's context is not the one the exchange made")
		}
		h.ServeHTTP(w, r)
	})
}

func (hc *headCheck) report(t *testing.T) {
	t.Helper()
	hc.mu.Lock()
	defer hc.mu.Unlock()
	for i, e := range hc.errs {
		if i == 10 {
			t.Errorf("and %d more", len(hc.errs)-10)
			break
		}
		t.Error(e)
	}
	if hc.offered == 0 {
		t.Error("no request was offered")
	}
}

// TestExchangeInvisible serves the corpus (hand-written, buffer edges and
// generated, whole and in pieces) with a hook that looks at every head it
// is offered and declines it, or serves it through Serve, and requires
// the same bytes back and the same requests at the handler as without a
// hook; and what the hook saw to be what the scanner reads and the
// handler gets.
func TestExchangeInvisible(t *testing.T) {
	hostile := append(append([]corpusCase{}, hostileCorpus...), bufferEdgeCorpus...)
	cases := append(hostile, generatedCorpus(1500)...)
	plain := newOurServer(harnessOpts{})
	for _, mode := range []string{"decline", "decline-context", "serve"} {
		t.Run(mode, func(t *testing.T) {
			hc := &headCheck{mode: mode}
			rec := &recorder{}
			hooked := &ourServer{srv: &Server{Handler: hc.wrap(rec), Exchanges: hc, Logger: discardSlog}, rec: rec}
			for i, tc := range cases {
				for _, chunk := range []int{0, 1, 7} {
					if chunk == 1 && (i >= len(hostile) || len(tc.raw) > 2000) {
						continue
					}
					a := plain.serve([]byte(tc.raw), chunk)
					o := hooked.serve([]byte(tc.raw), chunk)
					if d := compare(a, o); d != "" {
						t.Errorf("%s (chunk %d): input %q\n%s", tc.name, chunk, tc.raw, d)
					}
				}
			}
			hc.report(t)
		})
	}
}

// TestExchangeInvisibleLoopback is TestExchangeInvisible over loopback
// TCP, for the hand-written corpus, with the client writing everything,
// half-closing and reading to the end.
func TestExchangeInvisibleLoopback(t *testing.T) {
	plainRec := &recorder{}
	plainAddr := serve(t, &Server{Handler: plainRec, Logger: discardSlog})
	exchange := func(addr string, rec *recorder, raw string) outcome {
		c := dial(t, addr)
		if _, err := io.WriteString(c, raw); err != nil {
			t.Logf("write: %v", err)
		}
		_ = c.(*net.TCPConn).CloseWrite()
		out, _ := io.ReadAll(c)
		return outcome{seen: rec.take(), output: maskDate(out)}
	}
	for _, mode := range []string{"decline", "serve"} {
		t.Run(mode, func(t *testing.T) {
			hc := &headCheck{mode: mode}
			rec := &recorder{}
			addr := serve(t, &Server{Handler: hc.wrap(rec), Exchanges: hc, Logger: discardSlog})
			for _, tc := range hostileCorpus {
				a := exchange(plainAddr, plainRec, tc.raw)
				o := exchange(addr, rec, tc.raw)
				if d := compare(a, o); d != "" {
					t.Errorf("%s: input %q\n%s", tc.name, tc.raw, d)
				}
			}
			hc.report(t)
		})
	}
}

// rawOrDecline serves the paths under /raw/ itself, with a body naming
// the path, and declines the rest.
var rawOrDecline = exchangeFunc(func(x *Exchange) bool {
	p := x.Head().URL.Path
	if !strings.HasPrefix(p, "/raw/") {
		return false
	}
	_, _ = x.WriteString(rawResponse("raw " + p))
	return true
})

// TestExchangeRawKeepAlive: requests served raw and declined ones share a
// keep-alive connection, one at a time and pipelined, answered in order.
func TestExchangeRawKeepAlive(t *testing.T) {
	var handled atomic.Int32
	srv := &Server{Exchanges: rawOrDecline, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handled.Add(1)
		_, _ = io.WriteString(w, "handler "+r.URL.Path)
	})}
	c := dial(t, serve(t, srv))
	br := bufio.NewReader(c)
	paths := []string{"/raw/1", "/raw/1", "/raw/2", "/declined/1", "/raw/3", "/raw/3", "/declined/2", "/declined/2", "/raw/4"}
	want := func(p string) string {
		if strings.HasPrefix(p, "/raw/") {
			return "raw " + p
		}
		return "handler " + p
	}
	for _, p := range paths {
		resp, body := roundTrip(t, c, br, getPath(p), "GET")
		if resp.StatusCode != 200 || body != want(p) || resp.Close {
			t.Fatalf("%s: %d %q close=%v, want 200 %q kept open", p, resp.StatusCode, body, resp.Close, want(p))
		}
	}
	var all strings.Builder
	for _, p := range paths {
		all.WriteString(getPath(p))
	}
	if _, err := io.WriteString(c, all.String()); err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		if resp, body := readResponse(t, br, "GET"); resp.StatusCode != 200 || body != want(p) {
			t.Fatalf("pipelined %s: %d %q, want 200 %q", p, resp.StatusCode, body, want(p))
		}
	}
	if n := handled.Load(); n != 6 {
		t.Fatalf("the handler served %d requests, want the 6 declined", n)
	}
	// The context of an exchange is cancelled when it ends, before its
	// response goes out.
	ctxs := make(chan context.Context, 1)
	srv2 := &Server{Handler: http.NotFoundHandler(), Exchanges: exchangeFunc(func(x *Exchange) bool {
		ctx := x.Context()
		if ctx.Err() != nil {
			t.Errorf("the exchange's context starts cancelled: %v", ctx.Err())
		}
		ctxs <- ctx
		_, _ = x.WriteString(rawResponse("ok"))
		return true
	})}
	c2 := dial(t, serve(t, srv2))
	br2 := bufio.NewReader(c2)
	for i := range 3 {
		roundTrip(t, c2, br2, get, "GET")
		if err := (<-ctxs).Err(); !errors.Is(err, context.Canceled) {
			t.Fatalf("exchange %d: context %v after its response", i, err)
		}
	}
	// Requests with a body, an Expect or OPTIONS * are not offered.
	for _, raw := range []string{
		"POST /raw/body HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi",
		"POST /raw/chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"GET /raw/expect HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\r\n",
	} {
		if _, body := roundTrip(t, c, br, raw, "GET"); !strings.HasPrefix(body, "handler ") {
			t.Fatalf("%q: answered %q, want the handler's answer", raw, body)
		}
	}
	if resp, body := roundTrip(t, c, br, "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", "OPTIONS"); resp.StatusCode != 200 || body != "" {
		t.Fatalf("OPTIONS *: %d %q", resp.StatusCode, body)
	}
}

// TestExchangeFieldsRepeatedHeads: Fields and RawHead describe each head
// as received, whether the server parsed it whole, reused the previous
// head's lines for some of it, or recognized a repeat of the previous
// head and parsed nothing; one request at a time, pipelined, and
// trickled in pieces.
func TestExchangeFieldsRepeatedHeads(t *testing.T) {
	const (
		a = "GET /a?q=1 HTTP/1.1\r\nHost: example.com\r\nUser-Agent: t/1\r\nAccept: */*\r\nx-lower:  padded \t\r\nX-Forwarded-For: 192.0.2.1\r\n\r\n"
		// b changes one value of a; c the request line; d folds a line;
		// e ends its lines with bare LF; f has no field but Host.
		b = "GET /a?q=1 HTTP/1.1\r\nHost: example.com\r\nUser-Agent: t/2\r\nAccept: */*\r\nx-lower:  padded \t\r\nX-Forwarded-For: 192.0.2.1\r\n\r\n"
		c = "GET /c HTTP/1.1\r\nHost: example.com\r\nUser-Agent: t/2\r\nAccept: */*\r\nx-lower:  padded \t\r\nX-Forwarded-For: 192.0.2.1\r\n\r\n"
		d = "GET /c HTTP/1.1\r\nHost: example.com\r\nUser-Agent: t/2\r\nX-Folded: a\r\n b\r\nAccept: */*\r\n\r\n"
		e = "GET /e HTTP/1.1\nHost: example.com\nAccept:*/*\n\n"
		f = "GET /f HTTP/1.1\r\nHost: example.com\r\n\r\n"
	)
	var heads []string
	for range 30 {
		heads = append(heads, a)
	}
	heads = append(heads, b, b, b, c, c, a, d, d, a, e, e, f, f, a, a)
	srv := &Server{Handler: http.NotFoundHandler(), Exchanges: exchangeFunc(func(x *Exchange) bool {
		body := fmt.Sprintf("%s\nraw=%q", fieldsOf(x.Fields), x.RawHead())
		_, _ = x.WriteString(rawResponse(body))
		return true
	})}
	addr := serve(t, srv)
	want := func(head string) string {
		f, err := scannedFields([]byte(head))
		if err != nil {
			t.Fatalf("%q: %v", head, err)
		}
		return fmt.Sprintf("%s\nraw=%q", f, head)
	}
	check := func(i int, head, body string) {
		t.Helper()
		if w := want(head); body != w {
			t.Fatalf("head %d:\n got  %s\n want %s", i, body, w)
		}
	}
	t.Run("one at a time", func(t *testing.T) {
		conn := dial(t, addr)
		br := bufio.NewReader(conn)
		for i, h := range heads {
			_, body := roundTrip(t, conn, br, h, "GET")
			check(i, h, body)
		}
	})
	t.Run("pipelined", func(t *testing.T) {
		conn := dial(t, addr)
		br := bufio.NewReader(conn)
		if _, err := io.WriteString(conn, strings.Join(heads, "")); err != nil {
			t.Fatal(err)
		}
		for i, h := range heads {
			_, body := readResponse(t, br, "GET")
			check(i, h, body)
		}
	})
	t.Run("trickled", func(t *testing.T) {
		conn := dial(t, addr)
		br := bufio.NewReader(conn)
		for i, h := range heads[25:] {
			_, _ = io.WriteString(conn, h[:7])
			time.Sleep(2 * time.Millisecond)
			_, body := roundTrip(t, conn, br, h[7:], "GET")
			check(i, h, body)
		}
	})
}

// TestExchangeCloseAfter: the connection closes after an exchange that
// asked for it, after a request that asked for it, and not otherwise.
func TestExchangeCloseAfter(t *testing.T) {
	srv := &Server{Handler: http.NotFoundHandler(), Exchanges: exchangeFunc(func(x *Exchange) bool {
		switch x.Head().URL.Path {
		case "/close":
			_, _ = x.WriteString("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok")
			x.CloseAfter()
		case "/close-unsaid":
			x.CloseAfter() // before writing, and without saying so
			_, _ = x.WriteString(rawResponse("ok"))
		case "/serve-close":
			x.CloseAfter()
			x.Serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
		default:
			_, _ = x.WriteString(rawResponse("ok"))
		}
		return true
	})}
	addr := serve(t, srv)
	for _, tc := range []struct {
		req       string
		wantClose bool
		saysClose bool // the response says Connection: close
	}{
		{getPath("/keep"), false, false},
		{getPath("/close"), true, true},
		{getPath("/close-unsaid"), true, false},
		{getPath("/serve-close"), true, true},
		{"GET /keep HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", true, false},
		{"GET /keep HTTP/1.0\r\n\r\n", true, false},
		{"GET /keep HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", false, false},
	} {
		c := dial(t, addr)
		br := bufio.NewReader(c)
		resp, body := roundTrip(t, c, br, tc.req, "GET")
		if body != "ok" {
			t.Fatalf("%q: body %q", tc.req, body)
		}
		if said := resp.Close; said != tc.saysClose {
			t.Fatalf("%q: the response says Connection: close: %v, want %v", tc.req, said, tc.saysClose)
		}
		if !tc.wantClose {
			if _, body := roundTrip(t, c, br, getPath("/again"), "GET"); body != "ok" {
				t.Fatalf("%q, then another: body %q", tc.req, body)
			}
			continue
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if rest, err := io.ReadAll(br); err != nil || len(rest) > 0 {
			t.Fatalf("%q: after the response, read %q, %v; want the connection closed", tc.req, rest, err)
		}
	}
}

// failConn is a connection without a socket (so watched by a background
// read) whose writes fail once fail is set.
type failConn struct {
	net.Conn
	fail *atomic.Bool
}

func (c failConn) Write(p []byte) (int, error) {
	if c.fail.Load() {
		return 0, errors.New("injected write failure")
	}
	return c.Conn.Write(p)
}

type failListener struct {
	net.Listener
	fail *atomic.Bool
}

func (l failListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return failConn{c, l.fail}, nil
}

// closedState returns a ConnState hook and a channel closed when a
// connection of the server reaches StateClosed.
func closedState() (func(net.Conn, http.ConnState), chan struct{}) {
	closed := make(chan struct{})
	var once sync.Once
	return func(_ net.Conn, st http.ConnState) {
		if st == http.StateClosed {
			once.Do(func() { close(closed) })
		}
	}, closed
}

// waitChan fails the test unless ch is closed within 5 s.
func waitChan(t *testing.T, ch chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal(what)
	}
}

// writeUntilError writes 64 KiB pieces through x until a write fails, for
// at most 256 MiB, and returns the error.
func writeUntilError(x *Exchange) error {
	chunk := make([]byte, 64<<10)
	for range 1 << 12 {
		if _, err := x.Write(chunk); err != nil {
			return err
		}
		if err := x.Flush(); err != nil {
			return err
		}
	}
	return errors.New("256 MiB written to a client that reads nothing")
}

// TestExchangeWriteFailure: a failed write cancels the exchange's context,
// made before or after it, and the connection closes after the exchange.
func TestExchangeWriteFailure(t *testing.T) {
	for _, when := range []string{"context first", "context after"} {
		t.Run("injected/"+when, func(t *testing.T) {
			var fail atomic.Bool
			result := make(chan string, 1)
			srv := &Server{Handler: http.NotFoundHandler(), Exchanges: exchangeFunc(func(x *Exchange) bool {
				var ctx context.Context
				if when == "context first" {
					ctx = x.Context()
				}
				fail.Store(true)
				_, _ = x.WriteString(rawResponse("ok"))
				if err := x.Flush(); err == nil {
					result <- "Flush succeeded"
					return true
				}
				if ctx == nil {
					ctx = x.Context()
				}
				if !errors.Is(ctx.Err(), context.Canceled) {
					result <- fmt.Sprintf("after a failed write, the context's Err is %v", ctx.Err())
					return true
				}
				result <- ""
				return true
			})}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = srv.Serve(failListener{ln, &fail}) }()
			t.Cleanup(func() { _ = srv.Close() })
			c := dial(t, ln.Addr().String())
			_, _ = io.WriteString(c, get)
			if msg := <-result; msg != "" {
				t.Fatal(msg)
			}
			if out, _ := waitClosed(t, c, 5*time.Second); out != "" {
				t.Fatalf("read %q, want nothing and the connection closed", out)
			}
		})
	}
	t.Run("client reset", func(t *testing.T) {
		reset := make(chan struct{})
		result := make(chan string, 1)
		connState, closed := closedState()
		srv := &Server{
			Handler:   http.NotFoundHandler(),
			ConnState: connState,
			Exchanges: exchangeFunc(func(x *Exchange) bool {
				ctx := x.Context()
				<-reset
				if err := writeUntilError(x); isTimeout(err) {
					result <- fmt.Sprintf("write: %v", err)
					return true
				}
				select {
				case <-ctx.Done():
					result <- ""
				case <-time.After(5 * time.Second):
					result <- "context not cancelled after a failed write"
				}
				return true
			}),
		}
		c := dial(t, serve(t, srv))
		_, _ = io.WriteString(c, get)
		time.Sleep(20 * time.Millisecond)
		_ = c.(*net.TCPConn).SetLinger(0)
		_ = c.Close()
		time.Sleep(20 * time.Millisecond)
		close(reset)
		if msg := <-result; msg != "" {
			t.Fatal(msg)
		}
		waitChan(t, closed, "the connection was not closed")
	})
}

// TestExchangeClientGoneCancels: a hook waiting on its context sees it
// cancelled when the client goes away, with the kernel watch and with the
// background read.
func TestExchangeClientGoneCancels(t *testing.T) {
	for _, mode := range []string{"kernel", "background"} {
		for _, how := range []string{"close", "reset", "half-close"} {
			t.Run(mode+"/"+how, func(t *testing.T) {
				entered := make(chan struct{}, 1)
				result := make(chan error, 1)
				srv := &Server{Handler: http.NotFoundHandler(), Exchanges: exchangeFunc(func(x *Exchange) bool {
					ctx := x.Context()
					entered <- struct{}{}
					select {
					case <-ctx.Done():
						result <- ctx.Err()
					case <-time.After(10 * time.Second):
						result <- errors.New("not cancelled within 10 s")
					}
					return true
				})}
				addr := serve(t, srv)
				if mode == "background" {
					addr = servePlain(t, srv)
				}
				c := dial(t, addr)
				_, _ = io.WriteString(c, get)
				<-entered
				leave(c, how)
				if err := <-result; !errors.Is(err, context.Canceled) {
					t.Fatalf("the exchange's context: %v", err)
				}
			})
		}
	}
}

// TestExchangeAbort: Abort from another goroutine ends an exchange waiting
// on its context, one whose context is made afterwards, one blocked
// writing to a client that does not read, and one in Serve's handler;
// the connection closes. After the exchange, it does nothing.
func TestExchangeAbort(t *testing.T) {
	for _, mode := range []string{"waiting", "context after", "blocked write", "serve"} {
		t.Run(mode, func(t *testing.T) {
			xs := make(chan *Exchange, 1)
			aborted := make(chan struct{})
			result := make(chan string, 1)
			connState, closed := closedState()
			srv := &Server{Handler: http.NotFoundHandler(), ConnState: connState, Exchanges: exchangeFunc(func(x *Exchange) bool {
				switch mode {
				case "waiting":
					ctx := x.Context()
					xs <- x
					select {
					case <-ctx.Done():
						result <- ""
					case <-time.After(10 * time.Second):
						result <- "not cancelled within 10 s"
					}
				case "context after":
					xs <- x
					<-aborted
					if err := x.Context().Err(); !errors.Is(err, context.Canceled) {
						result <- fmt.Sprintf("context made after Abort: Err %v", err)
						return true
					}
					if err := x.SetWriteDeadlineWithin(time.Now().Add(time.Hour), time.Second); !errors.Is(err, context.DeadlineExceeded) && !isTimeout(err) {
						result <- fmt.Sprintf("SetWriteDeadlineWithin after Abort: %v", err)
						return true
					}
					result <- ""
				case "blocked write":
					xs <- x
					err := writeUntilError(x)
					if !isTimeout(err) {
						result <- fmt.Sprintf("write ended with %v, want a timeout", err)
						return true
					}
					result <- ""
				case "serve":
					x.Serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						xs <- x
						select {
						case <-r.Context().Done():
							result <- ""
						case <-time.After(10 * time.Second):
							result <- "the handler's context not cancelled within 10 s"
						}
					}))
				}
				return true
			})}
			c := dial(t, serve(t, srv))
			if mode == "blocked write" {
				_ = c.(*net.TCPConn).SetReadBuffer(4096)
			}
			_, _ = io.WriteString(c, get)
			x := <-xs
			if mode == "blocked write" {
				time.Sleep(100 * time.Millisecond) // the socket buffers fill
			}
			x.Abort()
			close(aborted)
			select {
			case msg := <-result:
				if msg != "" {
					t.Fatal(msg)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the exchange did not end within 10 s of Abort")
			}
			waitChan(t, closed, "the connection was not closed")
		})
	}
	// Aborted by the hook itself once its response went out: the
	// connection closes all the same, though nothing failed and the
	// server would set a new read deadline to wait for the next request.
	for _, mode := range []string{"raw", "serve"} {
		t.Run("self, after the response/"+mode, func(t *testing.T) {
			srv := &Server{IdleTimeout: 10 * time.Second, Handler: http.NotFoundHandler(), Exchanges: exchangeFunc(func(x *Exchange) bool {
				if mode == "raw" {
					_, _ = x.WriteString(rawResponse("ok"))
					_ = x.Flush()
				} else {
					x.Serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
				}
				x.Abort()
				return true
			})}
			c := dial(t, serve(t, srv))
			br := bufio.NewReader(c)
			if _, body := roundTrip(t, c, br, get, "GET"); body != "ok" {
				t.Fatalf("body %q", body)
			}
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if rest, err := io.ReadAll(br); err != nil || len(rest) > 0 {
				t.Fatalf("after the response, read %q, %v; want the connection closed", rest, err)
			}
		})
	}
	// Aborted before the request is served through a handler: the
	// deadlines the server sets for the handler do not undo Abort's.
	for _, mode := range []string{"serve", "decline"} {
		t.Run("before the handler/"+mode, func(t *testing.T) {
			const writeTimeout = 3 * time.Second
			result := make(chan string, 1)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				start := time.Now()
				chunk := make([]byte, 64<<10)
				for range 1 << 12 {
					if _, err := w.Write(chunk); err != nil {
						if d := time.Since(start); d > writeTimeout/2 {
							result <- fmt.Sprintf("the handler's write failed after %v (%v): Abort's deadline was undone", d, err)
						} else {
							result <- ""
						}
						return
					}
				}
				result <- "256 MiB written to a client that reads nothing"
			})
			srv := &Server{WriteTimeout: writeTimeout, Handler: h, Exchanges: exchangeFunc(func(x *Exchange) bool {
				x.Abort()
				// Longer than the slack within which the server keeps a
				// write deadline instead of setting it again.
				time.Sleep(slack(writeTimeout) + 100*time.Millisecond)
				if mode == "decline" {
					return false
				}
				x.Serve(nil)
				return true
			})}
			c := dial(t, serve(t, srv))
			_ = c.(*net.TCPConn).SetReadBuffer(4096)
			_, _ = io.WriteString(c, get)
			select {
			case msg := <-result:
				if msg != "" {
					t.Fatal(msg)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the handler's write did not end")
			}
		})
	}
	// Aborted with a write deadline left by the last request: the first
	// write, which clears a deadline left so, does not clear Abort's.
	t.Run("deadline left by the last request", func(t *testing.T) {
		result := make(chan error, 1)
		srv := &Server{Handler: http.NotFoundHandler(), Exchanges: exchangeFunc(func(x *Exchange) bool {
			if x.Head().URL.Path == "/renew" {
				_ = x.SetWriteDeadlineWithin(time.Now().Add(time.Hour), time.Minute)
				_, _ = x.WriteString(rawResponse("ok"))
				return true
			}
			x.Abort()
			result <- writeUntilError(x)
			return true
		})}
		c := dial(t, serve(t, srv))
		_ = c.(*net.TCPConn).SetReadBuffer(4096)
		roundTrip(t, c, bufio.NewReader(c), getPath("/renew"), "GET")
		_, _ = io.WriteString(c, get) // and never read
		select {
		case err := <-result:
			if !isTimeout(err) {
				t.Fatalf("write: %v, want a timeout", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a write after Abort did not fail")
		}
	})
	t.Run("after the exchange", func(t *testing.T) {
		xs := make(chan *Exchange, 4)
		srv := &Server{Handler: http.NotFoundHandler(), Exchanges: exchangeFunc(func(x *Exchange) bool {
			xs <- x
			_, _ = x.WriteString(rawResponse("ok"))
			return true
		})}
		c := dial(t, serve(t, srv))
		br := bufio.NewReader(c)
		roundTrip(t, c, br, get, "GET")
		(<-xs).Abort() // too late: does nothing
		if _, body := roundTrip(t, c, br, get, "GET"); body != "ok" {
			t.Fatalf("the next request got %q", body)
		}
	})
}

// TestExchangeServe: Serve gives the handler the request Head shows, with
// the exchange's context, the ResponseWriter's Hijack, and cancels the
// context after; Serve after Write panics and closes the connection.
func TestExchangeServe(t *testing.T) {
	var logs logtest.Buffer
	result := make(chan string, 1)
	srv := &Server{
		Logger:  slog.New(slog.NewTextHandler(&logs, nil)),
		Handler: http.NotFoundHandler(),
		Exchanges: exchangeFunc(func(x *Exchange) bool {
			head := headSeen(x.Head())
			remote := x.Head().RemoteAddr
			switch x.Head().URL.Path {
			case "/write-then-serve":
				_, _ = x.WriteString("HTTP/1.1 200 OK\r\n")
				x.Serve(nil) // panics
			case "/hijack":
				x.Serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					conn, bw, err := http.NewResponseController(w).Hijack()
					if err != nil {
						result <- err.Error()
						return
					}
					defer conn.Close()
					_, _ = bw.WriteString("hijacked")
					_ = bw.Flush()
					result <- ""
				}))
				return true
			}
			ctx := x.Context()
			var errs []string
			x.Serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Context() != ctx {
					errs = append(errs, "the handler's context is not the exchange's")
				}
				if ctx.Err() != nil {
					errs = append(errs, "context cancelled in the handler")
				}
				if got := headSeen(r); got.String() != head.String() {
					errs = append(errs, fmt.Sprintf("the handler got %s, Head showed %s", got, head))
				}
				if r.RemoteAddr != remote || r.RemoteAddr == "" {
					errs = append(errs, fmt.Sprintf("RemoteAddr %q, Head's %q", r.RemoteAddr, remote))
				}
				w.Header().Set("X-Served", "yes")
				_, _ = io.WriteString(w, "served "+r.URL.Path)
			}))
			if !errors.Is(ctx.Err(), context.Canceled) {
				errs = append(errs, "context not cancelled after Serve")
			}
			result <- strings.Join(errs, "; ")
			return true
		}),
	}
	addr := serve(t, srv)
	c := dial(t, addr)
	br := bufio.NewReader(c)
	for i := range 3 {
		resp, body := roundTrip(t, c, br, "GET /s?i=1 HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n\r\n", "GET")
		if body != "served /s" || resp.Header.Get("X-Served") != "yes" || resp.Close {
			t.Fatalf("request %d: %q, header %v, close %v", i, body, resp.Header, resp.Close)
		}
		if msg := <-result; msg != "" {
			t.Fatal(msg)
		}
	}
	if _, err := io.WriteString(c, getPath("/hijack")); err != nil {
		t.Fatal(err)
	}
	if out, _ := waitClosed(t, c, 5*time.Second); out != "hijacked" {
		t.Fatalf("hijacked connection: read %q", out)
	}
	if msg := <-result; msg != "" {
		t.Fatal(msg)
	}

	c = dial(t, addr)
	_, _ = io.WriteString(c, getPath("/write-then-serve"))
	if out, _ := waitClosed(t, c, 5*time.Second); out != "HTTP/1.1 200 OK\r\n" {
		t.Fatalf("Serve after Write: read %q, want what was written and the connection closed", out)
	}
	c = dial(t, addr)
	if _, body := roundTrip(t, c, bufio.NewReader(c), getPath("/s"), "GET"); body != "served /s" {
		t.Fatalf("after the panic: %q", body)
	}
	<-result
	if !strings.Contains(logs.String(), "Serve called after Write") {
		t.Fatalf("the panic was not logged:\n%s", logs.String())
	}
}

// TestExchangeMisuse: a hook that writes and declines, or declines after
// Serve, is logged and its connection closed; the server serves on.
func TestExchangeMisuse(t *testing.T) {
	var logs logtest.Buffer
	srv := &Server{
		Logger:  slog.New(slog.NewTextHandler(&logs, nil)),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "handler") }),
		Exchanges: exchangeFunc(func(x *Exchange) bool {
			switch x.Head().URL.Path {
			case "/write-decline":
				_, _ = x.WriteString("HTTP/1.1 200 OK\r\n")
			case "/serve-decline":
				x.Serve(nil)
			}
			return false
		}),
	}
	addr := serve(t, srv)
	for _, tc := range []struct{ path, out, log string }{
		{"/write-decline", "HTTP/1.1 200 OK\r\n", "declined a request after writing"},
		{"/serve-decline", "handler", "returned false after Serve"},
	} {
		c := dial(t, addr)
		_, _ = io.WriteString(c, getPath(tc.path))
		out, _ := waitClosed(t, c, 5*time.Second)
		if !strings.HasPrefix(out, tc.out) && !strings.HasSuffix(out, tc.out) {
			t.Errorf("%s: read %q", tc.path, out)
		}
		l := logs.String()
		if !strings.Contains(l, tc.log) || !strings.Contains(l, "level=ERROR") {
			t.Errorf("%s: not logged at ERROR:\n%s", tc.path, l)
		}
	}
	c := dial(t, addr)
	if _, body := roundTrip(t, c, bufio.NewReader(c), get, "GET"); body != "handler" {
		t.Fatalf("afterwards: %q", body)
	}
}

// TestExchangePanic: a panic in ServeExchange closes the connection,
// cancels the exchange's context, is logged (http.ErrAbortHandler is not),
// and the server serves on; nothing is left running once it is closed.
func TestExchangePanic(t *testing.T) {
	base := goroutineBase(t)
	var logs logtest.Buffer
	// Each panicking exchange sends a channel that its context closes
	// when cancelled (context.AfterFunc: looking at the context with Done
	// or Err once the connection is gone would start the watch's
	// background read, which cancels it too).
	ctxs := make(chan chan struct{}, 4)
	cancelled := func(ctx context.Context) chan struct{} {
		ch := make(chan struct{})
		context.AfterFunc(ctx, func() { close(ch) })
		return ch
	}
	entered := make(chan struct{}, 4)
	srv := &Server{
		Logger:  slog.New(slog.NewTextHandler(&logs, nil)),
		Handler: http.NotFoundHandler(),
		Exchanges: exchangeFunc(func(x *Exchange) bool {
			switch x.Head().URL.Path {
			case "/panic":
				ctxs <- cancelled(x.Context())
				panic("boom")
			case "/abort":
				ctxs <- cancelled(x.Context())
				panic(http.ErrAbortHandler)
			case "/serve-panic":
				x.Serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					ctxs <- cancelled(r.Context())
					panic("boom in Serve")
				}))
			case "/wait":
				entered <- struct{}{}
				<-x.Context().Done()
			}
			_, _ = x.WriteString(rawResponse("ok"))
			return true
		}),
	}
	addr := serve(t, srv)
	for _, p := range []string{"/panic", "/abort", "/serve-panic"} {
		c := dial(t, addr)
		_, _ = io.WriteString(c, getPath(p))
		if out, _ := waitClosed(t, c, 5*time.Second); out != "" {
			t.Errorf("%s: answered %q, want the connection closed", p, out)
		}
		select {
		case <-<-ctxs:
		case <-time.After(5 * time.Second):
			t.Errorf("%s: the exchange's context was not cancelled", p)
		}
	}
	c := dial(t, addr)
	if _, body := roundTrip(t, c, bufio.NewReader(c), get, "GET"); body != "ok" {
		t.Fatalf("after the panics: %q", body)
	}
	busy := dial(t, addr)
	_, _ = io.WriteString(busy, getPath("/wait"))
	<-entered
	if n := strings.Count(logs.String(), "panic serving"); n != 2 {
		t.Errorf("%d panic lines logged, want 2 (ErrAbortHandler is not logged):\n%s", n, logs.String())
	}
	_ = srv.Close()
	_ = c.Close()
	_ = busy.Close()
	waitGoroutines(t, base)
}

// TestExchangeShutdown: Shutdown waits for an exchange as for a handler;
// Close cancels its context, made before or after Close, and closes the
// connection.
func TestExchangeShutdown(t *testing.T) {
	t.Run("waiting on the context", func(t *testing.T) {
		entered := make(chan context.Context, 1)
		done := make(chan struct{})
		srv := &Server{Handler: http.NotFoundHandler(), Exchanges: exchangeFunc(func(x *Exchange) bool {
			ctx := x.Context()
			entered <- ctx
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
			}
			close(done)
			return true
		})}
		c := dial(t, serve(t, srv))
		_, _ = io.WriteString(c, get)
		ctx := <-entered
		sctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if err := srv.Shutdown(sctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Shutdown: %v, want DeadlineExceeded with an exchange running", err)
		}
		if ctx.Err() != nil {
			t.Fatal("Shutdown cancelled the exchange's context")
		}
		_ = srv.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("Close did not cancel the exchange's context")
		}
		if ctx.Err() == nil {
			t.Fatal("the exchange ended before its context was cancelled")
		}
		waitClosed(t, c, 5*time.Second)
	})
	t.Run("context made after Close", func(t *testing.T) {
		entered := make(chan struct{}, 1)
		release := make(chan struct{})
		result := make(chan string, 1)
		srv := &Server{Handler: http.NotFoundHandler(), Exchanges: exchangeFunc(func(x *Exchange) bool {
			if x.Head().URL.Path == "/first" {
				_ = x.Context() // arms the watch: the connection is in it from now on
				_, _ = x.WriteString(rawResponse("ok"))
				return true
			}
			entered <- struct{}{}
			<-release
			select {
			case <-x.Context().Done():
				result <- ""
			case <-time.After(5 * time.Second):
				result <- "a context made after Close is not cancelled"
			}
			return true
		})}
		c := dial(t, serve(t, srv))
		roundTrip(t, c, bufio.NewReader(c), getPath("/first"), "GET")
		_, _ = io.WriteString(c, getPath("/second"))
		<-entered
		_ = srv.Close()
		close(release)
		if msg := <-result; msg != "" {
			t.Fatal(msg)
		}
		waitClosed(t, c, 5*time.Second)
	})
}

// TestExchangeBaseContext: the exchange's context carries the base
// context's values and the local address, is cancelled when the base
// context ends, and starts cancelled after that.
func TestExchangeBaseContext(t *testing.T) {
	type key struct{}
	base, cancelBase := context.WithCancel(context.WithValue(context.Background(), key{}, "base"))
	defer cancelBase()
	entered := make(chan struct{}, 1)
	result := make(chan string, 1)
	srv := &Server{
		BaseContext: func(net.Listener) context.Context { return base },
		Handler:     http.NotFoundHandler(),
		Exchanges: exchangeFunc(func(x *Exchange) bool {
			ctx := x.Context()
			var errs []string
			if ctx.Value(key{}) != "base" {
				errs = append(errs, "base value missing")
			}
			if la, ok := ctx.Value(http.LocalAddrContextKey).(net.Addr); !ok || la.String() == "" {
				errs = append(errs, "no local address")
			}
			switch x.Head().URL.Path {
			case "/base":
				if ctx.Err() != nil {
					errs = append(errs, "cancelled at start")
				}
				entered <- struct{}{}
				select {
				case <-ctx.Done():
				case <-time.After(5 * time.Second):
					errs = append(errs, "not cancelled when the base context ended")
				}
			case "/after":
				if ctx.Err() == nil {
					errs = append(errs, "not cancelled at start, after the base context ended")
				}
			}
			result <- strings.Join(errs, "; ")
			_, _ = x.WriteString(rawResponse("ok"))
			return true
		}),
	}
	c := dial(t, serve(t, srv))
	br := bufio.NewReader(c)
	_, _ = io.WriteString(c, getPath("/base"))
	<-entered
	cancelBase()
	if msg := <-result; msg != "" {
		t.Fatal(msg)
	}
	readResponse(t, br, "GET")
	roundTrip(t, c, br, getPath("/after"), "GET")
	if msg := <-result; msg != "" {
		t.Fatal(msg)
	}
}

// TestExchangeWriteDeadlines: SetWriteDeadlineWithin and WriteTimeout end
// a raw response to a client that does not read, no earlier than asked;
// a deadline set with a slack for every exchange is set once, and cleared
// once an exchange no longer renews it.
func TestExchangeWriteDeadlines(t *testing.T) {
	for _, how := range []string{"within", "WriteTimeout"} {
		t.Run(how, func(t *testing.T) {
			const after = 200 * time.Millisecond
			result := make(chan error, 1)
			connState, closed := closedState()
			srv := &Server{Handler: http.NotFoundHandler(), ConnState: connState, Exchanges: exchangeFunc(func(x *Exchange) bool {
				if how == "within" {
					_ = x.SetWriteDeadlineWithin(time.Now().Add(after), 50*time.Millisecond)
				}
				result <- writeUntilError(x)
				return true
			})}
			if how == "WriteTimeout" {
				srv.WriteTimeout = after
			}
			c := dial(t, serve(t, srv))
			_ = c.(*net.TCPConn).SetReadBuffer(4096)
			start := time.Now()
			_, _ = io.WriteString(c, get) // and never read
			select {
			case err := <-result:
				if !isTimeout(err) {
					t.Fatalf("write: %v, want a timeout", err)
				}
				if d := time.Since(start); d < after {
					t.Fatalf("write failed after %v, before the deadline (%v)", d, after)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the write did not time out")
			}
			waitChan(t, closed, "the connection was not closed")
		})
	}
	t.Run("kept across exchanges", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		cl := &deadlineCountingListener{Listener: ln}
		srv := &Server{Handler: http.NotFoundHandler(), Exchanges: exchangeFunc(func(x *Exchange) bool {
			if x.Head().URL.Path == "/renew" {
				if err := x.SetWriteDeadlineWithin(time.Now().Add(time.Hour), time.Minute); err != nil {
					t.Errorf("SetWriteDeadlineWithin: %v", err)
				}
			}
			_, _ = x.WriteString(rawResponse("ok"))
			return true
		})}
		go func() { _ = srv.Serve(cl) }()
		t.Cleanup(func() { _ = srv.Close() })
		c := dial(t, ln.Addr().String())
		br := bufio.NewReader(c)
		for range 20 {
			roundTrip(t, c, br, getPath("/renew"), "GET")
		}
		if sets, clears := cl.counts(); sets != 1 || clears != 0 {
			t.Fatalf("20 exchanges renewing a deadline: %d set, %d cleared; want 1 set, none cleared", sets, clears)
		}
		roundTrip(t, c, br, getPath("/not"), "GET")
		if sets, clears := cl.counts(); sets != 1 || clears != 1 {
			t.Fatalf("an exchange not renewing it: %d set, %d cleared; want it cleared before its response", sets, clears)
		}
	})
}

// exchangeBenchHook answers every request with what benchHandler's
// response is on the normal path, byte for byte, written raw.
type exchangeBenchHook struct {
	withContext bool
	date        []byte
}

func (h *exchangeBenchHook) ServeExchange(x *Exchange) bool {
	if h.withContext {
		_ = x.Context()
	}
	h.date = appendDate(h.date[:0])
	_, _ = x.WriteString("HTTP/1.1 200 OK\r\nDate: ")
	_, _ = x.Write(h.date)
	_, _ = x.WriteString("\r\nContent-Length: 13\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nhello, world\n")
	return true
}

// TestExchangeAllocations: a keep-alive request served raw costs no
// allocation, one more with its context; the normal path's two are given
// for scale. And the raw bytes are the handler's.
func TestExchangeAllocations(t *testing.T) {
	req := "GET /some/path?q=1 HTTP/1.1\r\nHost: example.com\r\nUser-Agent: bench/1.0\r\nAccept: */*\r\n\r\n"
	run := func(srv *Server) func(in []byte) {
		return func(in []byte) { _ = srv.ServeConn(sinkConn{newMemConn(in, 0)}) }
	}
	normal := perRequestAllocs(run(&Server{Handler: benchHandler}), req)
	raw := perRequestAllocs(run(&Server{Handler: benchHandler, Exchanges: &exchangeBenchHook{}}), req)
	withCtx := perRequestAllocs(run(&Server{Handler: benchHandler, Exchanges: &exchangeBenchHook{withContext: true}}), req)
	t.Logf("allocations per keep-alive request: raw %.2f, raw with context %.2f, handler %.2f", raw, withCtx, normal)
	if raw > 0.05 || withCtx > 1.05 || raw > normal {
		t.Fatalf("raw %.2f, with context %.2f allocations per request; want 0 and 1", raw, withCtx)
	}
	var outs []string
	for _, h := range []ExchangeHandler{nil, &exchangeBenchHook{}} {
		ours := &ourServer{srv: &Server{Handler: benchHandler, Exchanges: h}, rec: &recorder{}}
		outs = append(outs, ours.serve([]byte(req+req), 0).output)
	}
	if outs[0] != outs[1] {
		t.Fatalf("handler's bytes %q, the hook's %q", outs[0], outs[1])
	}
}

// BenchmarkExchange compares a tiny response served raw by an exchange
// hook (with and without making its context) with the same bytes from a
// handler on the normal path, over one loopback keep-alive connection,
// client and server in this process (allocations are both's: the
// client's is one, the []byte of its request), and on an in-memory
// connection (the server's work alone).
func BenchmarkExchange(b *testing.B) {
	kinds := []struct {
		name string
		hook ExchangeHandler
	}{
		{"handler", nil},
		{"exchange", &exchangeBenchHook{}},
		{"exchange+context", &exchangeBenchHook{withContext: true}},
	}
	for _, k := range kinds {
		b.Run("loopback/"+k.name, func(b *testing.B) {
			srv := &Server{Handler: benchHandler, Exchanges: k.hook, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 60 * time.Second}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			go func() { _ = srv.Serve(ln) }()
			defer srv.Close()
			nc, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			c := benchclient.NewConn(nc, benchRequest)
			defer c.Close()
			for range 100 {
				if err := c.Do(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if err := c.Do(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	for _, k := range kinds {
		b.Run("inprocess/"+k.name, func(b *testing.B) {
			in := bytes.Repeat([]byte(benchRequest), 1000)
			srv := &Server{Handler: benchHandler, Exchanges: k.hook, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 60 * time.Second}
			b.ReportAllocs()
			b.SetBytes(int64(len(benchRequest)))
			for i := 0; i < b.N; i += 1000 {
				_ = srv.ServeConn(sinkConn{newMemConn(in[:len(benchRequest)*min(1000, b.N-i)], 0)})
			}
		})
	}
}

// TestExchangeInformationalAndHead checks the pieces an exchange handler
// writes a response with: WriteInformational sends a 1xx as a handler's
// WriteHeader sends it, byte for byte, and leaves Serve possible;
// AppendStatusLine and AppendDate write what the server writes; Closing
// says when the response should say Connection: close.
func TestExchangeInformationalAndHead(t *testing.T) {
	hints := http.Header{"Link": {"</a.css>; rel=preload"}, "X-B": {"2"}, "Content-Length": {"9"}}
	var closing []bool
	srv := &Server{Exchanges: exchangeFunc(func(x *Exchange) bool {
		switch x.Head().URL.Path {
		case "/raw":
			if err := x.WriteInformational(http.StatusEarlyHints, hints); err != nil {
				t.Error(err)
			}
			if x.WriteInformational(http.StatusSwitchingProtocols, nil) == nil || x.WriteInformational(200, nil) == nil {
				t.Error("WriteInformational took a status that is not informational")
			}
			closing = append(closing, x.Closing())
			x.CloseAfter()
			closing = append(closing, x.Closing())
			x.Serve(nil) // still possible after a 1xx
			return true
		}
		return false
	}), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/handler" {
			for k, v := range hints {
				w.Header()[k] = v
			}
			w.WriteHeader(http.StatusEarlyHints)
			clear(w.Header())
		}
		_, _ = io.WriteString(w, "ok")
	})}
	addr := serve(t, srv)
	read := func(path string) string {
		c := dial(t, addr)
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, getPath(path)); err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(c) // both close: Connection: close asked, or CloseAfter
		return string(b)
	}
	raw := read("/raw")
	// Declined, so the handler answers; asked to close, so that ReadAll ends.
	c := dial(t, addr)
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.WriteString(c, "GET /handler HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	handler, _ := io.ReadAll(c)
	informational := func(s string) string {
		i := strings.Index(s, "\r\n\r\n")
		if i < 0 {
			return s
		}
		return s[:i+4]
	}
	if got, want := informational(raw), informational(string(handler)); got != want {
		t.Errorf("WriteInformational wrote\n%q\nwhere a handler's WriteHeader writes\n%q", got, want)
	}
	if !strings.Contains(raw, "\r\n\r\nHTTP/1.1 200 OK\r\n") || !strings.HasSuffix(raw, "ok") {
		t.Errorf("no final response after the 1xx: %q", raw)
	}
	if len(closing) != 2 || closing[0] || !closing[1] {
		t.Errorf("Closing before and after CloseAfter: %v, want [false true]", closing)
	}

	for code, want := range map[int]string{200: "HTTP/1.1 200 OK\r\n", 299: "HTTP/1.1 299 status code 299\r\n", 999: "HTTP/1.1 999 status code 999\r\n"} {
		if got := string(AppendStatusLine([]byte("x"), code)); got != "x"+want {
			t.Errorf("AppendStatusLine(%d) = %q, want %q", code, got, "x"+want)
		}
	}
	if d, err := http.ParseTime(string(AppendDate(nil, time.Now()))); err != nil || time.Since(d) > time.Minute || time.Since(d) < -time.Minute {
		t.Errorf("AppendDate: %v, %v", d, err)
	}
	// The time given, not the clock's: a second of another day, in
	// another zone, and the same second again, which the cache returns.
	at := time.Date(2024, 2, 29, 23, 59, 58, 900e6, time.FixedZone("X", -5*3600))
	for range 2 {
		if got, want := string(AppendDate([]byte("x"), at)), "xFri, 01 Mar 2024 04:59:58 GMT"; got != want {
			t.Errorf("AppendDate(%v) = %q, want %q", at, got, want)
		}
	}
}
