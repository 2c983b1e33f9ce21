package http1

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// ExchangeHandler serves requests at the level of bytes (see
// [Server.Exchanges]).
type ExchangeHandler interface {
	// ServeExchange either serves x to its end and returns true, or
	// declines it and returns false having done nothing with x but read
	// its head (Head, Fields, RawHead): the server then serves the
	// request through Handler as if ServeExchange had not been called.
	// (A declined exchange may also have called Context, which the
	// handler's request then carries, CloseAfter, or Abort; writing
	// anything and declining is a bug: the server logs it and closes the
	// connection.)
	ServeExchange(x *Exchange) bool
}

// An Exchange is one request offered to [Server.Exchanges], with the
// means to answer it with bytes of the caller's own making, or to hand it
// to an [http.Handler] (Serve). Only requests without a body
// (Content-Length 0 or absent, not chunked) and without an Expect field
// are offered, and never "OPTIONS *" while the server answers it itself:
// there is no body to read and no 100 Continue to send.
//
// A connection has one Exchange, reused for each of its requests: it is
// valid only during the ServeExchange call it was passed to, and must not
// be kept or used after that returns. Its methods are for the goroutine
// running ServeExchange (or goroutines it synchronizes with), as a
// ResponseWriter's are, except Abort and CloseAfter, which any goroutine
// may call at any time during the call.
type Exchange struct {
	c  *conn
	t0 time.Time // when the head's first bytes came

	// Owned by the serving goroutine.
	inside bool // between begin and stop
	wrote  bool // something was written through Write
	served bool // Serve was called
	keep   bool // serveRequest's verdict, after Serve

	closeAfter atomic.Bool
	ctx        atomic.Pointer[requestContext] // made by Context or Serve
	abort      func()                         // x.Abort, made once (AbortFunc)

	// mu orders Abort with the exchange's end, with Context, and with the
	// write deadlines the serving goroutine sets, so that none of them
	// undoes Abort's.
	mu      sync.Mutex
	live    bool // ServeExchange is running
	aborted bool
}

// offerable reports whether the request whose head was just read goes to
// Server.Exchanges: it has no body and no Expect, and is not the "OPTIONS
// *" that globalOptionsHandler answers.
func (c *conn) offerable() bool {
	rr := &c.rr
	return rr.contentLength == 0 && !rr.chunked && rr.flags&keyExpect == 0 &&
		(c.srv.DisableGeneralOptionsHandler || rr.target != "*" || rr.method != "OPTIONS")
}

// offer offers the request whose head was just read to Server.Exchanges
// and serves it through serveRequest when the hook declines it. It
// reports whether the connection may read another request. *inFlight is
// set to the context of a declined request, for serve's recover.
func (c *conn) offer(t0 time.Time, inFlight **requestContext) bool {
	x := c.ex
	if x == nil {
		x = &Exchange{c: c}
		x.abort = x.Abort
		c.ex = x
	}
	if d := c.srv.WriteTimeout; d > 0 {
		c.writeDeadlineIn(time.Now(), d)
	}
	x.begin(t0)
	served := c.srv.Exchanges.ServeExchange(x)
	ctx, aborted := x.stop()
	switch {
	case x.served:
		if !served {
			c.srv.logger().Error("http1: ServeExchange returned false after Serve", "remote", c.remoteAddr)
			return false
		}
		return x.keep && !aborted && !x.closeAfter.Load()
	case !served && x.wrote:
		c.srv.logger().Error("http1: ServeExchange declined a request after writing to it", "remote", c.remoteAddr)
		c.endExchange(ctx)
		return false
	case !served:
		if ctx == nil {
			ctx = newRequestContext(c)
		}
		*inFlight = ctx
		return c.serveRequest(ctx, t0, x, nil) && !aborted
	}
	c.endExchange(ctx)
	err := c.bufw.Flush()
	c.handlerWriteDeadlineDone()
	return err == nil && c.werr == nil && !aborted && !x.closeAfter.Load() && !c.rr.close
}

// endExchange ends the context of an exchange served (or botched) without
// serveRequest, as serveRequest ends its request's after the handler.
func (c *conn) endExchange(ctx *requestContext) {
	if ctx != nil {
		c.disarm()
		ctx.cancel(context.Canceled)
	}
}

func (x *Exchange) begin(t0 time.Time) {
	x.t0 = t0
	x.inside, x.wrote, x.served, x.keep = true, false, false, false
	x.closeAfter.Store(false)
	x.mu.Lock()
	x.live, x.aborted = true, false
	x.ctx.Store(nil)
	x.mu.Unlock()
}

// stop marks the end of ServeExchange and returns the exchange's context,
// if one was made, and whether Abort was called.
func (x *Exchange) stop() (*requestContext, bool) {
	x.inside = false
	x.mu.Lock()
	x.live = false
	aborted := x.aborted
	x.mu.Unlock()
	return x.ctx.Load(), aborted
}

// mustBeUsable panics when a method that answers the request is called
// outside ServeExchange or after Serve took the request over.
func (x *Exchange) mustBeUsable(method string) {
	switch {
	case !x.inside:
		panic("http1: Exchange." + method + " called after ServeExchange returned")
	case x.served:
		panic("http1: Exchange." + method + " called after Serve")
	}
}

// Head returns the request as the server would hand it to Handler, except
// that its context is context.Background() and its Body http.NoBody:
// method, URL, RequestURI, protocol, Host, Header, ContentLength (0),
// Close, RemoteAddr, TLS. It is the connection's own, reused for each
// request, and read-only: changing it (or its Header) changes the request
// a declined exchange passes to Handler. Making it costs nothing.
func (x *Exchange) Head() *http.Request {
	return x.c.fillTemplate(http.NoBody)
}

// RawHead returns the request head as received, from the request line to
// the empty line that ends it, line ends included; nil after Serve. It is
// the server's input buffer: read-only, and valid only until
// ServeExchange returns.
func (x *Exchange) RawHead() []byte {
	if !x.inside || x.served {
		return nil
	}
	return x.c.rr.head
}

// Fields calls fn with each header line of the head, in order: the name
// as written (not canonicalized), the value without the whitespace around
// it, and the whole line with its line end. It returns false, without
// calling fn for it or the rest, at a line continued on the next (obs-fold:
// its value must be joined, see Head), or when fn returns false, or when
// the head's bytes are not available (RawHead is nil); true when fn saw
// every line. The server's parser checked every line already.
func (x *Exchange) Fields(fn func(name, value, line []byte) bool) bool {
	head := x.RawHead()
	if head == nil {
		return false
	}
	return headFields(head, fn)
}

// headFields is Fields over a head the parser accepted. It reads the lines
// from the bytes themselves rather than from where the parser found them:
// the parser does not run over a head that repeats the previous one byte
// for byte (see prevHead), and does not look into the lines that repeat
// the previous head's.
func headFields(head []byte, fn func(name, value, line []byte) bool) bool {
	i := bytes.IndexByte(head, '\n')
	if i < 0 {
		return false
	}
	for pos := i + 1; pos < len(head); {
		j := bytes.IndexByte(head[pos:], '\n')
		if j < 0 {
			return false
		}
		next := pos + j + 1
		content := head[pos : pos+j]
		if n := len(content); n > 0 && content[n-1] == '\r' {
			content = content[:n-1]
		}
		if len(content) == 0 {
			return true // the empty line: the end of the head
		}
		if next < len(head) && (head[next] == ' ' || head[next] == '\t') {
			return false // folded
		}
		colon := bytes.IndexByte(content, ':')
		if colon < 0 {
			return false // not a head the parser accepted
		}
		if !fn(content[:colon], trimOWSBytes(content[colon+1:]), head[pos:next]) {
			return false
		}
		pos = next
	}
	return false
}

func trimOWSBytes(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// Context returns the request's context, made on the first call: the
// context Handler's request would carry. It is cancelled when the client
// goes away (closes, half-closes or resets the connection) from the first
// call on, when the connection's base context ends, when a write to the
// connection fails, when the Server is closed, on Abort, and when
// ServeExchange returns.
func (x *Exchange) Context() context.Context {
	if ctx := x.ctx.Load(); ctx != nil {
		return ctx
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if ctx := x.ctx.Load(); ctx != nil {
		return ctx
	}
	if !x.live {
		return canceledContext
	}
	return x.newContextLocked()
}

// canceledContext is what Context returns outside ServeExchange.
var canceledContext = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// newContextLocked makes the exchange's context, as serveRequest makes a
// request's for a request without a body: armed with the client-gone
// watch, in flight for write failures and Server.Close. Under x.mu.
func (x *Exchange) newContextLocked() *requestContext {
	c := x.c
	ctx := newRequestContext(c)
	x.ctx.Store(ctx)
	if err, ok := c.baseErr.Load().(error); ok {
		ctx.cancel(err)
	}
	if x.aborted || c.werr != nil {
		ctx.cancel(context.Canceled)
	}
	c.watchMu.Lock()
	c.inflight.Store(ctx)
	c.watchMu.Unlock()
	if c.closedNow.Load() {
		// Server.Close ran before the context was in flight.
		ctx.cancel(context.Canceled)
	}
	c.arm(ctx)
	return ctx
}

// Write writes p to the connection, through the connection's 4 KiB
// buffer: the bytes of the response, head and body, as the client is to
// read them. What is still buffered when ServeExchange returns is
// flushed then. A failed write cancels Context, and the connection closes
// once the exchange ends.
func (x *Exchange) Write(p []byte) (int, error) {
	x.mustBeUsable("Write")
	if len(p) > 0 {
		x.wrote = true
	}
	return x.c.bufw.Write(p)
}

// WriteString is Write for a string.
func (x *Exchange) WriteString(s string) (int, error) {
	x.mustBeUsable("WriteString")
	if len(s) > 0 {
		x.wrote = true
	}
	return x.c.bufw.WriteString(s)
}

// WriteInformational sends an informational response (1xx other than 101)
// at once, as the server sends one a handler writes: the status line, the
// fields of header sorted by name without framing fields, an empty line.
// It is not the response: Serve may still be called after it.
func (x *Exchange) WriteInformational(code int, header http.Header) error {
	x.mustBeUsable("WriteInformational")
	if code < 100 || code > 199 || code == http.StatusSwitchingProtocols {
		return fmt.Errorf("http1: status %d is not informational", code)
	}
	c := x.c
	bw := c.bufw
	writeStatusLine(bw, c.rr.major == 1 && c.rr.minor >= 1, code)
	c.resp.writeLinesOf(bw, header, true)
	_, _ = bw.WriteString("\r\n")
	return bw.Flush()
}

// Closing reports whether the connection is to close once this exchange
// ends, so that the response should say "Connection: close": the request
// or CloseAfter asked for it, or the server is shutting down.
func (x *Exchange) Closing() bool {
	c := x.c
	return x.closeAfter.Load() || c.rr.close || c.srv.shuttingDown() || !(c.rr.major == 1 && c.rr.minor >= 1)
}

// Flush sends what Write buffered.
func (x *Exchange) Flush() error {
	x.mustBeUsable("Flush")
	return x.c.bufw.Flush()
}

// SetWriteDeadlineWithin is what the ResponseWriter's
// SetWriteDeadlineWithin is: it sets the connection's write deadline to
// t, or leaves one set by an earlier call (of this exchange or of an
// earlier request) that expires no earlier than t and at most slack
// later; a deadline left so is cleared before the next request's
// response unless that request renews it. A zero t clears the deadline.
// After Abort it sets nothing and returns os.ErrDeadlineExceeded.
func (x *Exchange) SetWriteDeadlineWithin(t time.Time, slack time.Duration) error {
	x.mustBeUsable("SetWriteDeadlineWithin")
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.aborted {
		return os.ErrDeadlineExceeded
	}
	return x.c.resp.SetWriteDeadlineWithin(t, slack)
}

// Abort ends the exchange: it sets the connection's read and write
// deadlines in the past, so that a write blocked on a client that does
// not read fails at once, and cancels Context, as setting both deadlines
// in the past through http.ResponseController does on a handler's
// request. The connection closes once the exchange ends. It may be called
// from any goroutine, and does nothing once ServeExchange returned.
func (x *Exchange) Abort() {
	x.mu.Lock()
	if !x.live {
		x.mu.Unlock()
		return
	}
	x.aborted = true
	_ = x.c.rwc.SetReadDeadline(aLongTimeAgo)
	_ = x.c.rwc.SetWriteDeadline(aLongTimeAgo)
	ctx := x.ctx.Load()
	x.mu.Unlock()
	if ctx != nil {
		ctx.cancel(context.Canceled)
	}
}

// abortAgain sets Abort's past deadlines again when Abort was called: the
// deadlines serveRequest sets before its handler runs may have replaced
// them.
func (x *Exchange) abortAgain() {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.aborted {
		x.c.setReadDeadline(aLongTimeAgo)
		x.c.setWriteDeadline(aLongTimeAgo)
	}
}

// clearLeftWriteDeadline clears the write deadline the last request left
// (see conn.wdLeft) before anything more is written, unless an exchange's
// Abort has set one in the past since.
func (c *conn) clearLeftWriteDeadline() {
	if x := c.ex; x != nil {
		x.mu.Lock()
		defer x.mu.Unlock()
		if x.aborted {
			return
		}
	}
	c.setWriteDeadline(time.Time{})
}

// AbortFunc returns Abort as a function value, made once for the
// connection: for a hook that ends the exchange (a permit's reclaim)
// without a closure made for every request.
func (x *Exchange) AbortFunc() func() { return x.abort }

// CloseAfter makes the connection close once the exchange ends instead
// of reading another request. A response written through Write should
// then say "Connection: close"; one written by Serve's handler does. It
// may be called from any goroutine. The connection also closes after a
// request that asked for it (Head().Close), after a failed write and
// after Abort.
func (x *Exchange) CloseAfter() { x.closeAfter.Store(true) }

// Serve serves the request through h (nil: the Server's Handler) exactly
// as the server serves a request it did not offer: h gets an
// *http.Request with Context as its context and the connection's
// ResponseWriter (Flush, Hijack, http.ResponseController), and the server
// completes the response and decides keep-alive as it does after a
// handler. ServeExchange must return true once Serve returned, and use
// nothing of x but Context, Head, Abort and CloseAfter. Calling Serve
// after Write, or twice, is a bug: it panics.
func (x *Exchange) Serve(h http.Handler) {
	x.mustBeUsable("Serve")
	if x.wrote {
		panic("http1: Exchange.Serve called after Write")
	}
	x.served = true
	ctx := x.ctx.Load()
	if ctx == nil {
		x.mu.Lock()
		ctx = x.newContextLocked()
		x.mu.Unlock()
	}
	x.keep = x.c.serveRequest(ctx, x.t0, x, h)
}
