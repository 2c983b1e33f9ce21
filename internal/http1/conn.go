package http1

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// conn is one client connection and everything its requests reuse.
type conn struct {
	srv        *Server
	rwc        net.Conn
	ctx        context.Context // the connection's context, parent of every request's
	remoteAddr string
	localAddr  net.Addr
	tlsState   *tls.ConnectionState

	rr   requestReader
	tmpl http.Request // the fields every request of the connection shares
	resp response
	bufw *bufio.Writer // 4 KiB, over the connection
	werr error         // the first write error

	curState   atomic.Uint64 // unix seconds << 8 | http.ConnState
	mu         sync.Mutex    // guards hijackedv
	hijackedv  bool
	hijackFlag atomic.Bool
	handedOff  bool

	// The client-gone watch (watch.go).
	watchMu    sync.Mutex
	inflight   atomic.Pointer[requestContext] // the request being served
	cur        atomic.Pointer[requestContext] // the request the watch cancels
	peerClosed atomic.Bool
	watchMode  atomic.Uint32
	watchID    uint64
	bg         backgroundRead

	baseStop func() bool
	baseErr  atomic.Value // error: the connection's context ended

	// The deadlines the server last set, so that it sets them only when
	// they must change (see readDeadlineIn).
	rd, wd time.Time
	// wdWithin: wd was set through SetWriteDeadlineWithin, and may serve
	// the next request's handler too. wdLeft: it was left set when the
	// request that set it ended, and is cleared before anything more is
	// written unless the handler now serving renews it.
	wdWithin, wdLeft bool

	// The read deadline the handler in flight set through
	// ResponseController, and the timer that cancels the request when it
	// passes while the kernel watch is armed (see handlerReadDeadline);
	// under watchMu.
	handlerRD    time.Time
	handlerTimer *time.Timer

	// ex is the Exchange offered to Server.Exchanges, made for the
	// connection's first offered request and reused (exchange.go).
	ex *Exchange
	// closedNow: Server.Close closed the connection (see closeNow).
	closedNow atomic.Bool
	// first serves the connection's first request (Server.ServeConnWith).
	first http.Handler
}

func (s *Server) newConn(rwc net.Conn, base context.Context) *conn {
	if s.shuttingDown() {
		return nil
	}
	c := &conn{srv: s, rwc: rwc, localAddr: rwc.LocalAddr()}
	c.ctx = base
	if s.ConnContext != nil {
		c.ctx = s.ConnContext(base, rwc)
		if c.ctx == nil {
			panic("http1: ConnContext returned nil")
		}
	}
	if !s.trackConn(c, true) {
		return nil
	}
	c.setState(http.StateNew, time.Now().Unix())
	return c
}

func (c *conn) hijackedFast() bool { return c.hijackFlag.Load() }

func (c *conn) setState(st http.ConnState, unixSec int64) {
	switch st {
	case http.StateHijacked, http.StateClosed:
		c.srv.trackConn(c, false)
	}
	c.curState.Store(uint64(unixSec)<<8 | uint64(st))
	if hook := c.srv.ConnState; hook != nil {
		hook(c.rwc, st)
	}
}

func (c *conn) getState() (http.ConnState, int64) {
	v := c.curState.Load()
	return http.ConnState(v & 0xff), int64(v >> 8)
}

// errorHeaders end the head of the answers to refused requests.
const errorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// serve runs the connection: TLS handshake, then requests one after the
// other on this goroutine, each handler called here.
func (c *conn) serve() {
	if ra := c.rwc.RemoteAddr(); ra != nil {
		c.remoteAddr = ra.String()
	}
	var inFlight *requestContext
	defer func() {
		if err := recover(); err != nil && err != http.ErrAbortHandler {
			buf := make([]byte, 64<<10)
			buf = buf[:runtime.Stack(buf, false)]
			c.srv.logger().Error("http1: panic serving", "remote", c.remoteAddr, "panic", fmt.Sprint(err), "stack", string(buf))
		}
		if ex := c.ex; ex != nil && ex.inside {
			// A panic in ServeExchange, or in the handler it gave Serve.
			if x, _ := ex.stop(); x != nil && inFlight == nil {
				inFlight = x
			}
		}
		if inFlight != nil {
			inFlight.cancel(context.Canceled)
			c.resp.disableWriteContinue()
		}
		if c.baseStop != nil {
			c.baseStop()
		}
		if c.handedOff || c.hijackedFast() {
			c.unwatch()
			return
		}
		if inFlight != nil {
			c.disarm()
			if c.resp.body != nil {
				_ = c.resp.body.innerClose()
			}
		}
		c.unwatch()
		c.close()
		c.releaseBuffers()
		c.setState(http.StateClosed, time.Now().Unix())
	}()

	if tc, ok := c.rwc.(*tls.Conn); ok {
		if !c.handshake(tc) {
			return
		}
	} else if cs, ok := c.rwc.(interface{ ConnectionState() tls.ConnectionState }); ok {
		st := cs.ConnectionState()
		c.tlsState = &st
	}
	if c.ctx.Done() != nil {
		c.baseStop = context.AfterFunc(c.ctx, c.baseDone)
	}

	c.init()
	now := time.Now()
	if d := c.srv.readHeaderTimeout(); d > 0 {
		c.setReadDeadline(now.Add(d))
	}
	t0 := now // when the head's first bytes came, for ReadTimeout
	for {
		err := c.rr.readHead()
		if err == nil || c.rr.in.buffered() > 0 {
			c.setState(http.StateActive, t0.Unix())
		}
		if c.srv.shuttingDown() {
			return
		}
		if err != nil {
			c.refuse(err)
			return
		}
		var ok bool
		if h := c.first; h != nil {
			c.first = nil
			x := newRequestContext(c)
			inFlight = x
			ok = c.serveRequest(x, t0, nil, h)
		} else if c.srv.Exchanges != nil && c.offerable() {
			ok = c.offer(t0, &inFlight)
		} else {
			x := newRequestContext(c)
			inFlight = x
			ok = c.serveRequest(x, t0, nil, nil)
		}
		if !ok {
			return
		}
		inFlight = nil
		now = time.Now()
		c.setState(http.StateIdle, now.Unix())
		if c.srv.shuttingDown() {
			return
		}
		if t0, ok = c.awaitRequest(now); !ok {
			return
		}
	}
}

// init prepares the structures the connection's requests reuse.
func (c *conn) init() {
	c.rr.init(c.rwc, c.srv.headLimit())
	if tb, ok := c.rwc.(bufferedConn); ok {
		c.rr.in.adopt(tb.TakeBuffered())
	}
	c.rr.in.onErr = c.cancelInflight
	c.bufw = getWriter(&writer4kPool, connWriter{c}, 4<<10)
	c.resp.c = c
	c.resp.header = make(http.Header, 8)
	c.resp.cw.w = &c.resp
	c.resp.ww = getWriter(&writer2kPool, &c.resp.cw, bufferBeforeChunkingSize)
	c.tmpl = http.Request{
		Header:     c.rr.header,
		URL:        &c.rr.url,
		RemoteAddr: c.remoteAddr,
		TLS:        c.tlsState,
	}
}

// handshake runs the TLS handshake under the server's handshake timeout
// and hands the connection to TLSNextProto when ALPN chose another
// protocol. It reports whether HTTP/1.x is to be served.
func (c *conn) handshake(tc *tls.Conn) bool {
	d := c.srv.tlsHandshakeTimeout()
	if d > 0 {
		dl := time.Now().Add(d)
		_ = tc.SetReadDeadline(dl)
		_ = tc.SetWriteDeadline(dl)
	}
	err := tc.HandshakeContext(c.ctx)
	if d > 0 {
		// Now, not on return: TakeTLS's taker may own the connection then.
		_ = tc.SetReadDeadline(time.Time{})
		_ = tc.SetWriteDeadline(time.Time{})
	}
	if err != nil {
		reason := err.Error()
		var re tls.RecordHeaderError
		if errors.As(err, &re) && re.Conn != nil && looksLikeHTTP(re.RecordHeader) {
			_, _ = io.WriteString(re.Conn, "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
			_ = re.Conn.Close()
			reason = "client sent an HTTP request to an HTTPS server"
		}
		c.srv.logger().Debug("http1: TLS handshake failed", "remote", c.remoteAddr, "error", reason)
		return false
	}
	st := tc.ConnectionState()
	c.tlsState = &st
	switch proto := st.NegotiatedProtocol; proto {
	case "", "http/1.1", "http/1.0":
		if take := c.srv.TakeTLS; take != nil && take(tc) {
			c.handedOff = true
			c.srv.trackConn(c, false)
			return false
		}
		return true
	default:
		c.handedOff = true
		c.srv.trackConn(c, false)
		if fn := c.srv.TLSNextProto[proto]; fn != nil {
			fn(tc)
		} else {
			_ = tc.Close()
		}
		return false
	}
}

func looksLikeHTTP(hdr [5]byte) bool {
	switch string(hdr[:]) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO":
		return true
	}
	return false
}

// baseDone cancels the request in flight when the connection's context
// ends; requests after it start cancelled.
func (c *conn) baseDone() {
	c.baseErr.Store(context.Canceled)
	c.cancelInflight()
}

// refuse answers a request whose head was refused, as net/http does, or
// says nothing when the connection failed or the client left.
func (c *conn) refuse(err error) {
	var pe *parseError
	if !errors.As(err, &pe) {
		return
	}
	c.srv.logger().Debug("http1: request refused", "remote", c.remoteAddr, "status", pe.status, "reason", pe.reason)
	if d := c.srv.WriteTimeout; d > 0 {
		c.setWriteDeadline(time.Now().Add(d))
	} else if c.wdLeft {
		c.setWriteDeadline(time.Time{}) // left by the last request's handler
	}
	switch pe.status {
	case http.StatusRequestHeaderFieldsTooLarge:
		const publicErr = "431 Request Header Fields Too Large"
		_, _ = io.WriteString(c.rwc, "HTTP/1.1 "+publicErr+errorHeaders+publicErr)
		c.closeWriteAndWait()
	case http.StatusNotImplemented:
		_, _ = io.WriteString(c.rwc, "HTTP/1.1 501 Not Implemented"+errorHeaders+"Unsupported transfer encoding")
	default:
		if pe.reason != "" {
			text := http.StatusText(pe.status)
			fmt.Fprintf(c.rwc, "HTTP/1.1 %d %s: %s%s%d %s: %s", pe.status, text, pe.reason, errorHeaders, pe.status, text, pe.reason)
			return
		}
		_, _ = io.WriteString(c.rwc, "HTTP/1.1 400 Bad Request"+errorHeaders+"400 Bad Request")
	}
}

// fillTemplate sets the connection's template request to the request
// whose head was just read, with body as its Body, and returns it. It
// has no context: serveRequest hands the handler a copy with one.
func (c *conn) fillTemplate(body io.ReadCloser) *http.Request {
	fillRequest(&c.tmpl, &c.rr, body)
	return &c.tmpl
}

// fillRequest sets t to the request whose head rr just read, with body as
// its Body; t's Header, URL, RemoteAddr and TLS are the connection's,
// set once.
func fillRequest(t *http.Request, rr *requestReader, body io.ReadCloser) {
	t.Method = rr.method
	t.RequestURI = rr.target
	t.Proto = rr.proto
	t.ProtoMajor, t.ProtoMinor = rr.major, rr.minor
	t.Host = rr.host
	t.ContentLength = rr.contentLength
	t.Close = rr.close
	t.Body = body
	t.Trailer = rr.trailer
	t.TransferEncoding = nil
	if rr.chunked {
		rr.te[0] = "chunked"
		t.TransferEncoding = rr.te[:1:1]
	}
}

// serveRequest serves the request whose head was just read, and reports
// whether the connection may read another. h is the handler, nil for the
// server's (see handler); ex is the Exchange the request was offered to
// (declined, or materialized by its Serve), nil when it was not offered.
func (c *conn) serveRequest(x *requestContext, t0 time.Time, ex *Exchange, h http.Handler) bool {
	rr := &c.rr
	if err, ok := c.baseErr.Load().(error); ok {
		x.cancel(err)
	}
	var b *body
	var reqBody io.ReadCloser = http.NoBody
	if rr.chunked || rr.contentLength > 0 {
		b = &body{rr: rr, resp: &c.resp, ctx: x, chunked: rr.chunked, remain: rr.contentLength, closing: rr.close}
		reqBody = b
	}
	req := c.fillTemplate(reqBody).WithContext(x)
	if b != nil {
		b.trailer = &req.Trailer
	}
	conn := headerGet(rr.header, "Connection")
	wantsClose := req.Close || hasToken(conn, "close")
	wants10KA := rr.major == 1 && rr.minor == 0 && hasToken(conn, "keep-alive")
	w := &c.resp
	w.reset(req, b, wantsClose, wants10KA)
	if rr.h2Upgrade || ex != nil && ex.closeAfter.Load() {
		w.closeAfterReply = true
	}

	if expect := headerGet(rr.header, "Expect"); hasToken(expect, "100-continue") {
		if req.ProtoAtLeast(1, 1) && req.ContentLength != 0 && b != nil {
			b.expect = true
			w.canWriteContinue.Store(true)
		}
	} else if expect != "" {
		w.header.Set("Connection", "close")
		w.WriteHeader(http.StatusExpectationFailed)
		w.finishRequest()
		return false
	}

	if b != nil {
		// The body is read under the whole-request deadline.
		if d := c.srv.ReadTimeout; d > 0 {
			c.readDeadlineAt(t0.Add(d), slack(d))
		} else {
			c.setReadDeadline(time.Time{})
		}
	}
	if d := c.srv.WriteTimeout; d > 0 {
		c.writeDeadlineIn(time.Now(), d)
	}
	if ex != nil {
		ex.abortAgain()
	}

	if testHookBeforeInflight != nil {
		testHookBeforeInflight()
	}
	c.watchMu.Lock()
	c.inflight.Store(x)
	c.watchMu.Unlock()
	if c.closedNow.Load() {
		// Server.Close closed the connection after the serve loop's
		// shutdown check and before x was in flight for it to cancel.
		x.cancel(context.Canceled)
	}
	if b == nil {
		c.arm(x)
	} else {
		b.armOnEOF = true
	}

	if h == nil {
		h = c.handler(req)
	}
	h.ServeHTTP(w, req)

	c.disarm()
	x.cancel(context.Canceled)
	if c.hijackedFast() {
		return false
	}
	w.finishRequest()
	c.handlerWriteDeadlineDone()
	if !w.shouldReuseConnection() {
		if w.bodyLimitHit || w.closedRequestBodyEarly() {
			c.closeWriteAndWait()
		}
		return false
	}
	return true
}

// handlerWriteDeadlineDone, once a handler (or an exchange) has written
// its response, clears the write deadline it set, or leaves it for the
// next request when it was set with a slack, so that a handler setting
// one for every request moves it only when it must.
func (c *conn) handlerWriteDeadlineDone() {
	if c.srv.WriteTimeout > 0 || c.wd.IsZero() {
		return
	}
	if c.wdWithin {
		c.wdLeft = true
	} else {
		c.setWriteDeadline(time.Time{})
	}
}

func (c *conn) handler(req *http.Request) http.Handler {
	if !c.srv.DisableGeneralOptionsHandler && req.RequestURI == "*" && req.Method == "OPTIONS" {
		return globalOptionsHandler{c}
	}
	if c.srv.Handler == nil {
		return http.DefaultServeMux
	}
	return c.srv.Handler
}

// globalOptionsHandler answers "OPTIONS *" as net/http does: 200, empty,
// reading at most 4 KiB of body before giving up on the connection.
type globalOptionsHandler struct{ c *conn }

func (h globalOptionsHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Length", "0")
	if r.ContentLength == 0 {
		return
	}
	n, _ := io.Copy(io.Discard, io.LimitReader(r.Body, 4<<10+1))
	if n > 4<<10 {
		resp := &h.c.resp
		resp.closeAfterReply = true
		resp.bodyLimitHit = true
		if !resp.wroteHeader {
			w.Header().Set("Connection", "close")
		}
	}
}

// awaitRequest waits, under the idle timeout, for the first bytes of the
// next request (four, as net/http peeks), then sets the deadline for its
// head. It returns when they came, or false when the connection ended.
func (c *conn) awaitRequest(now time.Time) (time.Time, bool) {
	in := &c.rr.in
	in.shrink()
	waited := false
	if in.buffered() < 4 {
		c.readDeadlineIn(now, c.srv.idleTimeout())
		if err := in.fillTo(4, c.srv.headLimit()); err != nil {
			return now, false
		}
		waited = true
	}
	// The clock is read again only when a deadline depends on when the
	// bytes came: most requests need neither.
	d := c.srv.readHeaderTimeout()
	complete := headComplete(in.bytes())
	if waited && (c.srv.ReadTimeout > 0 || !complete && d > 0) {
		now = time.Now()
	}
	switch {
	case complete:
		// Parsed without another read: no head deadline needed.
	case d > 0:
		c.readDeadlineIn(now, d)
	default:
		c.setReadDeadline(time.Time{})
	}
	return now, true
}

// headComplete reports whether b, starting at a request head, holds all
// of it: a line end followed by an empty line.
func headComplete(b []byte) bool {
	return bytes.Contains(b, []byte("\n\r\n")) || bytes.Contains(b, []byte("\n\n"))
}

// slack is how much later than asked a deadline of d may expire: keeping
// a deadline set that far ahead saves setting it for every request, as
// nginx keeps a timer that moved by less than 300 ms. It is an eighth of
// d, at most 500 ms.
func slack(d time.Duration) time.Duration { return min(d/8, 500*time.Millisecond) }

func (c *conn) setReadDeadline(t time.Time) {
	if t.Equal(c.rd) {
		return
	}
	c.rd = t
	_ = c.rwc.SetReadDeadline(t)
}

func (c *conn) setWriteDeadline(t time.Time) {
	c.wdWithin, c.wdLeft = false, false
	if t.Equal(c.wd) {
		return
	}
	c.wd = t
	_ = c.rwc.SetWriteDeadline(t)
}

// writeDeadlineWithin sets the write deadline to t, or leaves one set that
// expires at most slack later than t.
func (c *conn) writeDeadlineWithin(t time.Time, slack time.Duration) error {
	c.wdLeft = false
	if c.wdWithin && !c.wd.IsZero() && !c.wd.Before(t) && !c.wd.After(t.Add(slack)) {
		return nil
	}
	c.wd, c.wdWithin = t.Add(slack), true
	return c.rwc.SetWriteDeadline(c.wd)
}

// readDeadlineIn sets the read deadline to d from now, or leaves a
// deadline set that expires at most slack(d) later than that; d ≤ 0
// clears it.
func (c *conn) readDeadlineIn(now time.Time, d time.Duration) {
	if d <= 0 {
		c.setReadDeadline(time.Time{})
		return
	}
	c.readDeadlineAt(now.Add(d), slack(d))
}

func (c *conn) readDeadlineAt(want time.Time, slack time.Duration) {
	if !c.rd.IsZero() && !c.rd.Before(want) && !c.rd.After(want.Add(slack)) {
		return
	}
	c.setReadDeadline(want.Add(slack))
}

func (c *conn) writeDeadlineIn(now time.Time, d time.Duration) {
	want := now.Add(d)
	s := slack(d)
	if !c.wd.IsZero() && !c.wd.Before(want) && !c.wd.After(want.Add(s)) {
		return
	}
	c.setWriteDeadline(want.Add(s))
}

// testHookBeforeInflight, when set by a test, runs in serveRequest just
// before the request is marked in flight: where a Server.Close that the
// serve loop's shutdown check missed can land.
var testHookBeforeInflight func()

// connWriter writes to the connection and notes the first failure, which
// cancels the request in flight, as net/http's does.
type connWriter struct{ c *conn }

func (w connWriter) Write(p []byte) (int, error) {
	if w.c.wdLeft {
		// Left by the last request's handler, not renewed by this one's.
		w.c.clearLeftWriteDeadline()
	}
	n, err := w.c.rwc.Write(p)
	if err != nil && w.c.werr == nil {
		w.c.werr = err
		w.c.cancelInflight()
	}
	return n, err
}

// cancelInflight cancels the context of the request being served, if any.
func (c *conn) cancelInflight() {
	if x := c.inflight.Load(); x != nil {
		x.cancel(context.Canceled)
	}
}

// closeNow closes the connection from another goroutine (Server.Close):
// the handler in flight, which may be waiting on its context and on
// nothing that reads the connection, sees it cancelled.
func (c *conn) closeNow() {
	c.closedNow.Store(true) // for an exchange's context made after this
	_ = c.rwc.Close()
	c.cancelInflight()
}

// close flushes what is buffered and closes the connection.
func (c *conn) close() {
	if c.bufw != nil {
		_ = c.bufw.Flush()
	}
	_ = c.rwc.Close()
}

// rstAvoidanceDelay bounds how long closeWriteAndWait reads what the
// client still sends, so that our last response is not lost to a reset.
var rstAvoidanceDelay = 500 * time.Millisecond

// closeWriteAndWait sends FIN and then reads and drops what the client
// still sends until it closes its side, for at most rstAvoidanceDelay (RFC
// 9112 section 9.6); net/http sleeps that long instead.
func (c *conn) closeWriteAndWait() {
	if c.bufw != nil {
		_ = c.bufw.Flush()
	}
	if cw, ok := c.rwc.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = c.rwc.SetReadDeadline(time.Now().Add(rstAvoidanceDelay))
	c.rd = time.Time{}
	var buf [1024]byte
	for {
		if _, err := c.rwc.Read(buf[:]); err != nil {
			return
		}
	}
}

// hijack gives the connection to the handler.
func (c *conn) hijack() (net.Conn, *bufio.ReadWriter, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hijackedv {
		return nil, nil, http.ErrHijacked
	}
	c.disarm()
	c.hijackedv = true
	c.hijackFlag.Store(true)
	c.unwatch()
	_ = c.rwc.SetDeadline(time.Time{})
	var br *bufio.Reader
	if left := c.rr.in.bytes(); len(left) > 0 {
		held := bytes.Clone(left)
		c.rr.in.discard(len(left))
		br = bufio.NewReaderSize(io.MultiReader(bytes.NewReader(held), c.rwc), max(4096, len(held)))
		_, _ = br.Peek(len(held))
	} else {
		br = bufio.NewReader(c.rwc)
	}
	if b := c.resp.body; b != nil {
		b.hijacked.Store(true)
	}
	c.bufw.Reset(c.rwc)
	c.setState(http.StateHijacked, time.Now().Unix())
	return c.rwc, bufio.NewReadWriter(br, c.bufw), nil
}
