package bytepath

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/accesslog"
	"github.com/seed-a07d1050/portcullis/internal/evloop"
	"github.com/seed-a07d1050/portcullis/internal/exchange"
	"github.com/seed-a07d1050/portcullis/internal/http1"
	"github.com/seed-a07d1050/portcullis/internal/relay"
	uptransport "github.com/seed-a07d1050/portcullis/internal/upstream"
)

// Loops is the evloop.Handler of an http or https listener's event loops,
// with http1_server eventloop: its plain connections, and the HTTP/1.x
// connections of an https listener once Go's poller ran their handshake
// (evloop.TLSServer, http1.Server.TakeTLS), are served by the loops
// (internal/evloop) for as long as their requests are ones the lean path
// takes. Loops decides, on a loop's thread, with the lean path's own
// pieces: the server's parser and checks (http1.HeadParser), the route's
// pick, httplimit's admission, the relay's upstream head, the upstream
// transport's reading of the answer's head, the lean path's answer and
// exchange.Ended's log line and metrics.
//
// What it does not serve itself goes where it would have gone:
//   - a request it does not take, before anything was counted or sent,
//     goes back with its connection to the listener's server, which reads
//     it again and serves it and every later request of the connection
//     (the lean path first);
//   - an exchange under way that it will not finish (an answer the lean
//     path does not write itself, an upstream that failed, a client that
//     left) is resumed on a goroutine: the server reads the request again
//     and serves it through the relay's own code, which reads the answer
//     from the upstream connection the loop hands over
//     (uptransport.Transport.Adopt) or answers the failure, with the
//     admission already recorded.
type Loops struct {
	l   *Listener
	srv *http1.Server // the listener's server: lean, for what the loops give back

	// PanicHook, when set before Start, is called by the loops' exchanges
	// at a step ("begin", once the permits are taken; "reply"), for the
	// tests of what a panic there gives back. Nil: none.
	PanicHook func(step string, r *http.Request)
}

// NewLoops returns the handler of the event loops of the listener l
// describes; srv is the listener's server, which serves what the loops
// give back (with a [Poller] as its Exchanges, so that the lean path
// still serves what it can of it).
func NewLoops(l Listener, srv *http1.Server) *Loops {
	return &Loops{l: l.settled(), srv: srv}
}

var _ evloop.Handler = (*Loops)(nil)

// Takes reports whether the loops may serve any exchange under the
// listener's configuration now. When none (every route has a rate limit,
// a cluster limit or a hostname upstream, or the listener authenticates),
// a connection would only be adopted to be given back at its first
// request: the listener's server keeps it from the start.
func (le *Loops) Takes() bool {
	lt := le.l.Table()
	return lt != nil && lt.OnLoop
}

// Start starts the event loops of the listener, counting what they do in
// counts. It fails, having started nothing, when le has no server to give
// connections back to, or when the loops cannot run (evloop.New).
func (le *Loops) Start(counts *evloop.Counts) (*evloop.Server, error) {
	if le.srv == nil {
		return nil, errors.New("bytepath: starting event loops: no server for what they give back")
	}
	maxHead, headTimeout, idleTimeout := le.srv.ReadLimits()
	return evloop.New(evloop.Config{
		Handler:           le,
		Counts:            counts,
		ReadHeaderTimeout: headTimeout,
		IdleTimeout:       idleTimeout,
		WriteTimeout:      le.srv.WriteTimeout,
		MaxHeadBytes:      maxHead,
		Logger:            le.l.Log,
	})
}

// loopConn is a connection's state on a loop: the parser of its heads,
// its peer's address, parsed once, its keys under the limits, and the
// last request head it sent with the upstream head relayed for it.
type loopConn struct {
	parser *http1.HeadParser
	peer   netip.Addr
	keys   peerKeys

	lastRelay *relay.Relay // nil: no upstream head kept
	lastHead  []byte
	lastUp    []byte

	// client is the access lines' client of every request, when the peer
	// is (invalid otherwise), as found under clientsOf.
	client    netip.Addr
	clientsOf *accesslog.Clients
	clientSet bool
}

// accessClient returns the client the access line of each of the
// connection's requests names, when the peer is the client of them all
// under clients; invalid when each request's own header may name it.
func (lc *loopConn) accessClient(clients *accesslog.Clients) netip.Addr {
	if !lc.clientSet || lc.clientsOf != clients {
		lc.client, lc.clientsOf, lc.clientSet = netip.Addr{}, clients, true
		if clients.PeerIsClient(lc.peer) {
			lc.client = lc.peer
		}
	}
	return lc.client
}

// upstreamHead returns lx.upstreamHead(r, rl, u). When head is byte for
// byte the connection's last request head, relayed through the same
// route's relay (the same table), the upstream head is that request's:
// it depends on nothing else (the request, parsed from head; the peer;
// the relay's forwarding settings), and a keep-alive client often sends
// the same head again and again.
func (lc *loopConn) upstreamHead(lx *loopExchange, head []byte, r *http.Request, rl *relay.Relay, u *relay.Upstream) (uptransport.Head, bool) {
	if lc.lastRelay == rl && bytes.Equal(head, lc.lastHead) {
		lx.buf = append(lx.buf[:0], lc.lastUp...)
		return uptransport.Head{Addr: u.HostPort(), Method: r.Method, Bytes: lx.buf}, true
	}
	h, ok := lx.upstreamHead(r, rl, u)
	lc.lastRelay = nil
	if ok && len(head) <= maxKeptHead {
		lc.lastRelay = rl
		lc.lastHead = append(lc.lastHead[:0], head...)
		lc.lastUp = append(lc.lastUp[:0], h.Bytes...)
	}
	return h, ok
}

// maxKeptHead bounds the request head a connection keeps for the next
// (most are shorter): memory held by every kept-alive connection.
const maxKeptHead = 2 << 10

func (le *Loops) connOf(c *evloop.Conn) *loopConn {
	if lc, ok := c.Value.(*loopConn); ok {
		return lc
	}
	maxHead, _, _ := le.srv.ReadLimits()
	remote := c.RemoteAddr().String()
	lc := &loopConn{parser: http1.NewHeadParser(remote, maxHead-4096)}
	lc.parser.SetTLS(c.TLS())
	if ap, err := netip.ParseAddrPort(remote); err == nil {
		lc.peer = ap.Addr() // as exchange.PeerAddr reads each request's RemoteAddr
	}
	c.Value = lc
	return lc
}

// Begin takes the request whose head is head when the lean path would,
// and its admission grants it at once; nil otherwise, having counted and
// sent nothing.
func (le *Loops) Begin(c *evloop.Conn, head []byte) evloop.Exchange {
	l := le.l
	lt := l.Table()
	if lt == nil {
		return nil
	}
	lc := le.connOf(c)
	r, ok := lc.parser.Parse(head)
	if !ok {
		return nil
	}
	rt, ok := lt.take(l, r)
	if !ok || !rt.onLoop {
		return nil
	}
	start := c.Now() // the loop's clock: see evloop.Conn.Now
	lx := loopExchangePool.Get().(*loopExchange)
	defer lx.putOnPanic() // the permits taken so far go back; the loop ends the connection
	lx.le, lx.c, lx.r, lx.rt, lx.opts, lx.counts, lx.start = le, c, r, rt, &lt.Opts, lt.Counts, start
	lx.peer = lc.peer
	rl := rt.relay
	lx.u = rl.Upstreams().PickExcept(nil)
	if ids := rl.RequestIDs(); ids != nil {
		lx.st.RequestID = ids.Of(r, lc.peer)
	}
	h, ok := lc.upstreamHead(lx, head, r, rl, lx.u)
	h = lx.withRequestID(h, rl)
	if !ok || !lx.admit(lx.abort, r, rt, &lc.keys) {
		lx.put()
		return nil
	}
	lx.head = h
	if le.PanicHook != nil {
		le.PanicHook("begin", r)
	}
	st := &lx.st
	if st.Metrics == nil {
		st.Metrics = lt.Opts.Metrics
	}
	if lt.Opts.Log != nil {
		st.Client = lc.accessClient(lt.Opts.Clients)
	}
	l.Active.Add(1)
	// Admission on a loop never waits, and the head was built above: the
	// request goes upstream within the loop's turn.
	lx.sent = start
	return lx
}

// HandBack serves a connection the loops gave back on the listener's
// server.
func (le *Loops) HandBack(c net.Conn) { _ = le.srv.ServeConn(c) }

// Left releases what the connection held on the loop.
func (le *Loops) Left(c *evloop.Conn) {
	if lc, ok := c.Value.(*loopConn); ok {
		lc.parser.Release()
		c.Value = nil
	}
}

// loopExchange is one exchange on a loop: the lean path's state with what
// the loop needs besides, pooled.
type loopExchange struct {
	leanExchange
	le      *Loops
	c       *evloop.Conn
	r       *http.Request // the connection's parser's: valid until the loop's next Begin on c
	rt      *Route
	opts    *exchange.Opts
	counts  *exchange.LeanCounts
	u       *relay.Upstream
	head    uptransport.Head
	tries   int
	start   time.Time // when the head was whole
	sent    time.Time // when the request went upstream
	got     time.Time // when the answer's head came; zero until Reply when its body came with it
	heads   uptransport.SimpleHeadReader
	resp    *http.Response // heads's, once the answer's head is in
	whole   int            // the answer's length, head and body, once its head is in
	bodyAt  int            // where its body starts
	replied bool           // Reply ran: the status and size are recorded
	abortMu sync.Mutex
	aborted bool // the limit's reclaim cut the exchange
	abort   func()
}

var loopExchangePool = sync.Pool{New: func() any {
	lx := &loopExchange{}
	lx.buf = make([]byte, 0, 4<<10)
	lx.got1xx = lx.writeInformational
	lx.abort = lx.cut
	return lx
}}

// cut is the abort the limits' reclaim calls: the connection ends, and
// the exchange with it.
func (lx *loopExchange) cut() {
	lx.abortMu.Lock()
	lx.aborted = true
	c := lx.c
	lx.abortMu.Unlock()
	if c != nil {
		c.Abort()
	}
}

// putOnPanic puts lx back, with what it holds, when Begin panics, and
// panics on.
func (lx *loopExchange) putOnPanic() {
	if r := recover(); r != nil {
		lx.put()
		panic(r)
	}
}

func (lx *loopExchange) put() {
	lx.release()
	lx.reset()
	lx.abortMu.Lock()
	lx.aborted, lx.c = false, nil
	lx.abortMu.Unlock()
	lx.le, lx.r, lx.rt, lx.opts, lx.counts, lx.u = nil, nil, nil, nil, nil, nil
	lx.head = uptransport.Head{}
	lx.tries, lx.resp, lx.whole, lx.bodyAt, lx.replied = 0, nil, 0, 0, false
	lx.got = time.Time{}
	loopExchangePool.Put(lx)
}

func (lx *loopExchange) Upstream() (netip.AddrPort, []byte) { return lx.u.AddrPort(), lx.head.Bytes }

func (lx *loopExchange) HeadTimeout() time.Duration { return lx.rt.relay.HeadTimeout() }

// Refused turns to the route's next upstream, as the relay's sendHead
// does.
func (lx *loopExchange) Refused(netip.AddrPort) (netip.AddrPort, bool) {
	p := lx.rt.relay.Upstreams()
	p.MarkDown(lx.u)
	if lx.tries++; lx.tries >= p.Len() {
		return netip.AddrPort{}, false
	}
	next := p.PickExcept(lx.u)
	if next == nil {
		return netip.AddrPort{}, false
	}
	lx.u = next
	lx.head.Addr = next.HostPort()
	return next.AddrPort(), true
}

// Answer reads the answer's head as the transport would, once it is in,
// and says whether the lean path writes it: then it waits for the body.
func (lx *loopExchange) Answer(b []byte, reused bool) (evloop.Verdict, int) {
	if lx.resp == nil {
		resp, n, ok := lx.heads.Read(b, lx.r.Method, &lx.fields)
		if !ok {
			if !headIn(b) {
				return evloop.More, 0
			}
			return evloop.Resume, 0 // an answer the transport reads otherwise
		}
		if resp.StatusCode == http.StatusRequestTimeout && reused {
			return evloop.Retry, 0 // as the transport retries a 408 on a kept connection
		}
		isHead := lx.r.Method == http.MethodHead
		if !leanAnswer(resp, lx.fields, isHead) {
			return evloop.Resume, 0
		}
		lx.resp, lx.bodyAt, lx.whole = resp, n, n
		if !isHead {
			lx.whole += int(resp.ContentLength)
		}
	}
	if len(b) < lx.whole {
		if lx.got.IsZero() {
			lx.got = lx.c.Now() // the head came before its body
		}
		return evloop.More, 0
	}
	return evloop.Whole, lx.whole
}

// headIn reports whether b holds a whole response head, lines ending in
// CRLF or LF alone as http.ReadResponse reads them.
func headIn(b []byte) bool {
	return bytes.Contains(b, []byte("\n\r\n")) || bytes.Contains(b, []byte("\n\n"))
}

// Reply builds the client's answer as the lean path writes it.
func (lx *loopExchange) Reply(answer []byte) evloop.Reply {
	if lx.le.PanicHook != nil {
		lx.le.PanicHook("reply", lx.r)
	}
	rl, st, o := lx.rt.relay, &lx.st, lx.opts
	// The answer's arrival when it came whole in one read (the common
	// answer: Reply follows at once), its Date and its send deadline.
	now := lx.c.Now()
	if lx.got.IsZero() {
		lx.got = now
	}
	d := lx.got.Sub(lx.sent)
	st.Upstream = max(d, 1)
	rl.ObserveUpstream(d)
	closing := lx.r.Close || lx.c.ShuttingDown()
	b := lx.appendAnswerHead(lx.buf[:0], lx.resp.StatusCode, closing, now)
	b = append(b, answer[lx.bodyAt:lx.whole]...)
	lx.buf = b
	st.Status.Store(int32(lx.resp.StatusCode))
	st.Bytes.Store(int64(lx.whole - lx.bodyAt))
	lx.replied = true
	var by time.Time
	if o.Send > 0 {
		var limit time.Time
		if o.Whole > 0 {
			limit = lx.start.Add(o.Whole)
		}
		by, _ = exchange.SendDeadline(now, o.Send, limit)
	}
	if d := lx.le.srv.WriteTimeout; d > 0 {
		if t := lx.start.Add(d); by.IsZero() || t.Before(by) {
			by = t
		}
	}
	return evloop.Reply{Out: b, Close: closing, KeepUpstream: !lx.resp.Close, WriteBy: by}
}

// Done ends an exchange the loop answered, or cut.
func (lx *loopExchange) Done(err error) {
	if !lx.replied {
		// Cut before its answer (the server closed): the chain records
		// what the relay's failure handler writes for a request whose
		// client is gone.
		lx.st.Status.Store(http.StatusBadGateway)
	}
	lx.release()
	exchange.EndedAt(lx.opts, lx.r, &lx.st, lx.start, lx.c.Now())
	lx.counts.Add(exchange.LeanRelayed)
	lx.le.l.Active.Add(-1)
	lx.put()
}

// Resume serves the exchange on the listener's server: it reads the
// request again from client and serves it through the relay's code, from
// the upstream connection up or the failure cause.
func (lx *loopExchange) Resume(client, up net.Conn, cause error) {
	lx.abortMu.Lock()
	aborted := lx.aborted
	lx.c = nil // the loop's no more: a late abort finds nothing
	lx.abortMu.Unlock()
	if aborted {
		lx.st.Cut.Store(true) // not the client's leaving: see leanExchange.cut
		// The reclaim cut the exchange: the connection ends. The server
		// still reads the request from what the loop read, and records
		// the abandoned exchange as the chain does.
		_ = client.Close()
	}
	served := false
	_ = lx.le.srv.ServeConnWith(client, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served = true
		lx.serveResumed(w, r, up, cause)
	}))
	if !served {
		// The server was closed first: nothing more can be answered.
		if up != nil {
			_ = up.Close()
		}
		lx.st.Status.Store(http.StatusBadGateway)
		lx.finishResumed(lx.r)
	}
}

// serveResumed is the relay's end of an exchange the loop began.
func (lx *loopExchange) serveResumed(w http.ResponseWriter, r *http.Request, up net.Conn, cause error) {
	o := lx.opts
	ew := exchange.NewWriter(w, *o, lx.start)
	st := ew.Exchange()
	st.Admission = lx.st.Admission
	st.Cut.Store(lx.st.Cut.Load())
	if lx.st.Metrics != nil {
		st.Metrics = lx.st.Metrics
	}
	defer lx.finishResumed(nil)
	defer exchange.Ended(o, r, st, lx.start)
	defer lx.release()
	rl := lx.rt.relay
	if cause == evloop.ErrClientGone {
		ctx, cancel := context.WithCancel(r.Context())
		cancel()
		r = r.WithContext(ctx)
		rl.Fail(ew, r, context.Canceled)
		return
	}
	if up == nil {
		if r.Context().Err() == nil {
			rl.CountError(exchange.ClassifyUpstreamErr(cause))
		}
		rl.Fail(ew, r, cause)
		return
	}
	resp, err := rl.Adopt(r.Context(), ew, up, lx.head, &lx.fields, lx.sent)
	if err != nil {
		if r.Context().Err() == nil {
			rl.CountError(exchange.ClassifyUpstreamErr(err))
		}
		rl.Fail(ew, r, err)
		return
	}
	now := time.Now()
	d := now.Sub(lx.sent)
	st.Upstream = max(d, 1)
	rl.ObserveUpstream(d)
	rl.Answer(ew, r, resp, lx.fields, now)
}

// finishResumed ends a resumed exchange's part of the loop's books; with
// r, it also records the exchange (when the server never served it).
func (lx *loopExchange) finishResumed(r *http.Request) {
	lx.release()
	if r != nil {
		exchange.Ended(lx.opts, r, &lx.st, lx.start)
	}
	lx.counts.Add(exchange.LeanHandedOver)
	lx.le.l.Active.Add(-1)
	lx.put()
}
