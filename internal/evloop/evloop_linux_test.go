//go:build linux

package evloop

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
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/waitfor"
)

// testTimeout bounds every wait of the tests: conns' deadlines, channel
// receives and polls.
const testTimeout = 5 * time.Second

// ---------------------------------------------------------------------------
// Helpers: waiting.

// recv receives from ch, failing the test after testTimeout.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(testTimeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// ---------------------------------------------------------------------------
// Helpers: HTTP bytes.

// get is a GET request head.
func get(path string) string {
	return "GET " + path + " HTTP/1.1\r\nHost: backend.test\r\nUser-Agent: evloop-test\r\n\r\n"
}

// okAnswer is a 200 answer framed by Content-Length.
func okAnswer(body string) string {
	return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}

// echoBody is what echoServe answers to the n-th request of its idx-th
// connection.
func echoBody(idx, n int, path string) string {
	return fmt.Sprintf("conn=%d req=%d path=%s", idx, n, path)
}

// readHead reads a request head, line by line, as its bytes came.
func readHead(br *bufio.Reader) ([]byte, error) {
	var head []byte
	for {
		line, err := br.ReadBytes('\n')
		head = append(head, line...)
		if err != nil {
			return head, err
		}
		if string(line) == "\r\n" || string(line) == "\n" {
			return head, nil
		}
	}
}

// requestPath returns the target of a request head.
func requestPath(head []byte) string {
	f := strings.Fields(string(head))
	if len(f) < 2 {
		return ""
	}
	return f[1]
}

func write(t *testing.T, c net.Conn, s string) {
	t.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// readAnswer reads one answer from the client's side.
func readAnswer(t *testing.T, br *bufio.Reader) (int, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading an answer: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("reading an answer's body: %v", err)
	}
	return resp.StatusCode, string(body)
}

// expectClosed reads r, which must end (EOF or a reset) within d with
// no more bytes; it returns how long that took.
func expectClosed(t *testing.T, c net.Conn, r io.Reader, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(d))
	var buf [512]byte
	n, err := r.Read(buf[:])
	if n > 0 {
		t.Fatalf("unexpected bytes before the end: %q", buf[:n])
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the connection was not closed within %v", d)
	}
	if err == nil || !(errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) {
		t.Fatalf("read: got %v, want EOF or a reset", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(testTimeout))
	return time.Since(start)
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().(*net.TCPAddr).AddrPort()
	ln.Close()
	return addr
}

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.DialTimeout("tcp", ln.Addr().String(), testTimeout)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	_ = c.SetDeadline(time.Now().Add(testTimeout))
	_ = s.SetDeadline(time.Now().Add(testTimeout))
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// noWorkerLeft checks that no event loop's goroutine runs any more.
func noWorkerLeft(t *testing.T) {
	t.Helper()
	buf := make([]byte, 1<<20)
	var n int
	if !waitfor.Until(testTimeout, func() bool {
		n = runtime.Stack(buf, true)
		return !bytes.Contains(buf[:n], []byte("evloop.(*worker).run"))
	}) {
		t.Fatalf("an event loop still runs:\n%s", buf[:n])
	}
}

// ---------------------------------------------------------------------------
// The test backend.

type backend struct {
	ln      net.Listener
	addr    netip.AddrPort
	serve   func(be *backend, c net.Conn, br *bufio.Reader, idx int)
	accepts atomic.Int32

	mu     sync.Mutex
	closed bool
	conns  []net.Conn
	heads  []string
	wg     sync.WaitGroup
}

// newBackend listens on loopback and serves each connection it accepts
// with serve (echoServe when nil), on a goroutine; idx counts from 1.
func newBackend(t *testing.T, serve func(be *backend, c net.Conn, br *bufio.Reader, idx int)) *backend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if serve == nil {
		serve = echoServe
	}
	be := &backend{ln: ln, addr: ln.Addr().(*net.TCPAddr).AddrPort(), serve: serve}
	be.wg.Add(1)
	go be.acceptLoop()
	t.Cleanup(be.close)
	return be
}

func (be *backend) acceptLoop() {
	defer be.wg.Done()
	for {
		c, err := be.ln.Accept()
		if err != nil {
			return
		}
		idx := int(be.accepts.Add(1))
		be.mu.Lock()
		if be.closed {
			be.mu.Unlock()
			c.Close()
			return
		}
		be.conns = append(be.conns, c)
		be.wg.Add(1)
		be.mu.Unlock()
		_ = c.SetDeadline(time.Now().Add(testTimeout))
		go func() {
			defer be.wg.Done()
			defer c.Close()
			be.serve(be, c, bufio.NewReader(c), idx)
		}()
	}
}

func (be *backend) close() {
	be.ln.Close()
	be.mu.Lock()
	be.closed = true
	for _, c := range be.conns {
		c.Close()
	}
	be.mu.Unlock()
	be.wg.Wait()
}

func (be *backend) record(head []byte) {
	be.mu.Lock()
	be.heads = append(be.heads, string(head))
	be.mu.Unlock()
}

func (be *backend) recorded() []string {
	be.mu.Lock()
	defer be.mu.Unlock()
	return append([]string(nil), be.heads...)
}

// echoServe answers each request with echoBody, keeping the connection.
func echoServe(be *backend, c net.Conn, br *bufio.Reader, idx int) {
	for n := 1; ; n++ {
		head, err := readHead(br)
		if err != nil {
			return
		}
		be.record(head)
		if _, err := io.WriteString(c, okAnswer(echoBody(idx, n, requestPath(head)))); err != nil {
			return
		}
	}
}

// ---------------------------------------------------------------------------
// The test Handler and Exchange.

type testHandler struct {
	backend     netip.AddrPort
	headTimeout time.Duration
	aliasReply  bool          // Reply returns the answer's own bytes, not a copy
	retryAlways bool          // Answer says Retry for every 408, reused or not
	writeBy     time.Duration // Reply's WriteBy, from now; zero: none
	onBegin     func(c *Conn)
	onRefused   func(addr netip.AddrPort) (netip.AddrPort, bool)
	onHandBack  func(c net.Conn)
	onResume    func(client, up net.Conn, cause error)
	panicIn     string // "begin", "answer" or "reply": that method panics for a request of /boom

	mu         sync.Mutex
	begins     int
	handBacks  int
	left       map[*Conn]int
	dones      []error
	resumes    []error
	refused    []netip.AddrPort
	reused     []bool
	violations []string

	replyShuttingDown []bool // Conn.ShuttingDown in each Reply
}

type stats struct {
	begins, handBacks, lefts int
	dones, resumes           []error
	refused                  []netip.AddrPort
	reused                   []bool
}

func (h *testHandler) stats() stats {
	h.mu.Lock()
	defer h.mu.Unlock()
	return stats{
		begins: h.begins, handBacks: h.handBacks, lefts: len(h.left),
		dones:   append([]error(nil), h.dones...),
		resumes: append([]error(nil), h.resumes...),
		refused: append([]netip.AddrPort(nil), h.refused...),
		reused:  append([]bool(nil), h.reused...),
	}
}

func (h *testHandler) violate(format string, args ...any) {
	h.violations = append(h.violations, fmt.Sprintf(format, args...))
}

func (h *testHandler) Begin(c *Conn, head []byte) Exchange {
	h.mu.Lock()
	h.begins++
	if h.left[c] > 0 {
		h.violate("Begin on a connection that left")
	}
	if headEnd(head) != len(head) {
		h.violate("Begin with %q, not one whole head", head)
	}
	h.mu.Unlock()
	if h.onBegin != nil {
		h.onBegin(c)
	}
	if h.panicIn == "begin" && bytes.HasPrefix(head, []byte("GET /boom ")) {
		panic("test: panic in begin")
	}
	if !bytes.HasPrefix(head, []byte("GET ")) {
		return nil
	}
	return &testExchange{
		h: h, c: c, head: bytes.Clone(head),
		closeReq: bytes.Contains(bytes.ToLower(head), []byte("\nconnection: close")),
	}
}

func (h *testHandler) HandBack(c net.Conn) {
	h.mu.Lock()
	h.handBacks++
	hook := h.onHandBack
	h.mu.Unlock()
	if hook != nil {
		hook(c)
		return
	}
	c.Close()
}

func (h *testHandler) Left(c *Conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.left == nil {
		h.left = map[*Conn]int{}
	}
	h.left[c]++
	if h.left[c] > 1 {
		h.violate("Left called %d times", h.left[c])
	}
}

type testExchange struct {
	h         *testHandler
	c         *Conn
	head      []byte
	closeReq  bool
	respClose bool
	sawHead   bool
	ended     int
}

func (x *testExchange) Upstream() (netip.AddrPort, []byte) { return x.h.backend, x.head }

func (x *testExchange) Refused(addr netip.AddrPort) (netip.AddrPort, bool) {
	x.h.mu.Lock()
	x.h.refused = append(x.h.refused, addr)
	x.h.mu.Unlock()
	if x.h.onRefused != nil {
		return x.h.onRefused(addr)
	}
	return netip.AddrPort{}, false
}

func (x *testExchange) HeadTimeout() time.Duration { return x.h.headTimeout }

func (x *testExchange) Answer(b []byte, reused bool) (Verdict, int) {
	x.mayPanic("answer")
	i := bytes.Index(b, []byte("\r\n\r\n"))
	if i < 0 {
		return More, 0
	}
	if !x.sawHead {
		x.sawHead = true
		x.h.mu.Lock()
		x.h.reused = append(x.h.reused, reused)
		x.h.mu.Unlock()
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(b[:i+4])), nil)
	if err != nil {
		return Resume, 0
	}
	if resp.StatusCode == http.StatusRequestTimeout && (reused || x.h.retryAlways) {
		x.sawHead = false
		return Retry, 0
	}
	if len(resp.TransferEncoding) > 0 || resp.ContentLength < 0 {
		return Resume, 0
	}
	total := i + 4 + int(resp.ContentLength)
	if len(b) < total {
		return More, 0
	}
	x.respClose = resp.Close
	return Whole, total
}

func (x *testExchange) Reply(answer []byte) Reply {
	x.mayPanic("reply")
	out := answer
	if !x.h.aliasReply {
		out = bytes.Clone(answer)
	}
	x.h.mu.Lock()
	x.h.replyShuttingDown = append(x.h.replyShuttingDown, x.c.ShuttingDown())
	x.h.mu.Unlock()
	r := Reply{Out: out, Close: x.closeReq, KeepUpstream: !x.respClose}
	if x.h.writeBy > 0 {
		r.WriteBy = time.Now().Add(x.h.writeBy)
	}
	return r
}

// mayPanic panics in the method where when the handler says so, for a
// request of /boom.
func (x *testExchange) mayPanic(where string) {
	if x.h.panicIn == where && bytes.HasPrefix(x.head, []byte("GET /boom ")) {
		panic("test: panic in " + where)
	}
}

func (x *testExchange) end(how string) {
	x.ended++
	if x.ended > 1 {
		x.h.violate("exchange ended twice (last by %s)", how)
	}
}

func (x *testExchange) Done(err error) {
	x.h.mu.Lock()
	x.h.dones = append(x.h.dones, err)
	x.end("Done")
	if x.h.left[x.c] > 0 {
		x.h.violate("Done after Left")
	}
	x.h.mu.Unlock()
}

func (x *testExchange) Resume(client, up net.Conn, cause error) {
	x.h.mu.Lock()
	x.h.resumes = append(x.h.resumes, cause)
	x.end("Resume")
	if x.h.left[x.c] == 0 {
		x.h.violate("Resume before Left")
	}
	x.h.mu.Unlock()
	if x.h.onResume != nil {
		x.h.onResume(client, up, cause)
		return
	}
	client.Close()
	if up != nil {
		up.Close()
	}
}

// resumeCall is what captureResume saw of a Resume.
type resumeCall struct {
	cause      error
	up         bool
	clientHead []byte
	clientErr  error
	upBytes    []byte
	upErr      error
	at         time.Time
}

// captureResume has Resume read clientWant bytes from the client and
// upWant from up (when upWant is 0, one read whose error it keeps; when
// negative, none), write reply to the client and close both.
func captureResume(h *testHandler, clientWant, upWant int, reply string) <-chan resumeCall {
	ch := make(chan resumeCall, 4)
	h.onResume = func(client, up net.Conn, cause error) {
		rc := resumeCall{cause: cause, up: up != nil, at: time.Now()}
		_ = client.SetDeadline(time.Now().Add(testTimeout))
		rc.clientHead = make([]byte, clientWant)
		_, rc.clientErr = io.ReadFull(client, rc.clientHead)
		if up != nil {
			_ = up.SetDeadline(time.Now().Add(testTimeout))
			switch {
			case upWant > 0:
				rc.upBytes = make([]byte, upWant)
				_, rc.upErr = io.ReadFull(up, rc.upBytes)
			case upWant == 0:
				var b [1]byte
				_, rc.upErr = up.Read(b[:])
			}
			up.Close()
		}
		_, _ = io.WriteString(client, reply)
		client.Close()
		ch <- rc
	}
	return ch
}

// ---------------------------------------------------------------------------
// The rig: a server fed by a front listener.

type rig struct {
	srv    *Server
	h      *testHandler
	addr   string
	counts *Counts
}

// newRig starts a Server with h and a front listener whose accepted
// connections go to Serve (through tune first, when not nil). Cleanup
// closes both and checks that the loops stopped and h saw nothing amiss.
func newRig(t *testing.T, cfg Config, h *testHandler, tune func(*net.TCPConn)) *rig {
	t.Helper()
	return newRigServing(t, cfg, h, func(srv *Server, c net.Conn) {
		if tune != nil {
			tune(c.(*net.TCPConn))
		}
		if !srv.Serve(c) {
			c.Close()
		}
	})
}

// newRigServing is newRig with serve giving each accepted connection to
// the Server, on the accepting goroutine.
func newRigServing(t *testing.T, cfg Config, h *testHandler, serve func(srv *Server, c net.Conn)) *rig {
	t.Helper()
	cfg.Handler = h
	if cfg.Workers == 0 {
		cfg.Workers = 2
	}
	if cfg.Counts == nil {
		cfg.Counts = new(Counts)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		srv.Close()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			serve(srv, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		srv.Close()
		noWorkerLeft(t)
		if n := cfg.Counts.Idle.Load(); n != 0 {
			t.Errorf("after Close: Counts.Idle = %d, want 0", n)
		}
		if n := srv.Conns(); n != 0 {
			t.Errorf("after Close: Conns() = %d, want 0", n)
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, v := range h.violations {
			t.Errorf("handler contract: %s", v)
		}
	})
	return &rig{srv: srv, h: h, addr: ln.Addr().String(), counts: cfg.Counts}
}

func (r *rig) dial(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", r.addr, testTimeout)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(testTimeout))
	t.Cleanup(func() { c.Close() })
	return c
}

// dialSmall dials with a small receive buffer: an answer of a few hundred
// KiB does not fit the way to the client.
func (r *rig) dialSmall(t *testing.T) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: testTimeout, Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		}); err != nil {
			return err
		}
		return serr
	}}
	c, err := d.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(testTimeout))
	t.Cleanup(func() { c.Close() })
	return c
}

func smallSendBuffer(c *net.TCPConn) { _ = c.SetWriteBuffer(4096) }

// waitGone waits until the server holds no connection and h saw lefts
// Left calls.
func (r *rig) waitGone(t *testing.T, lefts int) {
	t.Helper()
	waitfor.Cond(t, fmt.Sprintf("Conns()==0 and %d Left", lefts), func() bool {
		return r.srv.Conns() == 0 && r.h.stats().lefts == lefts
	})
}

func (r *rig) waitDones(t *testing.T, n int) []error {
	t.Helper()
	waitfor.Cond(t, fmt.Sprintf("%d Done", n), func() bool { return len(r.h.stats().dones) >= n })
	return r.h.stats().dones
}

// checkCounts compares the rig's Counts with want: dials, retries,
// idleClosed, unsolicited, idle.
func (r *rig) checkCounts(t *testing.T, dials, retries, idleClosed, unsolicited, idle int) {
	t.Helper()
	c := r.counts
	got := [5]int64{int64(c.Dials.Load()), int64(c.Retries.Load()), int64(c.IdleClosed.Load()), int64(c.Unsolicited.Load()), c.Idle.Load()}
	want := [5]int64{int64(dials), int64(retries), int64(idleClosed), int64(unsolicited), int64(idle)}
	if got != want {
		t.Errorf("Counts (dials, retries, idleClosed, unsolicited, idle) = %v, want %v", got, want)
	}
}

func allNil(errs []error) bool {
	for _, err := range errs {
		if err != nil {
			return false
		}
	}
	return true
}

// ---------------------------------------------------------------------------
// headEnd.

func TestHeadEnd(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{"", -1},
		{"GET", -1},
		{"GET / HTTP/1.1", -1},
		{"GET / HTTP/1.1\r\n", -1},
		{"GET / HTTP/1.1\r\n\r", -1},
		{"GET / HTTP/1.1\r\nHost: a\r\n", -1},
		{"GET / HTTP/1.1\r\nHost: a\r\n\r", -1},
		{"GET / HTTP/1.1\n", -1},
		{"GET / HTTP/1.1\nHost: a\n", -1},
		{"GET / HTTP/1.1\r\n\r\n", 18},
		{"GET / HTTP/1.1\n\n", 16},
		{"GET / HTTP/1.1\r\nHost: a\r\n\r\n", 27},
		{"GET / HTTP/1.1\nHost: a\n\n", 24},
		// Mixed line ends: CRLF lines then a bare-LF empty line, and the
		// other way round.
		{"GET / HTTP/1.1\r\nHost: a\r\n\n", 26},
		{"GET / HTTP/1.1\nHost: a\n\r\n", 25},
		// What follows the head is not part of it.
		{"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\n\r\n", 27},
		{"GET / HTTP/1.1\r\n\r\nbody", 18},
		{"GET / HTTP/1.1\n\nGET / HTTP/1.1\n\n", 16},
		// A CR not followed by LF does not end a line.
		{"GET / HTTP/1.1\r\n\rX\r\n\r\n", 22},
		{"GET / HTTP/1.1\r\nA: b\rc\r\n\r\n", 26},
	}
	for _, tt := range tests {
		if got := headEnd([]byte(tt.in)); got != tt.want {
			t.Errorf("headEnd(%q) = %d, want %d", tt.in, got, tt.want)
		}
		if tt.want > 0 {
			// The same head, with nothing after it, ends at the same place;
			// any prefix shorter than it has no whole head.
			head := tt.in[:tt.want]
			if got := headEnd([]byte(head)); got != tt.want {
				t.Errorf("headEnd(%q) = %d, want %d", head, got, tt.want)
			}
			for i := range len(head) {
				if got := headEnd([]byte(head[:i])); got != -1 {
					t.Errorf("headEnd(%q) = %d, want -1", head[:i], got)
				}
			}
		}
	}
}

// ---------------------------------------------------------------------------
// Relaying.

func TestRelayKeepAlive(t *testing.T) {
	be := newBackend(t, nil)
	h := &testHandler{backend: be.addr}
	r := newRig(t, Config{}, h, nil)

	c := r.dial(t)
	br := bufio.NewReader(c)
	var sent []string
	for i, p := range []string{"/a", "/b", "/c", "/d"} {
		req := get(p)
		sent = append(sent, req)
		write(t, c, req)
		code, body := readAnswer(t, br)
		if want := echoBody(1, i+1, p); code != 200 || body != want {
			t.Fatalf("answer %d: %d %q, want 200 %q", i, code, body, want)
		}
	}
	if n := be.accepts.Load(); n != 1 {
		t.Errorf("backend accepted %d connections, want 1 (reused)", n)
	}
	if got := be.recorded(); fmt.Sprint(got) != fmt.Sprint(sent) {
		t.Errorf("backend got heads %q, want %q", got, sent)
	}
	if dones := r.waitDones(t, 4); len(dones) != 4 || !allNil(dones) {
		t.Errorf("Done calls: %v, want 4 × nil", dones)
	}
	st := h.stats()
	if fmt.Sprint(st.reused) != "[false true true true]" {
		t.Errorf("Answer's reused: %v, want [false true true true]", st.reused)
	}
	if st.begins != 4 || st.handBacks != 0 || len(st.resumes) != 0 {
		t.Errorf("begins %d, handBacks %d, resumes %v; want 4, 0, none", st.begins, st.handBacks, st.resumes)
	}
	if n := r.srv.Conns(); n != 1 {
		t.Errorf("Conns() = %d while the client is connected, want 1", n)
	}
	r.checkCounts(t, 1, 0, 0, 0, 1)
	c.Close()
	r.waitGone(t, 1)
}

// TestConnNowIsTheLoopsClock checks Conn.Now as Begin sees it: never
// before the request was sent nor after Begin ran, and moving on between
// requests.
func TestConnNowIsTheLoopsClock(t *testing.T) {
	be := newBackend(t, nil)
	type reading struct{ loop, wall time.Time }
	readings := make(chan reading, 2)
	h := &testHandler{backend: be.addr, onBegin: func(c *Conn) {
		readings <- reading{c.Now(), time.Now()}
	}}
	r := newRig(t, Config{}, h, nil)
	c := r.dial(t)
	br := bufio.NewReader(c)
	var prev time.Time
	for i := range 2 {
		if i > 0 {
			time.Sleep(30 * time.Millisecond)
		}
		sent := time.Now()
		write(t, c, get("/now"))
		got := recv(t, readings, "Begin")
		if got.loop.Before(sent) || got.loop.After(got.wall) {
			t.Errorf("request %d: Now() = %v, not between its sending %v and Begin's clock %v", i, got.loop, sent, got.wall)
		}
		if i > 0 && got.loop.Sub(prev) < 30*time.Millisecond {
			t.Errorf("request %d: Now() moved %v since the last request, sent 30ms later", i, got.loop.Sub(prev))
		}
		prev = got.loop
		if code, _ := readAnswer(t, br); code != 200 {
			t.Fatalf("answer %d: %d", i, code)
		}
	}
}

func TestUpstreamPoolSharedAcrossClients(t *testing.T) {
	be := newBackend(t, nil)
	h := &testHandler{backend: be.addr}
	r := newRig(t, Config{Workers: 1}, h, nil)

	for i := range 3 {
		c := r.dial(t)
		br := bufio.NewReader(c)
		write(t, c, get("/x"))
		if code, body := readAnswer(t, br); code != 200 || body != echoBody(1, i+1, "/x") {
			t.Fatalf("client %d: %d %q", i, code, body)
		}
		c.Close()
		r.waitGone(t, i+1)
	}
	if n := be.accepts.Load(); n != 1 {
		t.Errorf("backend accepted %d connections, want 1", n)
	}
}

func TestPipelined(t *testing.T) {
	be := newBackend(t, nil)
	h := &testHandler{backend: be.addr}
	r := newRig(t, Config{}, h, nil)

	c := r.dial(t)
	br := bufio.NewReader(c)
	reqs := []string{
		get("/1"),
		"GET /2 HTTP/1.1\nHost: backend.test\n\n", // bare LF
		get("/3"),
	}
	write(t, c, strings.Join(reqs, ""))
	for i, p := range []string{"/1", "/2", "/3"} {
		if code, body := readAnswer(t, br); code != 200 || body != echoBody(1, i+1, p) {
			t.Fatalf("answer %d: %d %q, want %q", i, code, body, echoBody(1, i+1, p))
		}
	}
	if got := be.recorded(); fmt.Sprint(got) != fmt.Sprint(reqs) {
		t.Errorf("backend got heads %q, want %q", got, reqs)
	}
	if dones := r.waitDones(t, 3); !allNil(dones) {
		t.Errorf("Done: %v", dones)
	}
	c.Close()
	r.waitGone(t, 1)
}

func TestPipelinedThenHandBack(t *testing.T) {
	be := newBackend(t, nil)
	h := &testHandler{backend: be.addr}
	post := "POST /form HTTP/1.1\r\nHost: backend.test\r\nContent-Length: 11\r\n\r\nhello=world"
	got := make(chan []byte, 1)
	h.onHandBack = func(c net.Conn) {
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(testTimeout))
		b := make([]byte, len(post))
		n, _ := io.ReadFull(c, b)
		got <- b[:n]
		_, _ = io.WriteString(c, "HTTP/1.1 201 Created\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhb")
	}
	r := newRig(t, Config{}, h, nil)

	c := r.dial(t)
	br := bufio.NewReader(c)
	write(t, c, get("/first")+post)
	if code, body := readAnswer(t, br); code != 200 || body != echoBody(1, 1, "/first") {
		t.Fatalf("first answer: %d %q", code, body)
	}
	if b := recv(t, got, "HandBack"); string(b) != post {
		t.Errorf("handed back %q, want %q", b, post)
	}
	if code, body := readAnswer(t, br); code != 201 || body != "hb" {
		t.Fatalf("second answer: %d %q, want 201 hb", code, body)
	}
	expectClosed(t, c, br, testTimeout)
	r.waitGone(t, 1)
	if st := h.stats(); st.begins != 2 || st.handBacks != 1 || len(st.dones) != 1 {
		t.Errorf("begins %d handBacks %d dones %v; want 2, 1, [nil]", st.begins, st.handBacks, st.dones)
	}
}

// ---------------------------------------------------------------------------
// Hand-back.

func TestHandBack(t *testing.T) {
	head := "POST /upload HTTP/1.1\r\nHost: backend.test\r\nContent-Length: 11\r\n\r\n"
	body := "hello=world"
	for _, split := range []bool{false, true} {
		t.Run(fmt.Sprintf("split=%v", split), func(t *testing.T) {
			be := newBackend(t, nil)
			h := &testHandler{backend: be.addr}
			got := make(chan []byte, 1)
			h.onHandBack = func(c net.Conn) {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(testTimeout))
				b := make([]byte, len(head)+len(body))
				n, _ := io.ReadFull(c, b)
				got <- b[:n]
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nhanded")
			}
			r := newRig(t, Config{}, h, nil)

			c := r.dial(t)
			br := bufio.NewReader(c)
			if split {
				write(t, c, head)
				time.Sleep(50 * time.Millisecond)
				write(t, c, body)
			} else {
				write(t, c, head+body)
			}
			if b := recv(t, got, "HandBack"); string(b) != head+body {
				t.Errorf("handed back %q, want %q", b, head+body)
			}
			if code, b := readAnswer(t, br); code != 200 || b != "handed" {
				t.Errorf("answer %d %q, want 200 handed", code, b)
			}
			expectClosed(t, c, br, testTimeout)
			r.waitGone(t, 1)
			st := h.stats()
			if st.begins != 1 || st.handBacks != 1 || len(st.dones) != 0 || len(st.resumes) != 0 {
				t.Errorf("begins %d handBacks %d dones %v resumes %v", st.begins, st.handBacks, st.dones, st.resumes)
			}
			if n := be.accepts.Load(); n != 0 {
				t.Errorf("backend accepted %d connections, want 0", n)
			}
		})
	}
}

func TestHandBackAfterClientHalfClose(t *testing.T) {
	// A head that comes with the client's FIN is the server's to answer.
	be := newBackend(t, nil)
	h := &testHandler{backend: be.addr}
	req := get("/halfclosed")
	got := make(chan []byte, 1)
	h.onHandBack = func(c net.Conn) {
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(testTimeout))
		b, _ := io.ReadAll(c)
		got <- b
		_, _ = io.WriteString(c, okAnswer("hb"))
	}
	r := newRig(t, Config{}, h, nil)
	c := r.dial(t)
	write(t, c, req)
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	// The loop may have begun the exchange before it saw the FIN; then the
	// client's leaving hands it over instead (ErrClientGone), or, when the
	// answer came first, the exchange ended as any other (the client only
	// closed its side: it reads the answer).
	deadline := time.After(testTimeout)
	for {
		st := h.stats()
		if len(st.resumes) == 1 {
			if st.resumes[0] != ErrClientGone {
				t.Errorf("Resume cause %v, want ErrClientGone", st.resumes[0])
			}
			break
		}
		if len(st.dones) == 1 && st.dones[0] == nil {
			if code, _ := readAnswer(t, bufio.NewReader(c)); code != 200 {
				t.Errorf("served before the FIN was seen: status %d, want 200", code)
			}
			break
		}
		select {
		case b := <-got:
			if string(b) != req {
				t.Errorf("handed back %q, want %q", b, req)
			}
		case <-deadline:
			t.Fatal("neither HandBack nor Resume")
		case <-time.After(5 * time.Millisecond):
			continue
		}
		break
	}
	r.waitGone(t, 1)
}

// ---------------------------------------------------------------------------
// Upstream failures.

func TestUpstreamRefused(t *testing.T) {
	addr := closedPort(t)
	h := &testHandler{backend: addr}
	req := get("/refused")
	resumed := captureResume(h, len(req), -1, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 3\r\n\r\nbad")
	r := newRig(t, Config{}, h, nil)

	c := r.dial(t)
	br := bufio.NewReader(c)
	write(t, c, req)
	rc := recv(t, resumed, "Resume")
	if !errors.Is(rc.cause, syscall.ECONNREFUSED) {
		t.Errorf("Resume cause %v, want one wrapping ECONNREFUSED", rc.cause)
	}
	if rc.up {
		t.Errorf("Resume had an upstream connection")
	}
	if rc.clientErr != nil || string(rc.clientHead) != req {
		t.Errorf("client's bytes %q (%v), want %q", rc.clientHead, rc.clientErr, req)
	}
	if code, body := readAnswer(t, br); code != 502 || body != "bad" {
		t.Errorf("answer %d %q", code, body)
	}
	r.waitGone(t, 1)
	st := h.stats()
	if len(st.refused) != 1 || st.refused[0] != addr {
		t.Errorf("Refused calls %v, want [%v]", st.refused, addr)
	}
	if len(st.dones) != 0 || len(st.resumes) != 1 {
		t.Errorf("dones %v resumes %v", st.dones, st.resumes)
	}
}

func TestUpstreamRefusedThenAnother(t *testing.T) {
	be := newBackend(t, nil)
	dead := closedPort(t)
	h := &testHandler{backend: dead}
	h.onRefused = func(addr netip.AddrPort) (netip.AddrPort, bool) {
		if addr == dead {
			return be.addr, true
		}
		return netip.AddrPort{}, false
	}
	r := newRig(t, Config{}, h, nil)

	c := r.dial(t)
	br := bufio.NewReader(c)
	write(t, c, get("/other"))
	if code, body := readAnswer(t, br); code != 200 || body != echoBody(1, 1, "/other") {
		t.Fatalf("answer %d %q", code, body)
	}
	if dones := r.waitDones(t, 1); !allNil(dones) {
		t.Errorf("Done: %v", dones)
	}
	if st := h.stats(); len(st.refused) != 1 || st.refused[0] != dead || len(st.resumes) != 0 {
		t.Errorf("refused %v resumes %v", st.refused, st.resumes)
	}
	c.Close()
	r.waitGone(t, 1)
}

func TestUpstreamClosesWithoutAnswer(t *testing.T) {
	be := newBackend(t, func(be *backend, c net.Conn, br *bufio.Reader, idx int) {
		head, err := readHead(br)
		if err == nil {
			be.record(head)
		}
		// and close without a word
	})
	h := &testHandler{backend: be.addr}
	req := get("/silent")
	resumed := captureResume(h, len(req), 0, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
	r := newRig(t, Config{}, h, nil)

	c := r.dial(t)
	br := bufio.NewReader(c)
	write(t, c, req)
	rc := recv(t, resumed, "Resume")
	if rc.cause != nil {
		t.Errorf("Resume cause %v, want nil", rc.cause)
	}
	if !rc.up {
		t.Fatalf("Resume had no upstream connection")
	}
	if rc.upErr != io.EOF {
		t.Errorf("reading up: %v, want EOF", rc.upErr)
	}
	if string(rc.clientHead) != req {
		t.Errorf("client's bytes %q, want %q", rc.clientHead, req)
	}
	if code, _ := readAnswer(t, br); code != 502 {
		t.Errorf("answer %d, want 502", code)
	}
	r.waitGone(t, 1)
	if got := be.recorded(); len(got) != 1 || got[0] != req {
		t.Errorf("backend got %q", got)
	}
}

func TestAnswerResumeChunked(t *testing.T) {
	answer := "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
	be := newBackend(t, func(be *backend, c net.Conn, br *bufio.Reader, idx int) {
		if _, err := readHead(br); err != nil {
			return
		}
		// The head first, the body a moment later: the loop may read
		// either much before it hands over.
		_, _ = io.WriteString(c, answer[:47])
		time.Sleep(20 * time.Millisecond)
		_, _ = io.WriteString(c, answer[47:])
		_, _ = io.Copy(io.Discard, c)
	})
	h := &testHandler{backend: be.addr}
	req := get("/chunked")
	resumed := captureResume(h, len(req), len(answer), okAnswer("resumed"))
	r := newRig(t, Config{}, h, nil)

	c := r.dial(t)
	br := bufio.NewReader(c)
	write(t, c, req)
	rc := recv(t, resumed, "Resume")
	if rc.cause != nil || !rc.up {
		t.Fatalf("Resume cause %v up %v, want nil and an upstream", rc.cause, rc.up)
	}
	if rc.upErr != nil || string(rc.upBytes) != answer {
		t.Errorf("up's bytes %q (%v), want %q", rc.upBytes, rc.upErr, answer)
	}
	if string(rc.clientHead) != req {
		t.Errorf("client's bytes %q, want %q", rc.clientHead, req)
	}
	if code, body := readAnswer(t, br); code != 200 || body != "resumed" {
		t.Errorf("answer %d %q", code, body)
	}
	r.waitGone(t, 1)
	if st := h.stats(); len(st.dones) != 0 || len(st.resumes) != 1 {
		t.Errorf("dones %v resumes %v", st.dones, st.resumes)
	}
}

func TestLargeAnswerHandedOver(t *testing.T) {
	// An answer longer than the loop relays itself (maxAnswer) goes over
	// with what was read of it in front of up.
	body := strings.Repeat("z", maxAnswer+10000)
	answer := okAnswer(body)
	be := newBackend(t, func(be *backend, c net.Conn, br *bufio.Reader, idx int) {
		if _, err := readHead(br); err != nil {
			return
		}
		_, _ = io.WriteString(c, answer)
		_, _ = io.Copy(io.Discard, c)
	})
	h := &testHandler{backend: be.addr}
	req := get("/large")
	resumed := captureResume(h, len(req), len(answer), okAnswer("resumed"))
	r := newRig(t, Config{}, h, nil)

	c := r.dial(t)
	br := bufio.NewReader(c)
	write(t, c, req)
	rc := recv(t, resumed, "Resume")
	if rc.cause != nil || !rc.up {
		t.Fatalf("Resume cause %v up %v", rc.cause, rc.up)
	}
	if rc.upErr != nil || string(rc.upBytes) != answer {
		t.Errorf("up's bytes differ from the answer (%d bytes, err %v)", len(rc.upBytes), rc.upErr)
	}
	if code, body := readAnswer(t, br); code != 200 || body != "resumed" {
		t.Errorf("answer %d %q", code, body)
	}
	r.waitGone(t, 1)
}

func TestExtraBytesAfterAnswerNotKept(t *testing.T) {
	// Bytes after the answer, in the same read: the connection is not
	// kept, for nobody asked for them.
	be := newBackend(t, func(be *backend, c net.Conn, br *bufio.Reader, idx int) {
		for n := 1; ; n++ {
			head, err := readHead(br)
			if err != nil {
				return
			}
			extra := ""
			if idx == 1 {
				extra = okAnswer("BOGUS")
			}
			if _, err := io.WriteString(c, okAnswer(echoBody(idx, n, requestPath(head)))+extra); err != nil {
				return
			}
		}
	})
	h := &testHandler{backend: be.addr}
	r := newRig(t, Config{}, h, nil)

	c := r.dial(t)
	br := bufio.NewReader(c)
	write(t, c, get("/1"))
	if code, body := readAnswer(t, br); code != 200 || body != echoBody(1, 1, "/1") {
		t.Fatalf("first answer %d %q", code, body)
	}
	write(t, c, get("/2"))
	if code, body := readAnswer(t, br); code != 200 || body != echoBody(2, 1, "/2") {
		t.Fatalf("second answer %d %q, want %q", code, body, echoBody(2, 1, "/2"))
	}
	c.Close()
	r.waitGone(t, 1)
}

// ---------------------------------------------------------------------------
// Kept upstream connections going stale.

func TestStaleIdle(t *testing.T) {
	cases := []struct {
		name string
		// first serves the backend's first connection after the first
		// answer was written.
		first func(c net.Conn, br *bufio.Reader)
		// pause before the second request.
		pause time.Duration
		// How the loop finds out: retries (the request went out on the
		// stale connection and was sent again) and idleClosed (found
		// closed while idle); -1: any of these or neither, adding up to
		// at most 1 (neither: the upstream's end came with its answer,
		// and the connection was not kept).
		retries, idleClosed int
	}{
		{"closed after the answer", func(c net.Conn, br *bufio.Reader) {}, 0, -1, -1},
		{"closed after the answer, noticed idle", func(c net.Conn, br *bufio.Reader) {}, 100 * time.Millisecond, -1, -1},
		{"closed on the next request", func(c net.Conn, br *bufio.Reader) {
			_, _ = readHead(br)
		}, 0, 1, 0},
		{"reset on the next request", func(c net.Conn, br *bufio.Reader) {
			_, _ = br.Peek(1)
			_ = c.(*net.TCPConn).SetLinger(0)
		}, 0, 1, 0},
		{"408 on the next request", func(c net.Conn, br *bufio.Reader) {
			if _, err := readHead(br); err == nil {
				_, _ = io.WriteString(c, "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
			}
		}, 0, 1, 0},
		{"408 while idle", func(c net.Conn, br *bufio.Reader) {
			time.Sleep(20 * time.Millisecond)
			_, _ = io.WriteString(c, "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
		}, 150 * time.Millisecond, 0, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			be := newBackend(t, func(be *backend, c net.Conn, br *bufio.Reader, idx int) {
				if idx == 1 {
					head, err := readHead(br)
					if err != nil {
						return
					}
					if _, err := io.WriteString(c, okAnswer(echoBody(idx, 1, requestPath(head)))); err != nil {
						return
					}
					tc.first(c, br)
					return
				}
				echoServe(be, c, br, idx)
			})
			h := &testHandler{backend: be.addr}
			r := newRig(t, Config{Workers: 1}, h, nil)

			c := r.dial(t)
			br := bufio.NewReader(c)
			write(t, c, get("/1"))
			if code, body := readAnswer(t, br); code != 200 || body != echoBody(1, 1, "/1") {
				t.Fatalf("first answer %d %q", code, body)
			}
			time.Sleep(tc.pause)
			write(t, c, get("/2"))
			if code, body := readAnswer(t, br); code != 200 || body != echoBody(2, 1, "/2") {
				t.Fatalf("second answer %d %q, want %q", code, body, echoBody(2, 1, "/2"))
			}
			retries, idleClosed := int(r.counts.Retries.Load()), int(r.counts.IdleClosed.Load())
			if tc.retries >= 0 && (retries != tc.retries || idleClosed != tc.idleClosed) || retries+idleClosed > 1 {
				t.Errorf("Counts: %d retries, %d idle closed; want %d, %d", retries, idleClosed, tc.retries, tc.idleClosed)
			}
			if n := r.counts.Dials.Load(); n != 2 {
				t.Errorf("Counts.Dials = %d, want 2", n)
			}
			if dones := r.waitDones(t, 2); len(dones) != 2 || !allNil(dones) {
				t.Errorf("Done: %v, want 2 × nil", dones)
			}
			if st := h.stats(); len(st.resumes) != 0 || st.handBacks != 0 {
				t.Errorf("resumes %v handBacks %d", st.resumes, st.handBacks)
			}
			if n := be.accepts.Load(); n != 2 {
				t.Errorf("backend accepted %d connections, want 2", n)
			}
			c.Close()
			r.waitGone(t, 1)
		})
	}
}

func TestUnsolicitedBytesOnIdle(t *testing.T) {
	be := newBackend(t, func(be *backend, c net.Conn, br *bufio.Reader, idx int) {
		if idx == 1 {
			head, err := readHead(br)
			if err != nil {
				return
			}
			if _, err := io.WriteString(c, okAnswer(echoBody(idx, 1, requestPath(head)))); err != nil {
				return
			}
			time.Sleep(30 * time.Millisecond)
			_, _ = io.WriteString(c, okAnswer("UNSOLICITED"))
			// Keep the connection open: only its bytes tell.
			_, _ = io.Copy(io.Discard, c)
			return
		}
		echoServe(be, c, br, idx)
	})
	h := &testHandler{backend: be.addr}
	r := newRig(t, Config{Workers: 1}, h, nil)

	c := r.dial(t)
	br := bufio.NewReader(c)
	write(t, c, get("/1"))
	if code, body := readAnswer(t, br); code != 200 || body != echoBody(1, 1, "/1") {
		t.Fatalf("first answer %d %q", code, body)
	}
	time.Sleep(150 * time.Millisecond)
	write(t, c, get("/2"))
	if code, body := readAnswer(t, br); code != 200 || body != echoBody(2, 1, "/2") {
		t.Fatalf("second answer %d %q, want %q (from a fresh connection)", code, body, echoBody(2, 1, "/2"))
	}
	if n := be.accepts.Load(); n != 2 {
		t.Errorf("backend accepted %d connections, want 2", n)
	}
	r.checkCounts(t, 2, 0, 0, 1, 1)
	c.Close()
	r.waitGone(t, 1)
}

func TestUpstreamIdleTimeout(t *testing.T) {
	closedUp := make(chan int, 4)
	be := newBackend(t, func(be *backend, c net.Conn, br *bufio.Reader, idx int) {
		echoServe(be, c, br, idx)
		closedUp <- idx
	})
	h := &testHandler{backend: be.addr}
	r := newRig(t, Config{Workers: 1, UpstreamIdleTimeout: 150 * time.Millisecond}, h, nil)

	c := r.dial(t)
	br := bufio.NewReader(c)
	write(t, c, get("/1"))
	if code, body := readAnswer(t, br); code != 200 || body != echoBody(1, 1, "/1") {
		t.Fatalf("first answer %d %q", code, body)
	}
	if idx := recv(t, closedUp, "the idle upstream connection's close"); idx != 1 {
		t.Errorf("closed upstream connection %d, want 1", idx)
	}
	write(t, c, get("/2"))
	if code, body := readAnswer(t, br); code != 200 || body != echoBody(2, 1, "/2") {
		t.Fatalf("second answer %d %q", code, body)
	}
	c.Close()
	r.waitGone(t, 1)
}

func TestMaxIdlePerUpstream(t *testing.T) {
	// Two exchanges at once need two upstream connections; only one stays.
	arrived := make(chan struct{}, 2)
	release := make(chan struct{})
	closedUp := make(chan int, 2)
	be := newBackend(t, func(be *backend, c net.Conn, br *bufio.Reader, idx int) {
		head, err := readHead(br)
		if err != nil {
			return
		}
		arrived <- struct{}{}
		select {
		case <-release:
		case <-time.After(testTimeout):
			return
		}
		if _, err := io.WriteString(c, okAnswer(echoBody(idx, 1, requestPath(head)))); err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, c)
		closedUp <- idx
	})
	h := &testHandler{backend: be.addr}
	r := newRig(t, Config{Workers: 1, MaxIdlePerUpstream: 1}, h, nil)

	c1, c2 := r.dial(t), r.dial(t)
	write(t, c1, get("/1"))
	write(t, c2, get("/2"))
	recv(t, arrived, "the first request")
	recv(t, arrived, "the second request")
	close(release)
	for _, c := range []net.Conn{c1, c2} {
		if code, _ := readAnswer(t, bufio.NewReader(c)); code != 200 {
			t.Fatalf("answer %d", code)
		}
	}
	recv(t, closedUp, "one idle connection's close")
	select {
	case idx := <-closedUp:
		t.Errorf("both upstream connections were closed (the second: %d)", idx)
	case <-time.After(200 * time.Millisecond):
	}
	c1.Close()
	c2.Close()
	r.waitGone(t, 2)
}

// ---------------------------------------------------------------------------
// Clients that leave, timeouts.

// holdingBackend reads one head per connection, reports it on got, and
// answers only once release is closed (never when it is nil); upClosed,
// when not nil, learns when the loop closed the connection.
func holdingBackend(t *testing.T, got chan<- string, release <-chan struct{}, upClosed chan<- int) *backend {
	return newBackend(t, func(be *backend, c net.Conn, br *bufio.Reader, idx int) {
		head, err := readHead(br)
		if err != nil {
			return
		}
		be.record(head)
		ended := make(chan error, 1)
		go func() {
			_, err := io.Copy(io.Discard, br)
			ended <- err
		}()
		got <- requestPath(head)
		select {
		case <-release:
			_, _ = io.WriteString(c, okAnswer(echoBody(idx, 1, requestPath(head))))
			err = <-ended
		case err = <-ended:
		}
		if err == nil && upClosed != nil {
			upClosed <- idx
		}
	})
}

func TestClientGoneDuringExchange(t *testing.T) {
	got := make(chan string, 1)
	upClosed := make(chan int, 1)
	be := holdingBackend(t, got, nil, upClosed)
	h := &testHandler{backend: be.addr}
	r := newRig(t, Config{}, h, nil)

	c := r.dial(t)
	write(t, c, get("/slow"))
	recv(t, got, "the request upstream")
	if n := r.srv.Conns(); n != 1 {
		t.Errorf("Conns() = %d during the exchange, want 1", n)
	}
	c.Close()
	r.waitGone(t, 1)
	waitfor.Cond(t, "the exchange's end", func() bool {
		st := h.stats()
		return len(st.resumes)+len(st.dones) == 1
	})
	st := h.stats()
	switch {
	case len(st.resumes) == 1:
		if st.resumes[0] != ErrClientGone {
			t.Errorf("Resume cause %v, want ErrClientGone", st.resumes[0])
		}
	case len(st.dones) == 1:
		if st.dones[0] == nil {
			t.Errorf("Done(nil) for an exchange whose client left")
		}
	}
	// Half an exchange: the upstream connection is not kept.
	recv(t, upClosed, "the upstream connection's close")
}

func TestClientResetDuringExchange(t *testing.T) {
	got := make(chan string, 1)
	upClosed := make(chan int, 1)
	be := holdingBackend(t, got, nil, upClosed)
	h := &testHandler{backend: be.addr}
	r := newRig(t, Config{}, h, nil)

	c := r.dial(t)
	write(t, c, get("/slow"))
	recv(t, got, "the request upstream")
	_ = c.(*net.TCPConn).SetLinger(0)
	c.Close()
	r.waitGone(t, 1)
	waitfor.Cond(t, "the exchange's end", func() bool { return len(h.stats().resumes) == 1 })
	if cause := h.stats().resumes[0]; cause != ErrClientGone {
		t.Errorf("Resume cause %v, want ErrClientGone", cause)
	}
	recv(t, upClosed, "the upstream connection's close")
}

func TestHeadTimeout(t *testing.T) {
	got := make(chan string, 1)
	be := holdingBackend(t, got, nil, nil)
	h := &testHandler{backend: be.addr, headTimeout: 200 * time.Millisecond}
	req := get("/never")
	resumed := captureResume(h, len(req), -1, "HTTP/1.1 504 Gateway Timeout\r\nContent-Length: 0\r\n\r\n")
	r := newRig(t, Config{}, h, nil)

	c := r.dial(t)
	br := bufio.NewReader(c)
	start := time.Now()
	write(t, c, req)
	recv(t, got, "the request upstream")
	rc := recv(t, resumed, "Resume")
	if d := rc.at.Sub(start); d < 190*time.Millisecond || d > time.Second {
		t.Errorf("Resume came after %v, want about 200ms (under 1s)", d)
	}
	if rc.cause != nil || !rc.up {
		t.Errorf("Resume cause %v up %v; want nil and an upstream", rc.cause, rc.up)
	}
	if string(rc.clientHead) != req {
		t.Errorf("client's bytes %q", rc.clientHead)
	}
	if code, _ := readAnswer(t, br); code != 504 {
		t.Errorf("answer %d, want 504", code)
	}
	r.waitGone(t, 1)
}

func TestReadHeaderTimeout(t *testing.T) {
	be := newBackend(t, nil)
	h := &testHandler{backend: be.addr}
	r := newRig(t, Config{ReadHeaderTimeout: 200 * time.Millisecond, IdleTimeout: 10 * time.Second}, h, nil)

	t.Run("half a head", func(t *testing.T) {
		c := r.dial(t)
		start := time.Now()
		write(t, c, "GET /half HTTP/1.1\r\nHost: back")
		expectClosed(t, c, c, 2*time.Second)
		if d := time.Since(start); d < 180*time.Millisecond {
			t.Errorf("closed after %v, before ReadHeaderTimeout", d)
		}
		r.waitGone(t, 1)
	})
	t.Run("nothing at all", func(t *testing.T) {
		c := r.dial(t)
		start := time.Now()
		expectClosed(t, c, c, 2*time.Second)
		if d := time.Since(start); d < 180*time.Millisecond {
			t.Errorf("closed after %v, before ReadHeaderTimeout", d)
		}
		r.waitGone(t, 2)
	})
	t.Run("slow but in time", func(t *testing.T) {
		c := r.dial(t)
		br := bufio.NewReader(c)
		req := get("/slow")
		write(t, c, req[:10])
		time.Sleep(80 * time.Millisecond)
		write(t, c, req[10:])
		if code, body := readAnswer(t, br); code != 200 || body != echoBody(1, 1, "/slow") {
			t.Fatalf("answer %d %q", code, body)
		}
		// The next head's time starts with its first bytes: idle for
		// longer than ReadHeaderTimeout is fine.
		time.Sleep(400 * time.Millisecond)
		write(t, c, get("/again"))
		if code, body := readAnswer(t, br); code != 200 || body != echoBody(1, 2, "/again") {
			t.Fatalf("answer %d %q", code, body)
		}
		c.Close()
		r.waitGone(t, 3)
	})
	if st := h.stats(); st.begins != 2 || st.handBacks != 0 {
		t.Errorf("begins %d handBacks %d, want 2, 0", st.begins, st.handBacks)
	}
}

func TestIdleTimeout(t *testing.T) {
	be := newBackend(t, nil)
	h := &testHandler{backend: be.addr}
	r := newRig(t, Config{ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 300 * time.Millisecond}, h, nil)

	c := r.dial(t)
	br := bufio.NewReader(c)
	write(t, c, get("/1"))
	if code, _ := readAnswer(t, br); code != 200 {
		t.Fatalf("answer %d", code)
	}
	start := time.Now()
	expectClosed(t, c, br, 3*time.Second)
	if d := time.Since(start); d < 250*time.Millisecond || d > 1500*time.Millisecond {
		t.Errorf("idle connection closed after %v, want about 300ms", d)
	}
	r.waitGone(t, 1)
	if st := h.stats(); len(st.dones) != 1 || st.dones[0] != nil {
		t.Errorf("dones %v", st.dones)
	}
}

func TestWriteTimeout(t *testing.T) {
	body := strings.Repeat("w", 200<<10)
	be := newBackend(t, func(be *backend, c net.Conn, br *bufio.Reader, idx int) {
		if _, err := readHead(br); err != nil {
			return
		}
		_, _ = io.WriteString(c, okAnswer(body))
		_, _ = io.Copy(io.Discard, c)
	})
	h := &testHandler{backend: be.addr}
	r := newRig(t, Config{Workers: 1, WriteTimeout: 200 * time.Millisecond}, h, smallSendBuffer)

	c := r.dialSmall(t)
	start := time.Now()
	write(t, c, get("/big"))
	dones := r.waitDones(t, 1)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Done after %v", d)
	}
	if !errors.Is(dones[0], errWriteTimeout) {
		t.Errorf("Done(%v), want the write timeout", dones[0])
	}
	r.waitGone(t, 1)
	_, err := io.Copy(io.Discard, c)
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("reading the cut answer: %v", err)
	}
}

func TestReplyWriteBy(t *testing.T) {
	body := strings.Repeat("w", 200<<10)
	bigServe := func(be *backend, c net.Conn, br *bufio.Reader, idx int) {
		if _, err := readHead(br); err != nil {
			return
		}
		_, _ = io.WriteString(c, okAnswer(body))
		_, _ = io.Copy(io.Discard, c)
	}
	t.Run("without a WriteTimeout", func(t *testing.T) {
		be := newBackend(t, bigServe)
		h := &testHandler{backend: be.addr, writeBy: 200 * time.Millisecond}
		r := newRig(t, Config{Workers: 1}, h, smallSendBuffer)
		c := r.dialSmall(t)
		start := time.Now()
		write(t, c, get("/big"))
		dones := r.waitDones(t, 1)
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("Done after %v", d)
		}
		if !errors.Is(dones[0], errWriteTimeout) {
			t.Errorf("Done(%v), want the write timeout", dones[0])
		}
		r.waitGone(t, 1)
	})
	t.Run("later than the WriteTimeout", func(t *testing.T) {
		be := newBackend(t, bigServe)
		h := &testHandler{backend: be.addr, writeBy: 3 * time.Second}
		r := newRig(t, Config{Workers: 1, WriteTimeout: 100 * time.Millisecond}, h, smallSendBuffer)
		c := r.dialSmall(t)
		write(t, c, get("/big"))
		time.Sleep(500 * time.Millisecond)
		if dones := h.stats().dones; len(dones) != 0 {
			t.Fatalf("Done(%v) before Reply's WriteBy", dones)
		}
		if code, b := readAnswer(t, bufio.NewReader(c)); code != 200 || b != body {
			t.Fatalf("answer %d, %d bytes", code, len(b))
		}
		if dones := r.waitDones(t, 1); dones[0] != nil {
			t.Errorf("Done(%v), want nil", dones[0])
		}
		c.Close()
		r.waitGone(t, 1)
	})
}

// ---------------------------------------------------------------------------
// Shutdown, Close, Abort.

func TestShutdown(t *testing.T) {
	got := make(chan string, 4)
	release := make(chan struct{})
	be := newBackend(t, func(be *backend, c net.Conn, br *bufio.Reader, idx int) {
		for n := 1; ; n++ {
			head, err := readHead(br)
			if err != nil {
				return
			}
			p := requestPath(head)
			if p == "/slow" {
				got <- p
				select {
				case <-release:
				case <-time.After(testTimeout):
					return
				}
			}
			if _, err := io.WriteString(c, okAnswer(echoBody(idx, n, p))); err != nil {
				return
			}
		}
	})
	h := &testHandler{backend: be.addr}
	r := newRig(t, Config{}, h, nil)

	// idle1 was served once; idle2 sent nothing yet; busy's request is
	// upstream.
	idle1 := r.dial(t)
	idle1r := bufio.NewReader(idle1)
	write(t, idle1, get("/fast"))
	if code, _ := readAnswer(t, idle1r); code != 200 {
		t.Fatalf("answer %d", code)
	}
	idle2 := r.dial(t)
	busy := r.dial(t)
	busyr := bufio.NewReader(busy)
	write(t, busy, get("/slow"))
	recv(t, got, "the slow request upstream")
	waitfor.Cond(t, "3 connections", func() bool { return r.srv.Conns() == 3 })

	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		shut <- r.srv.Shutdown(ctx)
	}()
	if d := expectClosed(t, idle1, idle1r, time.Second); d > 500*time.Millisecond {
		t.Errorf("idle connection closed after %v", d)
	}
	expectClosed(t, idle2, idle2, time.Second)
	waitfor.Cond(t, "the idle connections to leave", func() bool { return r.srv.Conns() == 1 })
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v while an exchange was under way", err)
	case <-time.After(50 * time.Millisecond):
	}

	// No new connection once shutting down.
	_, s := tcpPair(t)
	if r.srv.Serve(s) {
		t.Errorf("Serve during Shutdown returned true")
	}

	close(release)
	if code, body := readAnswer(t, busyr); code != 200 || body != echoBody(2, 1, "/slow") && body != echoBody(1, 2, "/slow") {
		t.Errorf("answer %d %q", code, body)
	}
	expectClosed(t, busy, busyr, 2*time.Second)
	if err := recv(t, shut, "Shutdown"); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if n := r.srv.Conns(); n != 0 {
		t.Errorf("Conns() = %d after Shutdown", n)
	}
	st := h.stats()
	if len(st.dones) != 2 || !allNil(st.dones) || st.lefts != 3 {
		t.Errorf("dones %v lefts %d; want 2 × nil and 3", st.dones, st.lefts)
	}
	h.mu.Lock()
	if sd := fmt.Sprint(h.replyShuttingDown); sd != "[false true]" {
		t.Errorf("Conn.ShuttingDown in the Replies: %s, want [false true]", sd)
	}
	h.mu.Unlock()
	_, s2 := tcpPair(t)
	if r.srv.Serve(s2) {
		t.Errorf("Serve after Shutdown returned true")
	}
	noWorkerLeft(t)
}

func TestShutdownGivesUp(t *testing.T) {
	got := make(chan string, 1)
	upClosed := make(chan int, 1)
	be := holdingBackend(t, got, nil, upClosed)
	h := &testHandler{backend: be.addr}
	r := newRig(t, Config{}, h, nil)

	c := r.dial(t)
	write(t, c, get("/stuck"))
	recv(t, got, "the request upstream")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := r.srv.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown: %v, want the context's deadline", err)
	}
	expectClosed(t, c, c, time.Second)
	if dones := h.stats().dones; len(dones) != 1 || dones[0] != ErrClosed {
		t.Errorf("dones %v, want [ErrClosed]", dones)
	}
	recv(t, upClosed, "the upstream connection's close")
	if n := r.srv.Conns(); n != 0 {
		t.Errorf("Conns() = %d", n)
	}
	noWorkerLeft(t)
}

func TestCloseDuringExchange(t *testing.T) {
	got := make(chan string, 1)
	upClosed := make(chan int, 1)
	be := holdingBackend(t, got, nil, upClosed)
	h := &testHandler{backend: be.addr}
	r := newRig(t, Config{}, h, nil)

	idle := r.dial(t)
	c := r.dial(t)
	write(t, c, get("/stuck"))
	recv(t, got, "the request upstream")
	waitfor.Cond(t, "2 connections", func() bool { return r.srv.Conns() == 2 })
	if err := r.srv.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	noWorkerLeft(t)
	if n := r.srv.Conns(); n != 0 {
		t.Errorf("Conns() = %d after Close", n)
	}
	st := h.stats()
	if len(st.dones) != 1 || st.dones[0] != ErrClosed {
		t.Errorf("dones %v, want [ErrClosed]", st.dones)
	}
	if st.lefts != 2 || len(st.resumes) != 0 {
		t.Errorf("lefts %d resumes %v", st.lefts, st.resumes)
	}
	expectClosed(t, c, c, time.Second)
	expectClosed(t, idle, idle, time.Second)
	recv(t, upClosed, "the upstream connection's close")
	_, s := tcpPair(t)
	if r.srv.Serve(s) {
		t.Errorf("Serve after Close returned true")
	}
	if err := r.srv.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := r.srv.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown after Close: %v", err)
	}
}

func TestAbort(t *testing.T) {
	t.Run("during an exchange", func(t *testing.T) {
		got := make(chan string, 1)
		upClosed := make(chan int, 1)
		be := holdingBackend(t, got, nil, upClosed)
		h := &testHandler{backend: be.addr}
		conns := make(chan *Conn, 1)
		h.onBegin = func(c *Conn) { conns <- c }
		r := newRig(t, Config{}, h, nil)

		c := r.dial(t)
		write(t, c, get("/stuck"))
		lc := recv(t, conns, "Begin")
		recv(t, got, "the request upstream")
		lc.Abort()
		r.waitGone(t, 1)
		waitfor.Cond(t, "Resume", func() bool { return len(h.stats().resumes) == 1 })
		if cause := h.stats().resumes[0]; cause != ErrClientGone {
			t.Errorf("Resume cause %v, want ErrClientGone", cause)
		}
		recv(t, upClosed, "the upstream connection's close")
		expectClosed(t, c, c, time.Second) // Resume closed it
		lc.Abort()                         // gone: nothing
		time.Sleep(20 * time.Millisecond)
		if st := h.stats(); len(st.resumes) != 1 || len(st.dones) != 0 || st.lefts != 1 {
			t.Errorf("after a second Abort: resumes %v dones %v lefts %d", st.resumes, st.dones, st.lefts)
		}
	})
	t.Run("idle", func(t *testing.T) {
		be := newBackend(t, nil)
		h := &testHandler{backend: be.addr}
		conns := make(chan *Conn, 1)
		h.onBegin = func(c *Conn) { conns <- c }
		r := newRig(t, Config{}, h, nil)

		c := r.dial(t)
		br := bufio.NewReader(c)
		write(t, c, get("/1"))
		if code, _ := readAnswer(t, br); code != 200 {
			t.Fatalf("answer %d", code)
		}
		lc := recv(t, conns, "Begin")
		if lc.RemoteAddr().String() != c.LocalAddr().String() {
			t.Errorf("RemoteAddr %v, want %v", lc.RemoteAddr(), c.LocalAddr())
		}
		lc.Abort()
		expectClosed(t, c, br, time.Second)
		r.waitGone(t, 1)
		if st := h.stats(); len(st.dones) != 1 || st.dones[0] != nil || len(st.resumes) != 0 {
			t.Errorf("dones %v resumes %v", st.dones, st.resumes)
		}
	})
	t.Run("after Close", func(t *testing.T) {
		be := newBackend(t, nil)
		h := &testHandler{backend: be.addr}
		conns := make(chan *Conn, 1)
		h.onBegin = func(c *Conn) { conns <- c }
		r := newRig(t, Config{}, h, nil)
		c := r.dial(t)
		write(t, c, get("/1"))
		if code, _ := readAnswer(t, bufio.NewReader(c)); code != 200 {
			t.Fatalf("answer %d", code)
		}
		lc := recv(t, conns, "Begin")
		r.srv.Close()
		lc.Abort() // the loops stopped: nothing, no panic
	})
}

// ---------------------------------------------------------------------------
// Limits and what Serve takes.

func TestMaxHeadBytes(t *testing.T) {
	cases := []struct {
		name    string
		limit   int
		headLen int
	}{
		{"past the first buffer", 1024, 6000},
		{"past a grown buffer", 8192, 12000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			be := newBackend(t, nil)
			h := &testHandler{backend: be.addr}
			fill := tc.headLen - len(get("/long")) - len("X-Fill: \r\n")
			req := strings.Replace(get("/long"), "\r\n\r\n", "\r\nX-Fill: "+strings.Repeat("f", fill)+"\r\n\r\n", 1)
			got := make(chan []byte, 1)
			h.onHandBack = func(c net.Conn) {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(testTimeout))
				b := make([]byte, len(req))
				n, _ := io.ReadFull(c, b)
				got <- b[:n]
				_, _ = io.WriteString(c, "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			}
			r := newRig(t, Config{MaxHeadBytes: tc.limit}, h, nil)

			c := r.dial(t)
			br := bufio.NewReader(c)
			write(t, c, req)
			if b := recv(t, got, "HandBack"); string(b) != req {
				t.Errorf("handed back %d bytes, want the %d sent", len(b), len(req))
			}
			if code, _ := readAnswer(t, br); code != 431 {
				t.Errorf("answer %d", code)
			}
			r.waitGone(t, 1)
			if st := h.stats(); st.begins != 0 {
				t.Errorf("Begin called %d times for a head over the limit", st.begins)
			}
		})
	}
}

func TestMaxHeadBytesWholeHeadInOneRead(t *testing.T) {
	// A head longer than MaxHeadBytes that arrives whole in the loop's
	// first read (within its first 4 KiB buffer) is handed back as well:
	// "a connection whose head is longer is handed back".
	be := newBackend(t, nil)
	h := &testHandler{backend: be.addr}
	req := strings.Replace(get("/long"), "\r\n\r\n", "\r\nX-Fill: "+strings.Repeat("f", 2000)+"\r\n\r\n", 1)
	h.onHandBack = func(c net.Conn) {
		defer c.Close()
		_, _ = io.WriteString(c, "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
	}
	r := newRig(t, Config{MaxHeadBytes: 1024}, h, nil)
	c := r.dial(t)
	write(t, c, req)
	code, _ := readAnswer(t, bufio.NewReader(c))
	c.Close()
	r.waitGone(t, 1)
	if st := h.stats(); st.begins != 0 || code != 431 {
		t.Errorf("a %d-byte head with MaxHeadBytes 1024: Begin called %d times, answer %d; want it handed back (431)",
			len(req), st.begins, code)
	}
}

// wrapped is a TCP connection behind a wrapper that says what it wraps
// and holds bytes read from it already, as connlimit.Conn does.
type wrapped struct {
	*net.TCPConn
	pending []byte
	took    atomic.Int32
	closes  atomic.Int32
}

// Close counts: what a wrapper holds (a connection cap's slot) is given
// back when the loop, or whoever it handed the connection to, closes it.
func (w *wrapped) Close() error {
	w.closes.Add(1)
	return w.TCPConn.Close()
}

func (w *wrapped) NetConn() net.Conn { return w.TCPConn }

func (w *wrapped) TakePending() []byte {
	w.took.Add(1)
	p := w.pending
	w.pending = nil
	return p
}

// opaque hides what it wraps.
type opaque struct{ net.Conn }

func TestServeRejects(t *testing.T) {
	h := &testHandler{backend: closedPort(t)}
	r := newRig(t, Config{}, h, nil)

	p1, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	if r.srv.Serve(p1) {
		t.Errorf("Serve(net.Pipe) = true")
	}

	_, s := tcpPair(t)
	if r.srv.Serve(opaque{s}) {
		t.Errorf("Serve of a wrapper that hides its TCP connection = true")
	}

	dir := t.TempDir()
	uln, err := net.Listen("unix", dir+"/s")
	if err != nil {
		t.Fatal(err)
	}
	defer uln.Close()
	uc, err := net.Dial("unix", dir+"/s")
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	if r.srv.Serve(uc) {
		t.Errorf("Serve of a unix socket = true")
	}
	if n := r.srv.Conns(); n != 0 {
		t.Errorf("Conns() = %d", n)
	}
	if st := h.stats(); st.lefts != 0 || st.begins != 0 || st.handBacks != 0 {
		t.Errorf("the handler heard of rejected conns: %+v", st)
	}
}

func TestServeWrapperWithPending(t *testing.T) {
	be := newBackend(t, nil)
	h := &testHandler{backend: be.addr}
	r := newRig(t, Config{}, h, nil)

	client, s := tcpPair(t)
	// A listener's deadline on the accepted conn must not cut the loop's
	// reads.
	_ = s.SetDeadline(time.Now().Add(time.Millisecond))
	req := get("/pending")
	wc := &wrapped{TCPConn: s, pending: []byte(req[:20])}
	if !r.srv.Serve(wc) {
		t.Fatalf("Serve of a wrapped TCP connection = false")
	}
	if n := wc.took.Load(); n != 1 {
		t.Errorf("TakePending called %d times, want 1", n)
	}
	time.Sleep(20 * time.Millisecond)
	write(t, client, req[20:])
	br := bufio.NewReader(client)
	if code, body := readAnswer(t, br); code != 200 || body != echoBody(1, 1, "/pending") {
		t.Fatalf("answer %d %q", code, body)
	}
	if got := be.recorded(); len(got) != 1 || got[0] != req {
		t.Errorf("backend got %q, want %q", got, req)
	}
	// A whole head pending is served at once.
	client2, s2 := tcpPair(t)
	if !r.srv.Serve(&wrapped{TCPConn: s2, pending: []byte(get("/whole"))}) {
		t.Fatalf("Serve = false")
	}
	if code, body := readAnswer(t, bufio.NewReader(client2)); code != 200 || !strings.HasSuffix(body, "path=/whole") {
		t.Fatalf("answer %d %q", code, body)
	}
	// Pending bytes of a request the Handler declines go back with it.
	client3, s3 := tcpPair(t)
	post := "POST /p HTTP/1.1\r\nHost: backend.test\r\nContent-Length: 3\r\n\r\nabc"
	got := make(chan []byte, 1)
	h.mu.Lock()
	h.onHandBack = func(c net.Conn) {
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(testTimeout))
		b := make([]byte, len(post))
		n, _ := io.ReadFull(c, b)
		got <- b[:n]
	}
	h.mu.Unlock()
	if !r.srv.Serve(&wrapped{TCPConn: s3, pending: []byte(post[:30])}) {
		t.Fatalf("Serve = false")
	}
	write(t, client3, post[30:])
	if b := recv(t, got, "HandBack"); string(b) != post {
		t.Errorf("handed back %q, want %q", b, post)
	}
	client.Close()
	client2.Close()
	r.waitGone(t, 3)
}

func TestConnectionClose(t *testing.T) {
	be := newBackend(t, nil)
	h := &testHandler{backend: be.addr}
	r := newRig(t, Config{Workers: 1}, h, nil)

	c := r.dial(t)
	br := bufio.NewReader(c)
	write(t, c, "GET /bye HTTP/1.1\r\nHost: backend.test\r\nConnection: close\r\n\r\n"+get("/never"))
	if code, body := readAnswer(t, br); code != 200 || body != echoBody(1, 1, "/bye") {
		t.Fatalf("answer %d %q", code, body)
	}
	expectClosed(t, c, br, time.Second)
	r.waitGone(t, 1)
	if st := h.stats(); st.begins != 1 || len(st.dones) != 1 || st.dones[0] != nil {
		t.Errorf("begins %d dones %v", st.begins, st.dones)
	}
}

func TestUpstreamConnectionClose(t *testing.T) {
	// An answer saying Connection: close does not leave its connection in
	// the pool.
	be := newBackend(t, func(be *backend, c net.Conn, br *bufio.Reader, idx int) {
		head, err := readHead(br)
		if err != nil {
			return
		}
		body := echoBody(idx, 1, requestPath(head))
		_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		_, _ = io.Copy(io.Discard, c) // the loop must close it
	})
	h := &testHandler{backend: be.addr}
	r := newRig(t, Config{Workers: 1}, h, nil)
	c := r.dial(t)
	br := bufio.NewReader(c)
	for i := 1; i <= 2; i++ {
		write(t, c, get("/x"))
		if code, body := readAnswer(t, br); code != 200 || body != echoBody(i, 1, "/x") {
			t.Fatalf("answer %d: %d %q", i, code, body)
		}
	}
	c.Close()
	r.waitGone(t, 1)
}

func TestConcurrentClients(t *testing.T) {
	be := newBackend(t, nil)
	h := &testHandler{backend: be.addr}
	r := newRig(t, Config{Workers: 4}, h, nil)

	const clients, requests = 16, 10
	errs := make(chan error, clients)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			c, err := net.DialTimeout("tcp", r.addr, testTimeout)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(testTimeout))
			br := bufio.NewReader(c)
			for j := range requests {
				p := fmt.Sprintf("/c%d/r%d", i, j)
				if _, err := io.WriteString(c, get(p)); err != nil {
					errs <- err
					return
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					errs <- fmt.Errorf("client %d request %d: %w", i, j, err)
					return
				}
				body, err := io.ReadAll(resp.Body)
				if err != nil || !strings.HasSuffix(string(body), "path="+p) {
					errs <- fmt.Errorf("client %d request %d: %q %v", i, j, body, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	r.waitGone(t, clients)
	if dones := r.waitDones(t, clients*requests); len(dones) != clients*requests || !allNil(dones) {
		t.Errorf("%d Done, want %d × nil", len(dones), clients*requests)
	}
	if n := be.accepts.Load(); n > clients {
		t.Errorf("backend accepted %d connections for %d clients", n, clients)
	}
}

// ---------------------------------------------------------------------------
// Contracts a first version of the engine broke (see the comments).

// A Reply that returns the answer's own bytes (a byte-for-byte relay)
// must not have them overwritten while they wait for a slow client: the
// upstream connection, put back in the pool at once, lends its read
// buffer to the next exchange of the worker.
func TestReplyAliasingAnswerSlowClient(t *testing.T) {
	bigA := strings.Repeat("A", 200<<10)
	bigB := strings.Repeat("B", 150<<10)
	wrote := make(chan struct{}, 2)
	be := newBackend(t, func(be *backend, c net.Conn, br *bufio.Reader, idx int) {
		for {
			head, err := readHead(br)
			if err != nil {
				return
			}
			body := bigA
			if requestPath(head) == "/b" {
				body = bigB
			}
			if _, err := io.WriteString(c, okAnswer(body)); err != nil {
				return
			}
			wrote <- struct{}{}
		}
	})
	h := &testHandler{backend: be.addr, aliasReply: true}
	r := newRig(t, Config{Workers: 1}, h, smallSendBuffer)

	slow := r.dialSmall(t)
	write(t, slow, get("/a"))
	recv(t, wrote, "the first answer")
	time.Sleep(100 * time.Millisecond) // the loop read it all and waits on the slow client

	fast := r.dial(t)
	write(t, fast, get("/b"))
	if code, body := readAnswer(t, bufio.NewReader(fast)); code != 200 || body != bigB {
		t.Fatalf("fast client: %d, %d bytes", code, len(body))
	}
	code, body := readAnswer(t, bufio.NewReader(slow))
	if code != 200 || body != bigA {
		i := strings.IndexFunc(body, func(r rune) bool { return r != 'A' })
		t.Errorf("slow client's answer was overwritten: %d bytes, first non-A byte at %d", len(body), i)
	}
	if n := be.accepts.Load(); n != 1 {
		t.Logf("backend accepted %d connections", n)
	}
}

// Resume's up must begin with the answer's bytes read so far, also when
// a Retry verdict came on a connection that was not reused.
func TestRetryOnFreshConnectionKeepsAnswer(t *testing.T) {
	answer := "HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n\r\n"
	be := newBackend(t, func(be *backend, c net.Conn, br *bufio.Reader, idx int) {
		if _, err := readHead(br); err != nil {
			return
		}
		_, _ = io.WriteString(c, answer)
		_, _ = io.Copy(io.Discard, c)
	})
	h := &testHandler{backend: be.addr, retryAlways: true}
	type result struct {
		cause error
		up    bool
		got   []byte
		err   error
	}
	resumed := make(chan result, 1)
	h.onResume = func(client, up net.Conn, cause error) {
		defer client.Close()
		res := result{cause: cause, up: up != nil}
		if up != nil {
			defer up.Close()
			// What up holds comes at once: the 408 was read already.
			_ = up.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			buf := make([]byte, len(answer))
			var n int
			n, res.err = io.ReadFull(up, buf)
			res.got = buf[:n]
		}
		resumed <- res
	}
	r := newRig(t, Config{}, h, nil)
	c := r.dial(t)
	write(t, c, get("/408"))
	res := recv(t, resumed, "Resume")
	if res.cause != nil || !res.up || string(res.got) != answer {
		t.Errorf("Resume(cause %v, up %v): up began with %q (%v), want %q", res.cause, res.up, res.got, res.err, answer)
	}
	r.waitGone(t, 1)
}

// ---------------------------------------------------------------------------
// More shapes of traffic.

func TestPipelinedDuringExchange(t *testing.T) {
	got := make(chan string, 4)
	release := make(chan struct{})
	be := newBackend(t, func(be *backend, c net.Conn, br *bufio.Reader, idx int) {
		for n := 1; ; n++ {
			head, err := readHead(br)
			if err != nil {
				return
			}
			got <- requestPath(head)
			if n == 1 {
				select {
				case <-release:
				case <-time.After(testTimeout):
					return
				}
			}
			if _, err := io.WriteString(c, okAnswer(echoBody(idx, n, requestPath(head)))); err != nil {
				return
			}
		}
	})
	h := &testHandler{backend: be.addr}
	r := newRig(t, Config{}, h, nil)

	c := r.dial(t)
	br := bufio.NewReader(c)
	write(t, c, get("/1"))
	recv(t, got, "the first request upstream")
	write(t, c, get("/2")) // while the first is upstream
	time.Sleep(30 * time.Millisecond)
	close(release)
	for i, p := range []string{"/1", "/2"} {
		if code, body := readAnswer(t, br); code != 200 || body != echoBody(1, i+1, p) {
			t.Fatalf("answer %d: %d %q", i, code, body)
		}
	}
	c.Close()
	r.waitGone(t, 1)
}

func TestPipelinedBurst(t *testing.T) {
	be := newBackend(t, nil)
	h := &testHandler{backend: be.addr}
	r := newRig(t, Config{}, h, nil)

	const n = 100
	var all strings.Builder
	for i := range n {
		all.WriteString(get(fmt.Sprintf("/burst/%d", i)))
	}
	c := r.dial(t)
	br := bufio.NewReader(c)
	write(t, c, all.String())
	for i := range n {
		if code, body := readAnswer(t, br); code != 200 || body != echoBody(1, i+1, fmt.Sprintf("/burst/%d", i)) {
			t.Fatalf("answer %d: %d %q", i, code, body)
		}
	}
	if dones := r.waitDones(t, n); len(dones) != n || !allNil(dones) {
		t.Errorf("%d Done", len(dones))
	}
	c.Close()
	r.waitGone(t, 1)
}

func TestHeadTrickled(t *testing.T) {
	be := newBackend(t, nil)
	h := &testHandler{backend: be.addr}
	r := newRig(t, Config{}, h, nil)

	c := r.dial(t)
	br := bufio.NewReader(c)
	req := get("/trickle")
	for i := range len(req) {
		write(t, c, req[i:i+1])
		if i%8 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if code, body := readAnswer(t, br); code != 200 || body != echoBody(1, 1, "/trickle") {
		t.Fatalf("answer %d %q", code, body)
	}
	if got := be.recorded(); len(got) != 1 || got[0] != req {
		t.Errorf("backend got %q", got)
	}
	if st := h.stats(); st.begins != 1 {
		t.Errorf("Begin called %d times", st.begins)
	}
	c.Close()
	r.waitGone(t, 1)
}

func TestUpstreamClosesMidAnswer(t *testing.T) {
	partial := "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort"
	be := newBackend(t, func(be *backend, c net.Conn, br *bufio.Reader, idx int) {
		if _, err := readHead(br); err != nil {
			return
		}
		_, _ = io.WriteString(c, partial)
	})
	h := &testHandler{backend: be.addr}
	type result struct {
		cause error
		up    []byte
		err   error
	}
	resumed := make(chan result, 1)
	h.onResume = func(client, up net.Conn, cause error) {
		defer client.Close()
		res := result{cause: cause, err: errors.New("no up")}
		if up != nil {
			defer up.Close()
			_ = up.SetDeadline(time.Now().Add(testTimeout))
			res.up, res.err = io.ReadAll(up)
		}
		resumed <- res
	}
	r := newRig(t, Config{}, h, nil)
	c := r.dial(t)
	write(t, c, get("/partial"))
	res := recv(t, resumed, "Resume")
	if res.cause != nil || res.err != nil || string(res.up) != partial {
		t.Errorf("Resume(cause %v): up held %q then %v; want nil, %q then EOF", res.cause, res.up, res.err, partial)
	}
	expectClosed(t, c, c, time.Second)
	r.waitGone(t, 1)
}

// blackhole returns a loopback address whose listener's queue is full:
// connects to it wait, unanswered.
func blackhole(t *testing.T) netip.AddrPort {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(sa.(*syscall.SockaddrInet4).Port))
	for range 16 {
		c, err := net.DialTimeout("tcp", addr.String(), 200*time.Millisecond)
		if err != nil {
			return addr // full: this connect waited in vain
		}
		t.Cleanup(func() { c.Close() })
	}
	t.Skip("could not fill a listener's queue")
	return addr
}

func TestConnectTimeout(t *testing.T) {
	addr := blackhole(t)
	h := &testHandler{backend: addr, headTimeout: 300 * time.Millisecond}
	req := get("/blackhole")
	resumed := captureResume(h, len(req), -1, "HTTP/1.1 504 Gateway Timeout\r\nContent-Length: 0\r\n\r\n")
	r := newRig(t, Config{}, h, nil)
	c := r.dial(t)
	start := time.Now()
	write(t, c, req)
	rc := recv(t, resumed, "Resume")
	if d := rc.at.Sub(start); d < 250*time.Millisecond || d > 2*time.Second {
		t.Errorf("Resume after %v, want about 300ms", d)
	}
	var ne net.Error
	if rc.up || !errors.As(rc.cause, &ne) || !ne.Timeout() {
		t.Errorf("Resume(up %v, cause %v), want no up and a timeout", rc.up, rc.cause)
	}
	if string(rc.clientHead) != req {
		t.Errorf("client's bytes %q", rc.clientHead)
	}
	if code, _ := readAnswer(t, bufio.NewReader(c)); code != 504 {
		t.Errorf("answer %d", code)
	}
	r.waitGone(t, 1)
	if n := r.counts.Dials.Load(); n != 0 {
		t.Errorf("Counts.Dials = %d for a connect that never completed", n)
	}
}

// bigAnswerRig is a rig whose one client takes a 200 KiB answer slowly:
// once the backend wrote it, the loop waits to write it to the client.
func bigAnswerRig(t *testing.T, cfg Config, h *testHandler) (*rig, net.Conn, <-chan struct{}) {
	wrote := make(chan struct{}, 1)
	body := strings.Repeat("w", 200<<10)
	be := newBackend(t, func(be *backend, c net.Conn, br *bufio.Reader, idx int) {
		if _, err := readHead(br); err != nil {
			return
		}
		if _, err := io.WriteString(c, okAnswer(body)); err == nil {
			wrote <- struct{}{}
		}
		_, _ = io.Copy(io.Discard, c)
	})
	h.backend = be.addr
	cfg.Workers = 1
	r := newRig(t, cfg, h, smallSendBuffer)
	c := r.dialSmall(t)
	write(t, c, get("/big"))
	return r, c, wrote
}

func TestClientGoneWhileWriting(t *testing.T) {
	h := &testHandler{}
	r, c, wrote := bigAnswerRig(t, Config{}, h)
	recv(t, wrote, "the answer upstream")
	time.Sleep(100 * time.Millisecond)
	c.Close() // with unread bytes: a reset
	dones := r.waitDones(t, 1)
	if dones[0] != ErrClientGone {
		t.Errorf("Done(%v), want ErrClientGone", dones[0])
	}
	r.waitGone(t, 1)
}

func TestAbortWhileWriting(t *testing.T) {
	h := &testHandler{}
	conns := make(chan *Conn, 1)
	h.onBegin = func(c *Conn) { conns <- c }
	r, c, wrote := bigAnswerRig(t, Config{}, h)
	lc := recv(t, conns, "Begin")
	recv(t, wrote, "the answer upstream")
	time.Sleep(100 * time.Millisecond)
	lc.Abort()
	dones := r.waitDones(t, 1)
	if dones[0] != ErrClientGone {
		t.Errorf("Done(%v), want ErrClientGone", dones[0])
	}
	r.waitGone(t, 1)
	_, _ = io.Copy(io.Discard, c) // ends: the loop closed it
}

func TestWithPrefix(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if withPrefix(a, nil) != a {
		t.Errorf("withPrefix(c, nil) is not c")
	}
	pre := []byte("head")
	pc := withPrefix(a, pre)
	pre[0] = 'X' // a copy was taken
	go func() { _, _ = b.Write([]byte("+rest")); b.Close() }()
	got, err := io.ReadAll(pc)
	if err != nil || string(got) != "head+rest" {
		t.Errorf("read %q, %v; want head+rest", got, err)
	}
	if nc := pc.(interface{ NetConn() net.Conn }).NetConn(); nc != a {
		t.Errorf("NetConn is not the wrapped conn")
	}
	if _, err := pc.(syscall.Conn).SyscallConn(); err != syscall.EINVAL {
		t.Errorf("SyscallConn of a pipe: %v, want EINVAL", err)
	}
	if err := pc.(interface{ CloseWrite() error }).CloseWrite(); err != syscall.EINVAL {
		t.Errorf("CloseWrite of a pipe: %v, want EINVAL", err)
	}

	client, s := tcpPair(t)
	tc := withPrefix(s, []byte("x"))
	if _, err := tc.(syscall.Conn).SyscallConn(); err != nil {
		t.Errorf("SyscallConn of a TCP conn: %v", err)
	}
	if err := tc.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Errorf("CloseWrite of a TCP conn: %v", err)
	}
	if n, err := client.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Errorf("after CloseWrite the peer read %d, %v; want EOF", n, err)
	}
}

// Resume's up, when not nil, is "the upstream connection after the
// request was sent whole": a HeadTimeout that passes while the head is
// still being written must not hand over up with half a request on it.
func TestHeadTimeoutWhileSending(t *testing.T) {
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		}); err != nil {
			return err
		}
		return serr
	}}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	readNow := make(chan struct{})
	received := make(chan int, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(testTimeout))
		select { // not a byte read before Resume
		case <-readNow:
		case <-time.After(testTimeout):
		}
		n, _ := io.Copy(io.Discard, c)
		received <- int(n)
	}()
	h := &testHandler{backend: ln.Addr().(*net.TCPAddr).AddrPort(), headTimeout: 200 * time.Millisecond}
	type result struct {
		up    bool
		cause error
	}
	resumed := make(chan result, 1)
	h.onResume = func(client, up net.Conn, cause error) {
		client.Close()
		if up != nil {
			up.Close()
		}
		resumed <- result{up != nil, cause}
	}
	r := newRig(t, Config{MaxHeadBytes: 8 << 20}, h, nil)
	req := strings.Replace(get("/huge"), "\r\n\r\n", "\r\nX-Fill: "+strings.Repeat("f", 6<<20)+"\r\n\r\n", 1)
	c := r.dial(t)
	go func() { _, _ = io.WriteString(c, req) }()
	res := recv(t, resumed, "Resume")
	close(readNow)
	n := recv(t, received, "the backend's count")
	if res.up && n < len(req) {
		t.Errorf("Resume was given up (cause %v) after %d of the head's %d bytes were sent", res.cause, n, len(req))
	}
	t.Logf("Resume(up %v, cause %v); the backend received %d of %d bytes", res.up, res.cause, n, len(req))
}

func TestAdoptedConnOwnership(t *testing.T) {
	be := newBackend(t, nil)
	h := &testHandler{backend: be.addr}
	netConns := make(chan net.Conn, 4)
	h.onBegin = func(c *Conn) { netConns <- c.NetConn() }
	type handed struct {
		netConn net.Conn
		remote  string
	}
	handedBack := make(chan handed, 1)
	h.onHandBack = func(c net.Conn) {
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(testTimeout))
		hd := handed{remote: c.RemoteAddr().String()}
		if nc, ok := c.(interface{ NetConn() net.Conn }); ok {
			hd.netConn = nc.NetConn()
		}
		_, _ = readHead(bufio.NewReader(c))
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhb")
		handedBack <- hd
	}
	r := newRig(t, Config{}, h, nil)

	t.Run("served and closed by the loop", func(t *testing.T) {
		client, s := tcpPair(t)
		wc := &wrapped{TCPConn: s}
		if !r.srv.Serve(wc) {
			t.Fatal("Serve = false")
		}
		// The adopted socket is the loop's: the runtime's own descriptor
		// of it was closed.
		if _, err := s.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
			t.Errorf("reading the adopted *net.TCPConn: %v, want net.ErrClosed", err)
		}
		write(t, client, get("/own"))
		if code, body := readAnswer(t, bufio.NewReader(client)); code != 200 || body != echoBody(1, 1, "/own") {
			t.Fatalf("answer %d %q", code, body)
		}
		if nc := recv(t, netConns, "Begin"); nc != net.Conn(wc) {
			t.Errorf("Conn.NetConn() = %T, want the adopted wrapper", nc)
		}
		if wc.closes.Load() != 0 {
			t.Errorf("the adopted wrapper was closed while served")
		}
		client.Close()
		waitfor.Cond(t, "the wrapper's Close", func() bool { return wc.closes.Load() == 1 })
	})
	t.Run("handed back", func(t *testing.T) {
		client, s := tcpPair(t)
		wc := &wrapped{TCPConn: s}
		if !r.srv.Serve(wc) {
			t.Fatal("Serve = false")
		}
		write(t, client, "DELETE /x HTTP/1.1\r\nHost: backend.test\r\n\r\n")
		br := bufio.NewReader(client)
		if code, body := readAnswer(t, br); code != 200 || body != "hb" {
			t.Fatalf("answer %d %q", code, body)
		}
		recv(t, netConns, "Begin")
		hd := recv(t, handedBack, "HandBack")
		if hd.netConn != net.Conn(wc) {
			t.Errorf("the handed-back conn's NetConn() = %T, want the adopted wrapper", hd.netConn)
		}
		if hd.remote != client.LocalAddr().String() {
			t.Errorf("the handed-back conn's RemoteAddr() = %s, want %s", hd.remote, client.LocalAddr())
		}
		expectClosed(t, client, br, time.Second)
		waitfor.Cond(t, "the wrapper's Close", func() bool { return wc.closes.Load() == 1 })
	})
	r.waitGone(t, 2)
}

// A panic in the Handler's code ends the connection it was serving, with
// its exchange (Done with errPanicked) when one was under way, and
// nothing else: the worker goes on serving the other connections, and
// every connection and count comes back to zero.
func TestPanicEndsOnlyItsConnection(t *testing.T) {
	for _, where := range []string{"begin", "answer", "reply"} {
		t.Run(where, func(t *testing.T) {
			be := newBackend(t, nil)
			h := &testHandler{backend: be.addr, panicIn: where}
			r := newRig(t, Config{Workers: 1, Logger: slog.New(slog.DiscardHandler)}, h, nil)

			bad := r.dial(t)
			write(t, bad, get("/boom"))
			if n, err := bad.Read(make([]byte, 1)); err == nil {
				t.Fatalf("the connection whose handler panicked read %d bytes, want its end", n)
			}

			good := r.dial(t)
			br := bufio.NewReader(good)
			write(t, good, get("/fine"))
			if code, _ := readAnswer(t, br); code != 200 {
				t.Fatalf("another connection after the panic: status %d, want 200", code)
			}
			switch where {
			case "begin":
				// Done follows the answer's write: the client may read it first.
				if dones := r.waitDones(t, 1); len(dones) != 1 || dones[0] != nil {
					t.Errorf("Done calls %v, want one nil (the good connection's)", dones)
				}
			default:
				if dones := r.waitDones(t, 2); len(dones) != 2 || !errors.Is(dones[0], errPanicked) || dones[1] != nil {
					t.Errorf("Done calls %v, want errPanicked then nil", dones)
				}
			}
			good.Close()
			r.waitGone(t, 2)
		})
	}
}

// spareCount returns how many spare answer buffers the worker holds,
// read on its loop.
func spareCount(t *testing.T, w *worker) int {
	t.Helper()
	ch := make(chan int, 1)
	if !w.post(func() { ch <- len(w.spareBufs) }, false) {
		t.Fatal("the worker stopped")
	}
	return recv(t, ch, "the spare count")
}

// TestSpareBuffersTrimmedAfterPeak runs 32 exchanges at once on one loop,
// so that 32 upstream connections go idle and give their answer buffers
// to the loop's spare list, then lets the loop idle: it must let go of
// the buffers no answer took (within two trim periods) rather than keep
// the peak's for ever, and keep serving after.
func TestSpareBuffersTrimmedAfterPeak(t *testing.T) {
	const peak = 32
	old := spareTrimEvery
	spareTrimEvery = 300 * time.Millisecond
	t.Cleanup(func() { spareTrimEvery = old })

	got := make(chan string, peak)
	release := make(chan struct{})
	be := holdingBackend(t, got, release, nil)
	h := &testHandler{backend: be.addr}
	r := newRig(t, Config{Workers: 1}, h, nil)
	w := r.srv.workers[0]

	conns := make([]net.Conn, peak)
	for i := range conns {
		conns[i] = r.dial(t)
		write(t, conns[i], get(fmt.Sprintf("/%d", i)))
	}
	for range peak {
		recv(t, got, "a request upstream")
	}
	close(release)
	for _, c := range conns {
		if code, _ := readAnswer(t, bufio.NewReader(c)); code != 200 {
			t.Fatalf("answer %d", code)
		}
	}
	if n := spareCount(t, w); n != peak {
		t.Fatalf("after the peak the loop holds %d spare buffers, want %d", n, peak)
	}
	waitfor.Cond(t, "the spare buffers dropped", func() bool { return spareCount(t, w) == 0 })

	// The loop still relays: the next answer takes a new buffer.
	c := r.dial(t)
	write(t, c, get("/after"))
	recv(t, got, "the request after the trim")
	if code, _ := readAnswer(t, bufio.NewReader(c)); code != 200 {
		t.Fatalf("answer after the trim %d", code)
	}
	for _, c := range append(conns, c) {
		c.Close()
	}
	r.waitGone(t, peak+1)
}
