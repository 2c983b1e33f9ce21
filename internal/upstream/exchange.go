package upstream

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/httpfield"
)

// aLongTimeAgo is a deadline in the past: setting it makes blocked I/O on a
// connection return at once.
var aLongTimeAgo = time.Unix(1, 0)

// roundTripFast sends a fast-path request: it validates req and hands its
// head, written by writeRequest, to [Transport.send].
//
// ctx is the request's context (req.Context() for RoundTrip); see
// SendOptions for opts.
func (t *Transport) roundTripFast(ctx context.Context, req *http.Request, opts SendOptions) (*http.Response, error) {
	method, target, host, err := requestTarget(req)
	if err != nil {
		return nil, err
	}
	if !opts.HeaderValid {
		if err := validateHeader(req.Header); err != nil {
			return nil, err
		}
	}
	head := requestHead{req: req, method: method, target: target, host: host,
		replayable: isReplayable(req), close: wantsClose(req)}
	return t.send(ctx, hostPort(req.URL.Host), head, opts)
}

// send sends a validated head to addr on a checked idle connection or a
// new one, and once more on a new connection when the reused one turns out
// to have been closed, or answers 408, before the request reached the
// upstream (see [Transport.exchange]). It is the fast path of Send,
// RoundTrip and SendHead alike; see SendOptions for opts.
func (t *Transport) send(ctx context.Context, addr string, head requestHead, opts SendOptions) (*http.Response, error) {
	now, deadline := t.applyOptions(&head, opts)
	c := t.takeIdle(addr, now)
	if c != nil {
		resp, retry, err := t.exchange(ctx, c, head, deadline, true)
		if !retry {
			return resp, err
		}
		t.retries.Add(1)
	}
	c, err := t.dial(ctx, addr, deadline)
	if err != nil {
		return nil, err
	}
	resp, _, err := t.exchange(ctx, c, head, deadline, false)
	return resp, err
}

// applyOptions sets what opts say of head's exchange on head, and
// returns when the request is sent (opts.Now, or now) and the deadline of
// its answer's head (zero: none).
func (t *Transport) applyOptions(head *requestHead, opts SendOptions) (now, deadline time.Time) {
	head.got1xx, head.fields, head.slack = opts.Got1xx, opts.Fields, deadlineSlack(opts.HeadTimeout)
	now = opts.Now
	if now.IsZero() {
		now = t.idle.now()
	}
	if opts.HeadTimeout > 0 {
		deadline = now.Add(opts.HeadTimeout)
	}
	return now, deadline
}

// maxProbes bounds how many idle connections a request checks before it
// dials; the others are checked by later requests or expire.
const maxProbes = 4

// takeIdle returns an idle connection to addr on which nothing arrived
// while it was idle, or nil. Every connection it takes is checked first,
// whatever the request: one the upstream closed, reset or timed out (408),
// or on which bytes arrived that no request asked for, is closed, counted,
// and never carries a request.
func (t *Transport) takeIdle(addr string, now time.Time) *conn {
	for range maxProbes {
		c := t.idle.take(addr, now)
		if c == nil {
			return nil
		}
		switch c.prober.probeIdle() {
		case idleOpen:
			return c
		case idleClosed:
			t.idleClosed.Add(1)
		default:
			t.unsolicited.Add(1)
		}
		c.nc.Close()
	}
	return nil
}

// dial opens a connection to addr, bounded by deadline if it is not zero.
func (t *Transport) dial(ctx context.Context, addr string, deadline time.Time) (*conn, error) {
	dctx := ctx
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		dctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	nc, err := t.cfg.DialContext(dctx, "tcp", addr)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			err = context.Cause(ctx)
		case dctx.Err() != nil:
			err = ErrHeadTimeout
		}
		return nil, fmt.Errorf("upstream: dial %s: %w", addr, err)
	}
	t.dials.Add(1)
	return newConn(nc, addr), nil
}

// requestHead is a validated fast-path request: the head to write, either
// serialized from req (Send, RoundTrip) or given as bytes (SendHead), and
// what the exchange decides by it, decided once from whichever was given.
type requestHead struct {
	req        *http.Request                // Send: the request, written by writeRequest; nil for SendHead
	raw        []byte                       // SendHead: the head, written as it is; nil for Send
	method     string                       // as in the request line: a response to HEAD has no body
	target     requestURI                   // Send: req's request target, for writeRequest
	host       string                       // Send: req's Host, for writeRequest
	replayable bool                         // may be sent again once a reused connection failed (isReplayable)
	close      bool                         // the request forbids reusing its connection (wantsClose)
	got1xx     func(int, http.Header) error // nil: the trace hook of the context, if any
	fields     *[]httpfield.Field           // SendOptions.Fields
	slack      time.Duration                // how late the head's deadline may be: deadlineSlack of the timeout
}

// Exchange states: live until the body reaches EOF or fails (ended) or the
// caller closes it (closed); the first transition settles the connection.
const (
	stateLive uint32 = iota
	stateEnded
	stateClosed
)

// exchange is one request and response on one connection. Once the head is
// in it is the response body, and it settles the connection exactly once:
// back to the idle pool or closed.
type exchange struct {
	t        *Transport
	c        *conn
	ctx      context.Context
	br       *bufio.Reader
	stop     func() bool   // stops the context watch; nil when the context cannot end
	body     io.ReadCloser // the body http.ReadResponse made
	deadline bool          // a head deadline is set on the connection
	reused   bool          // c came from the idle pool
	informed bool          // an informational (1xx) head arrived before the final one
	reusable bool          // the response allows another exchange on c
	state    atomic.Uint32
	endErr   error // what Read returns after the body ended; reader's goroutine only
}

// exchange sends head on c and reads the response head. On failure c is
// closed, and retry reports whether the request may be sent once more on a
// new connection: only when c was reused and the upstream had not received
// the request, as net/http decides it:
//   - nothing of the request was written, because the upstream had closed
//     or reset c (any method: a bodyless request of which no byte left was
//     not received);
//   - c was closed or reset before any response byte arrived, and the
//     request is replayable;
//   - the first response head is 408 Request Timeout, and the request is
//     replayable: the upstream timed c out just as the request left, and
//     RFC 9110 §15.5.9 lets a client repeat a request in transit then.
func (t *Transport) exchange(ctx context.Context, c *conn, head requestHead, deadline time.Time, reused bool) (resp *http.Response, retry bool, err error) {
	x := &exchange{t: t, c: c, ctx: ctx, reused: reused}
	c.beginExchange(t.cfg.MaxResponseHeaderBytes)
	c.headDeadline(deadline, head.slack)
	x.deadline = !deadline.IsZero()
	// Registered after the head deadline is set, so that the past deadline
	// the watch sets is never overwritten by it.
	x.stop = afterFunc(ctx, c.abort)
	bw, err := x.writeHead(head)
	if err != nil {
		return x.writeFailed(head, err)
	}
	x.br = readerPool.Get().(*bufio.Reader)
	x.br.Reset(c)
	resp, err = x.readHead(head)
	// A held head was sent by the first read, or never will be.
	c.pending = nil
	if bw != nil {
		putWriter(bw)
	}
	if c.sendErr != nil {
		return x.writeFailed(head, c.sendErr)
	}
	if err != nil {
		return nil, x.isStale(c.readErr) && head.replayable, x.fail("read response head", err)
	}
	return x.headRead(resp, head)
}

// headRead settles what a response head read without error decides: the
// head deadline lifted when the body is still to come, a 408 on a reused
// connection turned into a retry, and the connection's reuse once the
// body ends.
func (x *exchange) headRead(resp *http.Response, head requestHead) (_ *http.Response, retry bool, err error) {
	c, ctx := x.c, x.ctx
	if x.deadline {
		if !bodyBuffered(resp, x.br) {
			// The body may take as long as it takes.
			c.clearDeadline()
		}
		// A watch that fired before the line above had its deadline erased.
		if ctx.Err() != nil {
			return nil, false, x.fail("read response head", ctx.Err())
		}
	}
	if resp.StatusCode == http.StatusRequestTimeout && x.reused && !x.informed && ctx.Err() == nil && head.replayable {
		return nil, true, x.fail("read response head", errReusedTimedOut)
	}
	x.reusable = resp.ProtoAtLeast(1, 1) && !resp.Close && !head.close
	if resp.Body == http.NoBody {
		x.end(stateEnded, x.reusable)
		return resp, false, nil
	}
	x.body = resp.Body
	resp.Body = x
	return resp, false, nil
}

// bodyBuffered reports whether the whole body of resp is in br already, so
// that reading it touches no socket and needs no deadline lifted.
func bodyBuffered(resp *http.Response, br *bufio.Reader) bool {
	if resp.Body == http.NoBody {
		return true
	}
	return resp.ContentLength >= 0 && len(resp.TransferEncoding) == 0 && int64(br.Buffered()) >= resp.ContentLength
}

// afterFuncer is a context that runs a function when it ends by itself,
// as internal/http1's request contexts do: context.AfterFunc would first
// ask such a context for its Done channel, which it makes only then.
type afterFuncer interface {
	AfterFunc(func()) (stop func() bool)
}

// afterFunc arranges for f to run in its own goroutine when ctx ends, as
// context.AfterFunc does; nil when ctx cannot end.
func afterFunc(ctx context.Context, f func()) (stop func() bool) {
	if a, ok := ctx.(afterFuncer); ok {
		return a.AfterFunc(f)
	}
	if ctx.Done() == nil {
		return nil
	}
	return context.AfterFunc(ctx, f)
}

// errReusedTimedOut is the reason an exchange on a reused connection that
// got 408 ended; the request is then sent again, so it is never returned.
var errReusedTimedOut = errors.New("upstream: 408 request timeout as the first response on a reused connection")

// writeHead writes the request head. When the whole head is still in the
// writer's buffer and the connection is a plain socket, it is not sent
// here: the connection holds it, and the first read of the answer sends it
// (see conn.sendThenRead). writeHead then returns the writer, whose buffer
// the held head is, for the caller to give back once that read is done.
// A head given as bytes is held as it is, whatever its length, or written
// at once when the connection is not a plain socket; the connection holds
// the caller's bytes only until that first read.
func (x *exchange) writeHead(head requestHead) (held *bufio.Writer, err error) {
	if head.raw != nil {
		x.c.holdHead = x.c.raw != nil && x.c.nwritten == 0
		_, err = x.c.Write(head.raw)
		x.c.holdHead = false
		return nil, err
	}
	bw := writerPool.Get().(*bufio.Writer)
	bw.Reset(x.c)
	writeRequest(bw, head.req, head.method, head.target, head.host)
	hold := x.c.raw != nil && x.c.nwritten == 0 && bw.Buffered() > 0
	x.c.holdHead = hold
	err = bw.Flush()
	x.c.holdHead = false
	if hold && err == nil {
		return bw, nil
	}
	putWriter(bw)
	return nil, err
}

func putWriter(bw *bufio.Writer) {
	bw.Reset(nil)
	writerPool.Put(bw)
}

// writeFailed settles the connection after the request head could not be
// sent, and reports whether the request may go once more on a new
// connection, with the error explained.
func (x *exchange) writeFailed(head requestHead, err error) (_ *http.Response, retry bool, _ error) {
	retry = x.isStale(err) && (x.c.nwritten == 0 || head.replayable)
	return nil, retry, x.fail("write request", err)
}

// readHead reads response heads until a final one, passing informational
// ones to head.got1xx or else the request's trace hook. The final one's
// Request is head.req: Send's request, or nil for SendHead.
func (x *exchange) readHead(head requestHead) (*http.Response, error) {
	got1xx := head.got1xx
	if got1xx == nil {
		if trace := httptrace.ContextClientTrace(x.ctx); trace != nil && trace.Got1xxResponse != nil {
			got1xx = func(code int, h http.Header) error { return trace.Got1xxResponse(code, textproto.MIMEHeader(h)) }
		}
	}
	for {
		resp, err := readResponse(x.br, head.method, head.fields)
		if err != nil {
			return nil, err
		}
		code := resp.StatusCode
		if code < 100 || code > 199 {
			x.c.liftReadLimit()
			resp.Request = head.req
			return resp, nil
		}
		if code == http.StatusSwitchingProtocols {
			return nil, ErrUnexpectedSwitch
		}
		x.informed = true
		if got1xx != nil {
			if err := got1xx(code, resp.Header); err != nil {
				return nil, fmt.Errorf("got1xxResponse hook: %w", err)
			}
		}
	}
}

// isStale reports whether err, on a reused connection before any response
// byte, means the upstream had closed or reset the connection: it closed it
// while idle after the check, or as the request arrived.
func (x *exchange) isStale(err error) bool {
	if !x.reused || x.c.nread != 0 || x.ctx.Err() != nil {
		return false
	}
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// fail settles the connection as closed and returns err explained.
func (x *exchange) fail(what string, err error) error {
	x.end(stateEnded, false)
	return x.explain(what, err)
}

// explain wraps err with what was being done, preferring the reason the
// context ended, then the head bound and the head deadline, to the bare I/O
// error those cause.
func (x *exchange) explain(what string, err error) error {
	switch {
	case x.ctx.Err() != nil:
		err = context.Cause(x.ctx)
	case errors.Is(err, errHeadLimit):
		return fmt.Errorf("upstream: %s: %w (limit %d bytes)", what, ErrHeadTooLarge, x.t.cfg.MaxResponseHeaderBytes)
	case x.deadline && (errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(x.c.readErr, os.ErrDeadlineExceeded)):
		// The second: a head deadline that struck inside a line, which
		// bufio.Reader.ReadLine hands out, dropping the error, for
		// http.ReadResponse to find malformed.
		err = ErrHeadTimeout
	}
	return fmt.Errorf("upstream: %s: %w", what, err)
}

// end settles the connection once: to the idle pool when reuse holds, the
// connection can be checked when taken again and the exchange left nothing
// unread; closed otherwise. Later calls do nothing.
func (x *exchange) end(state uint32, reuse bool) {
	if !x.state.CompareAndSwap(stateLive, state) {
		return
	}
	if x.stop != nil && !x.stop() {
		// The context ended: its watch has set, or is setting, a past
		// deadline on the connection.
		reuse = false
	}
	if reuse && x.c.prober == nil {
		reuse = false // nothing could tell whether bytes arrive while it is idle
	}
	if reuse && x.br.Buffered() != 0 {
		// Bytes beyond what the response's framing accounts for: they
		// answer no request, and what follows them cannot be trusted.
		reuse = false
		x.t.unsolicited.Add(1)
	}
	if reuse {
		x.releaseReader()
		x.t.idle.put(x.c)
		return
	}
	x.c.nc.Close()
	// A Close from another goroutine may race with a Read still using the
	// reader: only the reading side hands it back.
	if state != stateClosed {
		x.releaseReader()
	}
}

func (x *exchange) releaseReader() {
	if x.br != nil {
		x.br.Reset(nil)
		readerPool.Put(x.br)
		x.br = nil
	}
}

// Read reads the response body. At EOF the connection is settled, and
// later reads return io.EOF; after Close they return
// [http.ErrBodyReadAfterClose].
func (x *exchange) Read(p []byte) (int, error) {
	switch x.state.Load() {
	case stateEnded:
		return 0, x.endErr
	case stateClosed:
		return 0, http.ErrBodyReadAfterClose
	}
	n, err := x.body.Read(p)
	switch {
	case err == nil:
		return n, nil
	case err == io.EOF:
		x.endErr = io.EOF
		x.end(stateEnded, x.reusable)
		return n, io.EOF
	}
	x.endErr = x.explain("read response body", err)
	x.end(stateEnded, false)
	return n, x.endErr
}

// Close ends the body. Before EOF it closes the connection, unblocking a
// concurrent Read; after EOF it does nothing. It always returns nil.
func (x *exchange) Close() error {
	x.end(stateClosed, false)
	return nil
}
