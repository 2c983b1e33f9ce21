package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/exchange"
	"github.com/seed-a07d1050/portcullis/internal/httpfield"
	"github.com/seed-a07d1050/portcullis/internal/httppath"
	uptransport "github.com/seed-a07d1050/portcullis/internal/upstream"
)

// Relay is the handler that sends a reverse route's requests to its
// upstreams, in place of httputil.ReverseProxy and with the same
// behaviour (see docs/daemon.md for the one deliberate difference), but
// without its per-request copies: the request going upstream is built
// once from the one received, sharing its header values, and a response's
// header values go to the client's header as they are. The exchange runs
// on the handler's goroutine when internal/upstream's fast path takes it
// (plain http, no body, no upgrade); otherwise through its fallback.
//
// What goes upstream: the method, the cleaned path and the query (with
// parameters ReverseProxy would drop re-encoded, as it does), the Host the
// client asked for, and the client's header minus the hop-by-hop fields
// (RFC 9110 §7.6.1: those the Connection field names, and Connection,
// Proxy-Connection, Keep-Alive, Proxy-Authenticate, Proxy-Authorization,
// TE, Trailer, Transfer-Encoding, Upgrade), minus the forwarding fields
// the daemon writes itself and their look-alikes (see forwarding), plus
// the forwarding fields, "TE: trailers" when the client sent it, and
// "Connection: Upgrade" with its Upgrade for a protocol switch.
//
// What comes back: the status, the header minus the hop-by-hop fields,
// 1xx responses as they arrive (103 Early Hints included), the body,
// flushed after every read for server-sent events and bodies of unknown
// length, and the trailers. A 101 to an upgrade request hands both
// connections to each other until either side ends. A failed exchange is
// answered 502, or 504 when the upstream did not answer in time; a body
// that fails halfway aborts the response (http.ErrAbortHandler).
type Relay struct {
	pool    *Pool
	fw      Forwarding
	t       *uptransport.Transport
	timeout time.Duration // bound on each upstream's response head
	bufs    httputil.BufferPool
	fail    func(http.ResponseWriter, *http.Request, error)
	log     *slog.Logger
	metrics *exchange.RouteMetrics // the route's; nil: none
	ids     *exchange.RequestIDs   // the listener's; nil: none
}

// New returns the handler of a route whose upstreams p picks. The
// route's timeout bounds the wait for each upstream's response head, a
// retry on another upstream after a refused connection getting its own.
func New(p *Pool, fw Forwarding, t *uptransport.Transport, timeout time.Duration, bufs httputil.BufferPool, log *slog.Logger, metrics *exchange.RouteMetrics, ids *exchange.RequestIDs) *Relay {
	if timeout <= 0 {
		timeout = config.DefaultUpstreamTimeout
	}
	return &Relay{pool: p, fw: fw, t: t, timeout: timeout, bufs: bufs, fail: answerNoneWhenAbandoned(proxyErrorHandler(log)), log: log, metrics: metrics, ids: ids}
}

// answerNoneWhenAbandoned wraps a failure handler so that an exchange
// abandoned because its request's context ended (the client closed or
// half-closed its connection, the server is stopping, a reclaim) is
// recorded by fail as before but answers nothing: the connection is cut
// (http.ErrAbortHandler) before the failure's head leaves. A client that
// half-closed after its request still reads, and a 502 would tell it the
// upstream failed when the upstream may have served the request
// (issue 35); nginx closes without an answer too. fail must only set the
// head of such an answer (WriteHeader), not write a body.
func answerNoneWhenAbandoned(fail func(http.ResponseWriter, *http.Request, error)) func(http.ResponseWriter, *http.Request, error) {
	return func(w http.ResponseWriter, r *http.Request, err error) {
		fail(w, r, err)
		if r.Context().Err() != nil {
			panic(http.ErrAbortHandler)
		}
	}
}

// outbound is the request a relay sends upstream, with its URL and
// header, and what its 1xx hook needs. Those of the fast path, which
// internal/upstream does not hold once the exchange is over, are pooled.
type outbound struct {
	req    http.Request
	url    url.URL
	header http.Header
	hook   func(int, http.Header) error // got1xx, made once
	pooled bool                         // goes back to outbounds when done
	fwd    [5]string                    // the forwarding fields' values
	id     [1]string                    // the request id's value

	// When the client's writer takes a response's head as fields: the
	// exchange's writer, the writer under it, and the fields the upstream
	// reader fills (see uptransport.SendOptions.Fields).
	ew     *exchange.Writer
	fw     exchange.HeaderFieldsWriter
	fields []httpfield.Field

	w    http.ResponseWriter
	mu   sync.Mutex // guards w's header against a late 1xx from the fallback
	done bool       // the final response is in: no more 1xx
}

var outbounds = sync.Pool{New: func() any {
	o := &outbound{header: make(http.Header, 16)}
	o.hook = o.got1xx
	return o
}}

// release returns o to the pool if it was sent on the fast path.
func (o *outbound) release() {
	if !o.pooled {
		return
	}
	clear(o.header)
	o.fwd = [5]string{}
	clear(o.fields)
	o.fields = o.fields[:0]
	o.ew, o.fw = nil, nil
	o.req = http.Request{}
	o.w = nil
	outbounds.Put(o)
}

func (rl *Relay) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	upType := upgradeType(r.Header)
	if upType != "" && !isPrintable(upType) {
		rl.fail(w, r, fmt.Errorf("client tried to switch to invalid protocol %q", upType))
		return
	}
	u := rl.pool.PickExcept(nil)
	o := rl.outbound(w, r, u, upType)
	sent := time.Now()
	resp, err := rl.send(r.Context(), o, u, sent)
	o.mu.Lock()
	o.done = true
	o.mu.Unlock()
	if err != nil {
		bodyErr := o.clientBodyErr()
		o.release()
		if bodyErr != nil && r.Context().Err() == nil {
			badRequestBody(w, r, bodyErr, rl.log)
			return
		}
		if r.Context().Err() == nil { // not when the client left
			rl.CountError(exchange.ClassifyUpstreamErr(err))
		}
		rl.fail(w, r, err)
		return
	}
	now := time.Now()
	rl.answered(w, now.Sub(sent))
	if resp.StatusCode == http.StatusSwitchingProtocols {
		rl.switchProtocols(w, r, resp, upType)
		return
	}
	rl.respond(w, r, resp, o, now)
	o.release()
}

// requestID returns the id of the exchange w belongs to, given when it
// began (exchange.Handler); one of its own when w belongs to none.
func (rl *Relay) requestID(w http.ResponseWriter, r *http.Request, peer netip.Addr) string {
	if st := exchange.StateOf(w); st != nil && st.RequestID != "" {
		return st.RequestID
	}
	return rl.ids.Of(r, peer)
}

// RequestIDs returns the request ids of the relay's listener; nil when it
// names none.
func (rl *Relay) RequestIDs() *exchange.RequestIDs { return rl.ids }

// answered records that the upstream's response head came d after the
// request was sent, for the access line and the route's histogram.
func (rl *Relay) answered(w http.ResponseWriter, d time.Duration) {
	if st := exchange.StateOf(w); st != nil {
		st.Upstream = max(d, 1) // zero means no upstream answered
	}
	if rl.metrics != nil {
		rl.metrics.Upstream.Observe(d.Seconds())
	}
}

// CountError counts an upstream failure of kind k.
func (rl *Relay) CountError(k exchange.UpstreamErrKind) {
	if rl.metrics != nil {
		rl.metrics.Errors[k].Inc()
	}
}

// outbound builds the request to send to u for r.
func (rl *Relay) outbound(w http.ResponseWriter, r *http.Request, u *Upstream, upType string) *outbound {
	o := outbounds.Get().(*outbound)
	o.w, o.done = w, false
	o.url = *r.URL
	o.url.Scheme, o.url.Host = u.scheme, u.host
	o.url.RawQuery = cleanQuery(o.url.RawQuery)
	out := &o.req
	out.Method = r.Method
	out.URL = &o.url
	out.Proto, out.ProtoMajor, out.ProtoMinor = "HTTP/1.1", 1, 1
	out.Host = r.Host // the upstream sees the name the client asked for
	out.ContentLength = r.ContentLength
	if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
		out.Body = &closeless{r: r.Body}
		out.TransferEncoding = slices.Clone(r.TransferEncoding)
		out.Trailer = r.Trailer.Clone()
	}
	peer := exchange.PeerAddr(r)
	trusted := rl.fw.trusts(peer)
	h := o.header
	for name, values := range r.Header {
		if !isHopHeader(name) && !isForwardingHeader(name) && !stripped(name, trusted) {
			h[name] = values
		}
	}
	for _, v := range r.Header["Connection"] {
		for name := range connectionNames(v) {
			delete(h, name)
		}
	}
	out.Header = h
	rl.fw.set(h, r, peer, trusted, o.fwd[:])
	if rl.ids != nil {
		o.id[0] = rl.requestID(w, r, peer)
		h[rl.ids.Header()] = o.id[:]
	}
	if httpguts.HeaderValuesContainsToken(r.Header["Te"], "trailers") {
		h["Te"] = []string{"trailers"}
	}
	if upType != "" {
		h["Connection"] = []string{"Upgrade"}
		h["Upgrade"] = []string{upType}
	}
	o.pooled = rl.t.FastPath(out)
	if o.pooled {
		// The answer's head is passed on as fields when the client's
		// writer takes them: no header map built, copied and iterated.
		if ew := exchange.WriterOf(w); ew != nil {
			if fw := ew.FieldsTarget(); fw != nil {
				o.ew, o.fw = ew, fw
			}
		}
	} else {
		// The fallback may still read the request after this handler
		// returned (http.Transport writes bodies on a goroutine of its
		// own), when the server reuses the values of r's header for the
		// connection's next request: it gets a header of its own. And
		// http.Transport sends its own User-Agent unless told not to.
		h = make(http.Header, len(o.header)+1)
		for name, values := range o.header {
			h[name] = slices.Clone(values)
		}
		out.Header = h
		if _, ok := h["User-Agent"]; !ok {
			h["User-Agent"] = []string{""}
		}
	}
	return o
}

// send sends o to u and, when u refuses the connection, marks it down and
// (for a request without a body, which nothing has consumed) tries the
// next upstream, once more per upstream of the route. A refused
// connection means the upstream received nothing, so the retry cannot
// repeat an effect.
func (rl *Relay) send(ctx context.Context, o *outbound, u *Upstream, now time.Time) (*http.Response, error) {
	// The header is the client's, which the server's parser checked, with
	// the forwarding fields, made of checked values, added.
	opts := uptransport.SendOptions{HeadTimeout: rl.timeout, Got1xx: o.hook, HeaderValid: true, Now: now}
	if o.fw != nil {
		opts.Fields = &o.fields
	}
	req := &o.req
	resp, err := rl.t.Send(ctx, req, opts)
	for tries := 1; err != nil && exchange.IsRefused(err) && tries < len(rl.pool.ups); tries++ {
		rl.pool.MarkDown(u)
		if req.Body != nil {
			return nil, err
		}
		next := rl.pool.PickExcept(u)
		if next == nil {
			return nil, err
		}
		u = next
		// A request of its own: the fallback may still hold the last one.
		retry := *req
		url := *req.URL
		url.Scheme, url.Host = u.scheme, u.host
		retry.URL = &url
		req = &retry
		opts.Now = time.Time{} // the clock has moved on since
		resp, err = rl.t.Send(ctx, req, opts)
	}
	if err != nil && exchange.IsRefused(err) {
		rl.pool.MarkDown(u)
	}
	return resp, err
}

// got1xx passes an informational response on to the client as it
// arrives, with its header alone.
func (o *outbound) got1xx(code int, header http.Header) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.done {
		return nil // too late: the final answer is being written
	}
	dst := o.w.Header()
	saved := make(map[string][]string, len(header))
	for k, vv := range header {
		if old, ok := dst[k]; ok {
			saved[k] = old
		}
		dst[k] = append(dst[k][:len(dst[k]):len(dst[k])], vv...)
	}
	o.w.WriteHeader(code)
	for k := range header {
		if old, ok := saved[k]; ok {
			dst[k] = old
		} else {
			delete(dst, k)
		}
	}
	return nil
}

// respond writes resp, a final response other than 101, that came at now,
// to w. A head that came as fields (resp.Header nil, see
// SendOptions.Fields) goes to the writer o found for them.
func (rl *Relay) respond(w http.ResponseWriter, r *http.Request, resp *http.Response, o *outbound, now time.Time) {
	dst := w.Header()
	announced := 0
	var flush bool
	if resp.Header == nil {
		kept := CutHopFields(o.fields)
		ct, hasCT := lookupField(kept, "Content-Type")
		if !hasCT {
			noSniff(dst)
		}
		flush = resp.ContentLength == -1 || isEventStreamType(ct)
		o.ew.WriteHeaderFields(resp.StatusCode, kept, o.fw, now)
	} else {
		removeHopHeaders(resp.Header)
		if _, ok := resp.Header["Content-Type"]; !ok {
			noSniff(dst)
		}
		for k, vv := range resp.Header {
			if old, ok := dst[k]; ok {
				dst[k] = append(old[:len(old):len(old)], vv...)
			} else {
				dst[k] = vv
			}
		}
		// The "Trailer" field was removed above, as a hop-by-hop field;
		// the trailers the upstream announced are announced again.
		announced = len(resp.Trailer)
		if announced > 0 {
			keys := make([]string, 0, announced)
			for k := range resp.Trailer {
				keys = append(keys, k)
			}
			dst.Add("Trailer", strings.Join(keys, ", "))
		}
		flush = resp.ContentLength == -1 || isEventStream(resp.Header)
		w.WriteHeader(resp.StatusCode)
	}
	if err := rl.copyBody(w, resp, flush); err != nil {
		resp.Body.Close()
		rl.log.Debug("upstream body copy failed", "path", r.URL.Path, "error", err)
		// The head is out: all that can be done is to cut the response
		// short, so that the client sees it is incomplete.
		panic(http.ErrAbortHandler)
	}
	resp.Body.Close() // now, so that resp.Trailer is complete
	if len(resp.Trailer) == 0 {
		return
	}
	// A flush before the trailers forces chunking, which trailers need,
	// even for a short body.
	_ = http.NewResponseController(w).Flush()
	if len(resp.Trailer) == announced {
		for k, vv := range resp.Trailer {
			dst[k] = append(dst[k], vv...)
		}
		return
	}
	for k, vv := range resp.Trailer {
		k = http.TrailerPrefix + k
		dst[k] = append(dst[k], vv...)
	}
}

// copyBody copies the body of resp to w, flushing after every write when
// flushEach (server-sent events and bodies of unknown length), so that a
// stream reaches the client as the upstream sends it; a known length is written
// as the server's buffer fills, so that a small response leaves in one
// write with its head. It returns the first write error, or read error
// other than EOF; before returning a read error it sends what the upstream
// sent, as the event loops do and nginx does, so that the bytes a client
// receives of a body cut short do not depend on the server's buffer.
func (rl *Relay) copyBody(w http.ResponseWriter, resp *http.Response, flushEach bool) error {
	var flush func() error
	if flushEach {
		flush = http.NewResponseController(w).Flush
	}
	buf := rl.bufs.Get()
	defer rl.bufs.Put(buf)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, err := w.Write(buf[:n]); err != nil {
				return err
			}
			if flush != nil {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			if flush == nil {
				_ = http.NewResponseController(w).Flush()
			}
			return rerr
		}
	}
}

// isEventStream reports whether h says the body is server-sent events
// (text/event-stream), which are flushed as they come.
func isEventStream(h http.Header) bool {
	ct := h["Content-Type"]
	if len(ct) == 0 {
		return false
	}
	return isEventStreamType(ct[0])
}

// isEventStreamType reports whether the Content-Type ct is
// text/event-stream.
func isEventStreamType(ct string) bool {
	base, _, _ := strings.Cut(ct, ";")
	return strings.EqualFold(textproto.TrimString(base), "text/event-stream")
}

// noSniff keeps the server from adding a Content-Type the upstream did not
// send: every server behind the relay (net/http's, internal/http1, HTTP/2,
// HTTP/3) sniffs one from the body unless the header holds the name, and
// writes nothing for a name whose value is nil. A proxy adds nothing the
// backend did not send (issue 35; nginx and HAProxy forward no type).
func noSniff(h http.Header) {
	if _, ok := h["Content-Type"]; !ok {
		h["Content-Type"] = nil
	}
}

// lookupField returns the value of the first of fields named name, and
// whether there is one.
func lookupField(fields []httpfield.Field, name string) (string, bool) {
	for _, f := range fields {
		if f.Name == name {
			return f.Value, true
		}
	}
	return "", false
}

// CutHopFields removes from fields, in place, the hop-by-hop fields, as
// removeHopHeaders removes them from a header: those a Connection field
// names, then the fixed list. It returns what is left.
func CutHopFields(fields []httpfield.Field) []httpfield.Field {
	var buf [8]string
	named := buf[:0]
	for _, f := range fields {
		if f.Name != "Connection" {
			continue
		}
		for name := range connectionNames(f.Value) {
			named = append(named, name)
		}
	}
	return slices.DeleteFunc(fields, func(f httpfield.Field) bool {
		return isHopHeader(f.Name) || slices.Contains(named, f.Name)
	})
}

// switchProtocols completes a protocol switch the upstream accepted with
// resp: it checks the upstream switched to what the client asked for,
// writes the 101 on the client's connection (where httplimit's tunnel
// tracking sees it) and copies each connection to the other until one
// side fails or both have ended, blocking the handler meanwhile, so that
// the listener counts the tunnel as active. A shutdown (the request's
// context ending) closes both.
func (rl *Relay) switchProtocols(w http.ResponseWriter, r *http.Request, resp *http.Response, reqUpType string) {
	resUpType := upgradeType(resp.Header)
	backConn, ok := resp.Body.(io.ReadWriteCloser)
	switch {
	case !isPrintable(resUpType):
		resp.Body.Close()
		rl.CountError(exchange.UpErrBadResponse)
		rl.fail(w, r, fmt.Errorf("backend tried to switch to invalid protocol %q", resUpType))
		return
	case !strings.EqualFold(reqUpType, resUpType):
		resp.Body.Close()
		rl.CountError(exchange.UpErrBadResponse)
		rl.fail(w, r, fmt.Errorf("backend tried to switch protocol %q when %q was requested", resUpType, reqUpType))
		return
	case !ok:
		resp.Body.Close()
		rl.fail(w, r, errors.New("internal error: 101 switching protocols response with non-writable body"))
		return
	}
	defer backConn.Close()
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		rl.fail(w, r, fmt.Errorf("hijack the client's connection on a protocol switch: %w", err))
		return
	}
	defer conn.Close()
	stop := context.AfterFunc(r.Context(), func() { backConn.Close() })
	defer stop()

	dst := w.Header()
	for k, vv := range resp.Header {
		dst[k] = append(dst[k], vv...)
	}
	resp.Header = dst
	resp.Body = nil // so that Write writes the head alone
	if err := resp.Write(brw); err != nil {
		rl.log.Debug("protocol switch: write the 101", "error", err)
		return
	}
	if err := brw.Flush(); err != nil {
		rl.log.Debug("protocol switch: write the 101", "error", err)
		return
	}
	var fromClient io.Reader = conn
	if brw.Reader.Buffered() > 0 {
		fromClient = brw.Reader // bytes the client sent right after its request
	}
	errc := make(chan error, 2)
	go func() { errc <- pipe(backConn, fromClient) }()
	go func() { errc <- pipe(conn, backConn) }()
	// Until one side fails, or both have ended.
	if err := <-errc; err == nil {
		<-errc
	}
}

// pipe copies src to dst until src ends, then half-closes dst if it can,
// so that the end reaches the other side.
func pipe(dst io.Writer, src io.Reader) error {
	if _, err := io.Copy(dst, src); err != nil {
		return err
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errPipeDone
}

var errPipeDone = errors.New("relay: protocol switch: one side ended")

// closeless passes reads to a request body and ignores Close: the
// fallback closes the body it was given once it is done with it, or when
// it fails to connect, and closing the server's body then could block on
// a client that has not sent it yet (100-continue). It keeps the first
// error reading the client's body returned, other than io.EOF.
type closeless struct {
	r      io.ReadCloser
	closed bool
	err    error // the client's body failed: see clientBodyErr
	mu     sync.Mutex
}

func (c *closeless) Read(p []byte) (int, error) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return 0, errors.New("relay: read of a request body after the upstream exchange closed it")
	}
	n, err := c.r.Read(p)
	if err != nil && err != io.EOF {
		c.mu.Lock()
		if c.err == nil {
			c.err = err
		}
		c.mu.Unlock()
	}
	return n, err
}

// clientBodyErr returns the error reading the client's request body
// returned while o was sent, or nil: when the exchange failed after it, the
// failure is the client's (a malformed chunked body, a body cut short, a
// body over its limit), not the upstream's.
func (o *outbound) clientBodyErr() error {
	c, ok := o.req.Body.(*closeless)
	if !ok {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// badRequestBody answers a request whose body could not be read, with the
// connection closed after the answer: its framing is lost. A body over the
// server's limit is 413, anything else 400 (issue 35: a chunk size of more
// than 16 hex digits or a chunk line ending in a bare LF is the client's
// fault, which a 502 would blame on the upstream; nginx and HAProxy accept
// both).
func badRequestBody(w http.ResponseWriter, r *http.Request, err error, log *slog.Logger) {
	log.Debug("request body unreadable", "path", r.URL.Path, "error", err)
	w.Header().Set("Connection", "close")
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		exchange.WriteShort(w, http.StatusRequestEntityTooLarge, "request entity too large\n")
		return
	}
	exchange.WriteShort(w, http.StatusBadRequest, "bad request: malformed request body\n")
}

func (c *closeless) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	return nil
}

// upgradeType returns the protocol h asks to switch to ("" for none): its
// Upgrade field, when Connection names "upgrade".
func upgradeType(h http.Header) string {
	if !httpguts.HeaderValuesContainsToken(h["Connection"], "Upgrade") {
		return ""
	}
	if v := h["Upgrade"]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func isPrintable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// isForwardingHeader reports whether name, in canonical form, is one of
// the forwarding fields a client's request never carries upstream, as
// ReverseProxy removes them: the daemon writes its own (forwarding.set).
func isForwardingHeader(name string) bool {
	switch name {
	case hdrFwd, hdrXFF, hdrXFHost, hdrXFProto:
		return true
	}
	return false
}

// isHopHeader reports whether name, in canonical form, is one of the
// hop-by-hop fields a proxy never forwards (RFC 9110 §7.6.1, and the
// older list of RFC 2616 §13.5.1 that ReverseProxy also removes).
func isHopHeader(name string) bool {
	switch name {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
		"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// removeHopHeaders removes the hop-by-hop fields from h: those its
// Connection field names, then the fixed list.
func removeHopHeaders(h http.Header) {
	for _, v := range h["Connection"] {
		for name := range connectionNames(v) {
			delete(h, name)
		}
	}
	// One pass over the few fields a response has, rather than a lookup
	// for each name of the fixed list.
	for name := range h {
		if isHopHeader(name) {
			delete(h, name)
		}
	}
}

// connectionNames yields the header name of each field a Connection field
// value v names (RFC 9110 §7.6.1): its comma-separated tokens, trimmed,
// the empty ones skipped, each in canonical form (canonicalToken). Every
// place that drops the fields a Connection field names reads them here.
func connectionNames(v string) iter.Seq[string] {
	return func(yield func(string) bool) {
		for token := range strings.SplitSeq(v, ",") {
			if token = textproto.TrimString(token); token != "" && !yield(canonicalToken(token)) {
				return
			}
		}
	}
}

// canonicalToken returns the canonical header name of a Connection token,
// without allocating for the tokens clients send most.
func canonicalToken(token string) string {
	switch token {
	case "keep-alive", "Keep-Alive":
		return "Keep-Alive"
	case "close", "Close":
		return "Close"
	case "upgrade", "Upgrade":
		return "Upgrade"
	}
	return textproto.CanonicalMIMEHeaderKey(token)
}

// cleanQuery returns q as ReverseProxy forwards it: unchanged, unless it
// has a parameter Go's query parser refuses (a ';', a malformed escape)
// or more than 10000 parameters; then re-encoded from what the parser
// accepts, so that the upstream cannot read a query the daemon did not.
func cleanQuery(q string) string {
	if q == "" {
		return q
	}
	if strings.Count(q, "&")+1 > 10000 {
		return reencodeQuery(q)
	}
	for i := 0; i < len(q); {
		switch q[i] {
		case ';':
			return reencodeQuery(q)
		case '%':
			if i+2 >= len(q) || !isHex(q[i+1]) || !isHex(q[i+2]) {
				return reencodeQuery(q)
			}
			i += 3
		default:
			i++
		}
	}
	return q
}

func reencodeQuery(q string) string {
	v, _ := url.ParseQuery(q)
	return v.Encode()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// maxNamedHops is how many fields a request's Connection field may name
// for the lean path to relay it: clients name one or two ("keep-alive",
// "Upgrade"); a request naming more is handed to the relay's own code.
const maxNamedHops = 4

// connectionNamed appends to dst the header names of the fields the
// Connection field values conn name (connectionNames), as the relay's
// outbound deletes them, and reports false when they are more than dst
// has room for.
func connectionNamed(conn []string, dst []string) ([]string, bool) {
	for _, v := range conn {
		for name := range connectionNames(v) {
			if len(dst) == cap(dst) {
				return dst, false
			}
			dst = append(dst, name)
		}
	}
	return dst, true
}

func AppendField(b []byte, name, value string) []byte {
	b = append(b, name...)
	b = append(b, ": "...)
	b = append(b, value...)
	return append(b, "\r\n"...)
}

// leanRequest reports whether r is a request the lean path takes: a GET
// or HEAD of HTTP/1.1 in origin form with a clean path (one the chain
// leaves as it is under slashes), whose header
// names no field the relay would treat specially. The server offers only
// requests without a body or Expect. A Connection field is taken (browsers
// send "Connection: keep-alive"): the fields it names are left out of the
// upstream head (see upstreamHead), and after "close" (r.Close) the answer
// says "Connection: close" (Exchange.Closing) and the server ends the
// connection, as it does after the fast path's answer.
func IsLeanRequest(r *http.Request, slashes httppath.Slashes) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead || r.ProtoMajor != 1 || r.ProtoMinor != 1 {
		return false
	}
	if r.ContentLength != 0 || len(r.TransferEncoding) > 0 || len(r.RequestURI) == 0 || r.RequestURI[0] != '/' {
		return false
	}
	h := r.Header
	for _, name := range [...]string{"Upgrade", "Te", "Trailer", "Transfer-Encoding", "Expect", "Content-Length"} {
		if _, ok := h[name]; ok {
			return false
		}
	}
	// The chain's reverseRequests cleans the path (httppath.CleanURL), and
	// answers 400 when it cannot: only a path it leaves as it is comes here.
	// Under unescape_and_redirect a path it would redirect is one it would
	// change under UnescapeSlashes too.
	escaped := r.URL.EscapedPath()
	cleaned, err := httppath.Clean(escaped, slashes)
	return err == nil && cleaned == escaped && r.URL.Opaque == ""
}

// SendHead sends head to u and, when u refuses the connection, to the
// route's other upstreams in turn, as send does.
func (rl *Relay) SendHead(ctx context.Context, head uptransport.Head, u *Upstream, opts uptransport.SendOptions) (*http.Response, error) {
	resp, err := rl.t.SendHead(ctx, head, opts)
	for tries := 1; err != nil && exchange.IsRefused(err) && tries < len(rl.pool.ups); tries++ {
		rl.pool.MarkDown(u)
		next := rl.pool.PickExcept(u)
		if next == nil {
			return nil, err
		}
		u = next
		head.Addr = u.host
		opts.Now = time.Time{} // the clock has moved on since
		resp, err = rl.t.SendHead(ctx, head, opts)
	}
	if err != nil && exchange.IsRefused(err) {
		rl.pool.MarkDown(u)
	}
	return resp, err
}

// Answer is the relay's handling of a final answer resp, which came at
// now, for a request the lean path sent: fields are the answer's head
// when resp.Header is nil (see uptransport.SendOptions.Fields).
func (rl *Relay) Answer(w http.ResponseWriter, r *http.Request, resp *http.Response, fields []httpfield.Field, now time.Time) {
	if resp.StatusCode == http.StatusSwitchingProtocols {
		rl.switchProtocols(w, r, resp, "") // unasked for: refused
		return
	}
	o := outbounds.Get().(*outbound)
	o.pooled = true
	if resp.Header == nil {
		o.fields = append(o.fields[:0], fields...)
		o.ew = exchange.WriterOf(w)
		o.fw = o.ew.FieldsTarget()
	}
	rl.respond(w, r, resp, o, now)
	o.release()
}

// AppendHead appends to b the head of the request the relay would send
// upstream for r, as its outbound and internal/upstream's writeRequest
// would write it: the request line with the query the relay forwards, the
// Host the client asked for, the client's fields but the hop-by-hop ones,
// those the Connection field names, the forwarding fields and their
// look-alikes and the request id's field, then the forwarding fields
// (the caller adds the request id: AppendRequestID, so that a kept head
// can be sent again with each request's own id). peer is the client's address
// when the caller knows it (invalid: read from r.RemoteAddr); fwd is room
// for the forwarding fields' values (five). It reports false, with b
// holding a part of a head, when the request is one to send through the
// relay's own code instead (no peer address to vouch for, or a Connection
// field naming more fields than maxNamedHops).
func (rl *Relay) AppendHead(b []byte, r *http.Request, peer netip.Addr, fwd []string) ([]byte, bool) {
	var named [maxNamedHops]string
	dropped, ok := connectionNamed(r.Header["Connection"], named[:0])
	if !ok {
		return b, false
	}
	if !peer.IsValid() {
		peer = exchange.PeerAddr(r)
	}
	trusted := rl.fw.trusts(peer)
	vals, forwarded, ok := rl.fw.values(r, peer, trusted, fwd)
	if !ok {
		return b, false
	}
	b = append(b, r.Method...)
	b = append(b, ' ')
	if p := r.URL.EscapedPath(); p != "" {
		b = append(b, p...)
	} else {
		b = append(b, '/')
	}
	if q := cleanQuery(r.URL.RawQuery); q != "" || r.URL.ForceQuery {
		b = append(b, '?')
		b = append(b, q...)
	}
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, r.Host...)
	b = append(b, "\r\n"...)
	for name, values := range r.Header {
		if isHopHeader(name) || isForwardingHeader(name) || name == hdrXRealIP || name == "Host" ||
			stripped(name, trusted) || slices.Contains(dropped, name) || rl.ids != nil && name == rl.ids.Header() {
			continue
		}
		for _, v := range values {
			b = AppendField(b, name, v)
		}
	}
	b = AppendField(b, hdrXFF, vals[0])
	b = AppendField(b, hdrXRealIP, vals[1])
	b = AppendField(b, hdrXFProto, vals[2])
	b = AppendField(b, hdrXFHost, vals[3])
	if forwarded {
		b = AppendField(b, hdrFwd, vals[4])
	}
	b = append(b, "\r\n"...)
	return b, true
}

// HeadTimeout is the bound on each upstream's response head.
func (rl *Relay) HeadTimeout() time.Duration { return rl.timeout }

// Upstreams returns the pool the relay picks its upstreams from.
func (rl *Relay) Upstreams() *Pool { return rl.pool }

// Logger returns the log the relay writes its failures to.
func (rl *Relay) Logger() *slog.Logger { return rl.log }

// failWith answers w for r, which failed with err before an answer came,
// as the relay answers its own failures (a 502 or 504, or nothing when the
// request's context ended: see answerNoneWhenAbandoned).
func (rl *Relay) Fail(w http.ResponseWriter, r *http.Request, err error) { rl.fail(w, r, err) }

// ObserveUpstream counts, in the route's metrics, an upstream's response
// head that came d after its request was sent.
func (rl *Relay) ObserveUpstream(d time.Duration) {
	if rl.metrics != nil {
		rl.metrics.Upstream.Observe(d.Seconds())
	}
}

// SendsHeads reports whether the relay can send a request given as a head
// (uptransport.Transport.SendHead), which a byte path needs: every
// upstream speaks plain http and the transport can; onLoop, whether every
// upstream is an IP address and port, which an event loop dials itself.
func (rl *Relay) SendsHeads() (ok, onLoop bool) {
	for _, u := range rl.pool.ups {
		if u.scheme != "http" {
			return false, false
		}
	}
	if !rl.t.CanSendHead() {
		return false, false
	}
	onLoop = true
	for _, u := range rl.pool.ups {
		onLoop = onLoop && u.ap.IsValid()
	}
	return true, onLoop
}

// Adopt sends head on up, a connection to an upstream an event loop
// dialled, and reads the answer's head into fields (see
// uptransport.Transport.Adopt); a 1xx answer is written to w as it comes,
// until the final one. sent is when the head was sent. The connection is
// the transport's from then on, whatever the outcome.
func (rl *Relay) Adopt(ctx context.Context, w http.ResponseWriter, up net.Conn, head uptransport.Head, fields *[]httpfield.Field, sent time.Time) (*http.Response, error) {
	ob := outbounds.Get().(*outbound)
	ob.w, ob.done = w, false
	opts := uptransport.SendOptions{HeadTimeout: rl.timeout, Fields: fields, Now: sent, Got1xx: ob.hook}
	resp, err := rl.t.Adopt(ctx, up, head, opts)
	ob.mu.Lock()
	ob.done = true
	ob.mu.Unlock()
	ob.w = nil
	outbounds.Put(ob)
	return resp, err
}

// AppendRequestID returns head, an upstream request head ending in an
// empty line, with the field name: id added before that line.
func AppendRequestID(head []byte, name, id string) []byte {
	head = head[:len(head)-2]
	head = AppendField(head, name, id)
	return append(head, "\r\n"...)
}
