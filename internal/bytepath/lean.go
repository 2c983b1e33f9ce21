package bytepath

import (
	"io"
	"net/http"
	"net/netip"
	"net/textproto"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/seed-a07d1050/portcullis/httplimit"
	"github.com/seed-a07d1050/portcullis/internal/exchange"
	"github.com/seed-a07d1050/portcullis/internal/http1"
	"github.com/seed-a07d1050/portcullis/internal/httpfield"
	"github.com/seed-a07d1050/portcullis/internal/relay"
	uptransport "github.com/seed-a07d1050/portcullis/internal/upstream"
	"github.com/seed-a07d1050/portcullis/limit"
)

// The lean path, a part of http1_server eventloop (the default) that runs
// in Go's poller on the connections the event loops do not serve (other
// systems, connections given back), relays the plainest exchanges as bytes: a bodyless GET or HEAD, on a route whose chain is only
// concurrency limits and the relay, to a plain http upstream, answered
// with a final response whose length is known and small (any length
// after a HEAD). For those it skips what the handler
// chain builds per request (the request's context and writer wrappers,
// the outbound header map, the response header's snapshot) and does the
// rest with the chain's own pieces: the route's pick, httplimit's
// admission, the relay's field rules and forwarding values, the upstream
// transport's connection reuse and retries, and exchange.Ended's log line
// and metrics.
//
// Every decision that would make it differ from the chain is a point where
// it either declines or hands over, never one it makes its own way:
//   - before anything is counted or sent, a request it does not take (any
//     other method, a body, Upgrade, TE, a Connection field, a limit that
//     would queue, refuse or shadow-admit it, ...) is declined, having done
//     nothing, and the chain serves it;
//   - once the request is sent, the exchange can no longer be declined; a
//     failure, or an answer it does not write itself (1xx, 101, 204, 304,
//     chunked or unknown length, trailers, no Content-Type, a large body),
//     is handed to the relay's own code through the http.Request and
//     ResponseWriter the connection builds on demand (http1.Exchange.Serve),
//     with the admission already recorded.

// leanMaxBody is the longest response body the lean path writes itself:
// read whole, then written with its head.
const leanMaxBody = 32 << 10

// Poller is the lean path: the http1.ExchangeHandler of a listener's
// server with http1_server eventloop (and of the internal part lean
// alone), which serves on it, in Go's poller, what the event loops do not:
// every connection on a system without the loops, every one while the
// routes give the loops nothing, and the connections the loops give back.
type Poller struct{ l *Listener }

// NewPoller returns the lean path of the listener l describes.
func NewPoller(l Listener) *Poller { return &Poller{l.settled()} }

var _ http1.ExchangeHandler = (*Poller)(nil)

// leanExchange is the state of one exchange on the lean path, pooled.
type leanExchange struct {
	st      exchange.State
	permits [exchange.MaxKeys]limit.Permit[string]
	np      int
	fields  []httpfield.Field // the answer's head, from the upstream reader
	buf     []byte            // the upstream head, then the client's answer
	fwd     [5]string         // the forwarding fields' values
	peer    netip.Addr        // the client connection's peer, when its server parsed it once for all its requests

	// x is the exchange being served, for got1xx: a method value bound
	// once per pooled leanExchange, where x.WriteInformational passed as
	// SendOptions.Got1xx would be one made for every request.
	x      *http1.Exchange
	got1xx func(int, http.Header) error

	// cutX is the exchange a limit's reclaim cuts through cutFn (bound
	// once per pooled leanExchange), which records the cut first, so that
	// the exchange's end is not taken for its client's leaving.
	cutX  atomic.Pointer[http1.Exchange]
	cutFn func()
}

var leanExchangePool = sync.Pool{New: func() any {
	lx := &leanExchange{buf: make([]byte, 0, 4<<10)}
	lx.got1xx = lx.writeInformational
	lx.cutFn = lx.cut
	return lx
}}

// writeInformational relays an informational answer of the upstream to
// the client of the exchange being served.
func (lx *leanExchange) writeInformational(code int, h http.Header) error {
	return lx.x.WriteInformational(code, h)
}

// cut is the abort the limits' reclaim calls on the lean path: it ends
// the exchange as http1.Exchange.Abort does, having recorded why.
func (lx *leanExchange) cut() {
	if x := lx.cutX.Load(); x != nil {
		lx.st.Cut.Store(true)
		x.Abort()
	}
}

// put returns lx to the pool, holding nothing of the exchange: neither
// permits nor any upstream's strings.
func (lx *leanExchange) put() {
	lx.reset()
	leanExchangePool.Put(lx)
}

func (lx *leanExchange) reset() {
	lx.st.Status.Store(0)
	lx.st.Bytes.Store(0)
	lx.st.Extended.Store(0)
	lx.st.Cut.Store(false)
	lx.cutX.Store(nil)
	lx.st.Admission = exchange.Admission{}
	lx.np = 0
	clear(lx.fields)
	lx.fields = lx.fields[:0]
	lx.buf = lx.buf[:0]
	lx.fwd = [5]string{}
	lx.peer = netip.Addr{}
	lx.x = nil
}

// release gives back the permits taken, once.
func (lx *leanExchange) release() {
	for i := range lx.np {
		lx.permits[i].Release()
		lx.permits[i] = limit.Permit[string]{}
	}
	lx.np = 0
}

// ServeExchange serves x on the lean path, or declines it.
func (p *Poller) ServeExchange(x *http1.Exchange) bool {
	l := p.l
	lt := l.Table()
	if lt == nil {
		return false
	}
	rt, ok := lt.take(l, x.Head())
	if !ok {
		lt.Counts.Add(exchange.LeanDeclined)
		return false
	}
	start := time.Now()
	lx := leanExchangePool.Get().(*leanExchange)
	defer lx.put()
	defer lx.release() // also when what follows panics
	lx.cutX.Store(x)
	if !lx.admit(lx.cutFn, x.Head(), rt, nil) {
		lt.Counts.Add(exchange.LeanDeclined)
		return false
	}
	l.Active.Add(1)
	defer l.Active.Add(-1)
	// Counted also when the relay's code panics (http.ErrAbortHandler): an
	// exchange handed over, then cut short or abandoned without an answer.
	outcome := exchange.LeanHandedOver
	defer func() { lt.Counts.Add(outcome) }()
	outcome = lx.relay(x, x.Head(), rt, &lt.Opts, start)
	return true
}

// take returns the route of r when the lean path takes r: a request it
// relays (see relay.IsLeanRequest) on a route it serves, on a listener l
// that adds nothing to every answer.
func (lt *Table) take(l *Listener, r *http.Request) (*Route, bool) {
	if lt.Routes == nil || l.AltSvc.Load() != nil || !relay.IsLeanRequest(r, lt.Slashes) {
		return nil, false
	}
	rt := lt.Routes.Route(r)
	return rt, rt != nil
}

// admit takes, quietly, a permit of each of the route's limits, and
// records them as the chain's limits would; it reports false, having
// given back what it took and recorded nothing, when one would not grant
// one at once.
func (lx *leanExchange) admit(abort func(), r *http.Request, rt *Route, ck *peerKeys) bool {
	// A request the rate would delay or refuse is declined before any
	// limit grants it a permit (and counts the grant).
	var rateKey string
	if rt.rate != nil {
		var ok bool
		if rateKey, ok = rt.rate.Admits(r); !ok {
			return false
		}
	}
	var keys [exchange.MaxKeys]string
	for i := range rt.limits {
		key, p, ok := ck.tryAdmit(&rt.limits[i], r, abort)
		if !ok {
			lx.release()
			return false
		}
		keys[i] = key
		if p.Valid() {
			lx.permits[lx.np] = p
			lx.np++
		}
	}
	// The rate's admission last, although the chain asks it first: a
	// permit taken quietly can be given back, a rate's admission cannot,
	// so the rate takes r only once every limit has granted. (Another
	// request of the key may have taken the rate's slot since Admits:
	// then the permits go back.)
	if rt.rate != nil && !rt.rate.TryAdmitKey(rateKey) {
		lx.release()
		return false
	}
	st := &lx.st
	st.Route = rt.name
	if rt.metrics != nil {
		st.Metrics = rt.metrics // otherwise the listener's, set by relay
	}
	if rateKey != "" {
		st.Admit(exchange.ByRate, rateKey, 0, false)
	}
	for i, l := range rt.limits {
		if keys[i] != "" {
			st.Admit(l.By, keys[i], 0, false)
		}
	}
	return true
}

// peerKeys remembers, for one client connection, the keys its requests
// have under limits that key them by client address alone: the same for
// every request of the connection (httplimit.ClientIPConnKey).
type peerKeys struct {
	ks   [exchange.MaxKeys]peerKey
	next int // the slot the next key takes once all are used
}

type peerKey struct {
	lim *httplimit.Limiter
	key string
}

// tryAdmit is l.Limiter.TryAdmit(r, abort), with r's key remembered for
// its connection when ck is not nil and l keys by client address.
func (ck *peerKeys) tryAdmit(l *Limit, r *http.Request, abort func()) (string, limit.Permit[string], bool) {
	if ck == nil || !l.ByPeer {
		return l.Limiter.TryAdmit(r, abort)
	}
	key, ok := ck.lookup(l.Limiter)
	if !ok {
		if key, ok = httplimit.ClientIPConnKey(l.Resolver, r); !ok {
			return l.Limiter.TryAdmit(r, abort) // from a trusted proxy's header: per request
		}
		ck.remember(l.Limiter, key)
	}
	p, ok := l.Limiter.TryAdmitKey(r, key, abort)
	return key, p, ok
}

func (ck *peerKeys) lookup(lim *httplimit.Limiter) (string, bool) {
	for i := range ck.ks {
		if ck.ks[i].lim == lim {
			return ck.ks[i].key, true
		}
	}
	return "", false
}

// remember keeps key for lim, in place of the oldest key once every slot
// is taken (a connection whose requests go to routes with many limits).
func (ck *peerKeys) remember(lim *httplimit.Limiter, key string) {
	ck.ks[ck.next] = peerKey{lim, key}
	ck.next = (ck.next + 1) % len(ck.ks)
}

// relay sends r upstream and answers it, on the lean path when it can,
// and says how.
func (lx *leanExchange) relay(x *http1.Exchange, r *http.Request, rt *Route, o *exchange.Opts, start time.Time) exchange.LeanOutcome {
	st := &lx.st
	if st.Metrics == nil {
		st.Metrics = o.Metrics
	}
	rl := rt.relay
	u := rl.Upstreams().PickExcept(nil)
	if ids := rl.RequestIDs(); ids != nil {
		st.RequestID = ids.Of(r, exchange.PeerAddr(r))
	}
	head, ok := lx.upstreamHead(r, rl, u)
	head = lx.withRequestID(head, rl)
	if !ok {
		lx.handOver(x, o, start, rl.ServeHTTP)
		return exchange.LeanHandedOver
	}
	sent := time.Now()
	lx.x = x
	opts := uptransport.SendOptions{HeadTimeout: rl.HeadTimeout(), Fields: &lx.fields, Now: sent, Got1xx: lx.got1xx}
	resp, err := rl.SendHead(x.Context(), head, u, opts)
	if err != nil {
		if x.Context().Err() == nil {
			rl.CountError(exchange.ClassifyUpstreamErr(err))
		}
		lx.handOver(x, o, start, func(w http.ResponseWriter, r *http.Request) { rl.Fail(w, r, err) })
		return exchange.LeanHandedOver
	}
	now := time.Now()
	d := now.Sub(sent)
	st.Upstream = max(d, 1)
	rl.ObserveUpstream(d)
	if lx.answer(x, r, resp, rl, o, start, now) {
		return exchange.LeanRelayed
	}
	lx.handOver(x, o, start, func(w http.ResponseWriter, r *http.Request) { rl.Answer(w, r, resp, lx.fields, now) })
	return exchange.LeanHandedOver
}

// handOver has the connection build the request's http.Request and
// ResponseWriter and serves them with serve, as the chain would have from
// the relay on, with the admission recorded so far; then it ends the
// exchange as the chain does.
func (lx *leanExchange) handOver(x *http1.Exchange, o *exchange.Opts, start time.Time, serve http.HandlerFunc) {
	x.Serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ew := exchange.NewWriter(w, *o, start)
		st := ew.Exchange()
		st.Admission = lx.st.Admission
		st.Cut.Store(lx.st.Cut.Load())
		defer exchange.Ended(o, r, st, start)
		defer lx.release()
		serve(ew, r)
	}))
}

// withRequestID returns h with the exchange's request id added, when the
// listener names requests: upstreamHead leaves it out, so that a
// connection's upstream heads can be kept and sent again (loopConn) with
// each request's own id.
func (lx *leanExchange) withRequestID(h uptransport.Head, rl *relay.Relay) uptransport.Head {
	ids := rl.RequestIDs()
	if ids == nil || len(h.Bytes) < 2 {
		return h
	}
	lx.buf = relay.AppendRequestID(h.Bytes, ids.Header(), lx.st.RequestID)
	h.Bytes = lx.buf
	return h
}

// upstreamHead writes the head of the request going to u for r into
// lx.buf, as the relay's outbound and internal/upstream's writeRequest
// would write it: the request line with the query the relay forwards, the
// Host the client asked for, the client's fields but the hop-by-hop ones,
// those the Connection field names, the forwarding fields and their
// look-alikes, then the forwarding fields. It reports false when the
// request is one to hand over instead (no peer address to vouch for, or a
// Connection field naming more fields than it keeps track of).
func (lx *leanExchange) upstreamHead(r *http.Request, rl *relay.Relay, u *relay.Upstream) (uptransport.Head, bool) {
	b, ok := rl.AppendHead(lx.buf[:0], r, lx.peer, lx.fwd[:])
	if !ok {
		return uptransport.Head{}, false
	}
	lx.buf = b
	return uptransport.Head{Addr: u.HostPort(), Method: r.Method, Bytes: b}, true
}

// answer writes resp to the client when it is an answer the lean path
// writes itself, the way the server would have written it for the relay,
// and reports whether it did. It reports false having read and written
// nothing otherwise.
func (lx *leanExchange) answer(x *http1.Exchange, r *http.Request, resp *http.Response, rl *relay.Relay, o *exchange.Opts, start, now time.Time) bool {
	head := r.Method == http.MethodHead
	if !leanAnswer(resp, lx.fields, head) {
		return false
	}
	b := lx.appendAnswerHead(lx.buf[:0], resp.StatusCode, x.Closing(), now)
	headLen, n := len(b), int(resp.ContentLength)
	if head {
		n = 0 // the length is the GET's; there is no body
	}
	b = slices.Grow(b, n)[:headLen+n]
	got, rerr := io.ReadFull(resp.Body, b[headLen:])
	resp.Body.Close()
	lx.buf = b
	lx.st.Status.Store(int32(resp.StatusCode))
	if o.Send > 0 {
		var limit time.Time
		if o.Whole > 0 {
			limit = start.Add(o.Whole)
		}
		d, slack := exchange.SendDeadline(now, o.Send, limit)
		_ = x.SetWriteDeadlineWithin(d, slack)
	}
	if rerr != nil {
		// The upstream failed before the body was whole: what came is
		// sent, as the relay sends it, and the connection's end then
		// tells the client the answer is incomplete.
		rl.Logger().Debug("upstream body copy failed", "path", r.URL.Path, "error", rerr)
		b = b[:headLen+got]
		x.CloseAfter()
	}
	wrote, _ := x.Write(b)
	lx.st.Bytes.Store(int64(max(wrote-headLen, 0)))
	lx.release()
	exchange.Ended(o, r, &lx.st, start)
	return true
}

// appendAnswerHead appends the head the server writes for an answer of
// status code whose fields, as the upstream sent them, are lx.fields:
// the status line, the fields but the hop-by-hop ones in the server's
// order, its Date (now) unless the upstream sent one, and "Connection:
// close" when closing.
func (lx *leanExchange) appendAnswerHead(b []byte, code int, closing bool, now time.Time) []byte {
	kept := relay.CutHopFields(lx.fields)
	b = http1.AppendStatusLine(b, code)
	b = appendSortedFields(b, kept)
	// As the server decides: a Date field the upstream sent, even empty,
	// stands in for the server's.
	if !slices.ContainsFunc(kept, func(f httpfield.Field) bool { return f.Name == "Date" }) {
		b = append(b, "Date: "...)
		b = http1.AppendDate(b, now)
		b = append(b, "\r\n"...)
	}
	if closing {
		b = append(b, "Connection: close\r\n"...)
	}
	return append(b, "\r\n"...)
}

// leanAnswer reports whether resp, whose head came as fields, is an
// answer the lean path writes itself: a final status with a body, one
// Content-Length of at most leanMaxBody and no other framing, no
// trailers, and a Content-Type or Content-Encoding (without, the server
// would sniff a type) unless the body is empty; and whether the server
// would write every field as it is. The answer to a HEAD (head) has no
// body to read or sniff: any length will do, with or without a type.
func leanAnswer(resp *http.Response, fields []httpfield.Field, head bool) bool {
	code := resp.StatusCode
	if resp.Header != nil || code < 200 || code > 599 || code == http.StatusNoContent || code == http.StatusNotModified {
		return false
	}
	if resp.ContentLength < 0 || resp.ContentLength > leanMaxBody && !head || len(resp.TransferEncoding) > 0 {
		return false
	}
	typed, lengths := resp.ContentLength == 0 || head, 0
	for _, f := range fields {
		switch f.Name {
		case "Transfer-Encoding", "Trailer":
			return false
		case "Content-Length":
			lengths++
		case "Content-Type":
			typed = true
		case "Content-Encoding":
			typed = typed || f.Value != ""
		}
		if strings.HasPrefix(f.Name, http.TrailerPrefix) || !httpguts.ValidHeaderFieldName(f.Name) ||
			!httpguts.ValidHeaderFieldValue(f.Value) || f.Value != textproto.TrimString(f.Value) {
			return false
		}
	}
	return lengths == 1 && typed
}

// appendSortedFields appends fields as the server writes a header: sorted
// by name, those of one name in their order.
func appendSortedFields(b []byte, fields []httpfield.Field) []byte {
	// Insertion sort, stable: an answer has a few fields.
	for i := 1; i < len(fields); i++ {
		for j := i; j > 0 && fields[j].Name < fields[j-1].Name; j-- {
			fields[j], fields[j-1] = fields[j-1], fields[j]
		}
	}
	for _, f := range fields {
		b = relay.AppendField(b, f.Name, f.Value)
	}
	return b
}
