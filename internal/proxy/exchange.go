package proxy

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/httpfield"
)

// exchangeOpts are the per-exchange settings of an HTTP listener.
type exchangeOpts struct {
	listener string
	log      *accessLogger // nil: no access log
	// metrics are the series of the listener's requests that no route
	// takes; nil: no metrics (tests).
	metrics *routeMetrics
	// clients finds the client the limits count, for the access line;
	// nil: the peer.
	clients *accessClients
	// send is the write-progress bound: an exchange whose client accepts no
	// byte of the response for this long ends (nginx's send_timeout).
	// Zero means none.
	send time.Duration
	// whole is the listener's write_timeout, a bound on writing the whole
	// response that send must never extend. Zero means none.
	whole time.Duration
	// stopping is set once the daemon is shutting down or closing: a
	// request whose context ends then was cut off by the daemon (or may
	// have been), no client hang-up. Nil: never.
	stopping *atomic.Bool
	// extra are the optional access-log fields the listener asks for
	// (accessQuery, ...); zero: the default fields only.
	extra accessExtra
	// ids names each request (config.RequestID); nil: none.
	ids *requestIDs
}

// exchanges returns the outermost handler of an HTTP listener's chain: it
// gives every exchange an exchangeWriter, and when the exchange ends counts
// it in its route's metrics and logs it if the access log is on (also when
// a handler panicked, as http.ErrAbortHandler does for a response cut
// short).
func exchanges(next http.Handler, o exchangeOpts) http.Handler {
	tunnel := o
	tunnel.send = 0 // a CONNECT tunnel has its own bounds: see internal/forward
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		eo := &o
		if r.Method == http.MethodConnect {
			eo = &tunnel
		}
		ew := newExchangeWriter(w, *eo, start)
		st := ew.state()
		st.metrics = o.metrics
		if o.ids != nil {
			st.requestID = o.ids.of(r, peerAddr(r))
		}
		defer exchangeEnded(&o, r, st, start)
		next.ServeHTTP(ew, r)
	})
}

// exchangeEnded counts and logs an exchange that began at start.
func exchangeEnded(o *exchangeOpts, r *http.Request, st *exchangeState, start time.Time) {
	exchangeEndedAt(o, r, st, start, time.Now())
}

// exchangeEndedAt counts and logs an exchange that began at start and
// ended at now.
func exchangeEndedAt(o *exchangeOpts, r *http.Request, st *exchangeState, start, now time.Time) {
	status := int(st.status.Load())
	if status == 0 {
		status = http.StatusOK // nothing written: net/http answers 200
	}
	if st.left && !st.cut.Load() && (o.stopping == nil || !o.stopping.Load()) {
		status = statusClientClosed
	}
	if st.metrics != nil {
		st.metrics.ended(status, now.Sub(start))
	}
	if o.log != nil {
		logAccess(o, r, st, status, start, now)
	}
}

// deadliner is what http.ResponseController calls to set a write deadline:
// net/http's HTTP/1 and HTTP/2 writers and quic-go's HTTP/3 writer have it.
type deadliner interface {
	SetWriteDeadline(time.Time) error
}

// slackDeadliner is a writer that can leave a write deadline in place when
// it expires at most slack after the one asked for, and keep it for the
// connection's next request: internal/http1's. A send timeout set for
// every exchange then moves the connection's timer only when it must.
type slackDeadliner interface {
	SetWriteDeadlineWithin(t time.Time, slack time.Duration) error
}

// exchangeState is what an exchangeWriter records. Flushes may come from
// another goroutine than writes (ReverseProxy flushes streams from a
// timer), hence the atomics.
type exchangeState struct {
	status   atomic.Int32 // the final status written; 0 until then
	bytes    atomic.Int64 // body bytes written
	extended atomic.Int64 // Unix nanoseconds of the last deadline extension
	// cut: the daemon ended the exchange (a limit's reclaim), so a client
	// that seems to have left did not leave of its own (see admission.left).
	cut       atomic.Bool
	admission // the exchange's goroutine only
}

// exchangeWriter is the ResponseWriter of one exchange. It records the
// status and size of the response, and keeps the connection's write
// deadline a send timeout ahead of the last progress, so that a client that
// stops reading ends its exchange (and gives back its permits and its
// upstream connection) instead of holding them for good. The deadline is
// moved at most every eighth of the send timeout, since on HTTP/2 each move
// is a message to the connection's goroutine: a write that makes no
// progress fails between 7/8 of the send timeout and all of it. On
// internal/http1's connections the deadline may also be left up to an
// eighth of the send timeout (at most 500 ms) later than asked, and kept
// from one request to the next, so that it is not set and cleared for
// every request: there a stalled write fails between 7/8 of the send
// timeout and that slack more than all of it.
//
// It unwraps for http.ResponseController. Writers over a connection that
// can be hijacked are wrapped in hijackableWriter, which can be too, so
// that the tunnel tracking of httplimit sees the hijack.
type exchangeWriter struct {
	http.ResponseWriter
	exchangeState
	dl    deadliner      // nil when the writer cannot take deadlines
	sdl   slackDeadliner // dl, when it can leave a deadline within a slack
	send  time.Duration
	limit time.Time // the write_timeout deadline; zero without
}

// sendDeadline returns the write deadline a send timeout of send sets at
// now, and how much later it may expire, for an exchange whose
// write_timeout ends at limit (zero: none), which is exact.
func sendDeadline(now time.Time, send time.Duration, limit time.Time) (time.Time, time.Duration) {
	d := now.Add(send)
	if !limit.IsZero() && limit.Before(d) {
		return limit, 0
	}
	return d, min(send/8, 500*time.Millisecond)
}

// hijackableWriter is an exchangeWriter over a writer that can be hijacked
// (HTTP/1.1).
type hijackableWriter struct {
	exchangeWriter
	hj http.Hijacker
}

var (
	_ http.Flusher  = (*exchangeWriter)(nil)
	_ http.Hijacker = (*hijackableWriter)(nil)
)

// writerOf is the interface both writer types offer the exchange handler.
type writerOf interface {
	http.ResponseWriter
	state() *exchangeState
}

func newExchangeWriter(w http.ResponseWriter, o exchangeOpts, start time.Time) writerOf {
	var ew *exchangeWriter
	var out writerOf
	if hj, ok := w.(http.Hijacker); ok {
		hw := &hijackableWriter{hj: hj}
		ew, out = &hw.exchangeWriter, hw
	} else {
		ew = new(exchangeWriter)
		out = ew
	}
	ew.ResponseWriter, ew.send = w, o.send
	if o.send > 0 {
		ew.dl = findDeadliner(w)
		ew.sdl, _ = ew.dl.(slackDeadliner)
		if o.whole > 0 {
			ew.limit = start.Add(o.whole)
		}
		ew.extend(start)
	}
	return out
}

// findDeadliner returns the writer under w that takes write deadlines, or
// nil.
func findDeadliner(w http.ResponseWriter) deadliner {
	for {
		if d, ok := w.(deadliner); ok {
			return d
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return nil
		}
		w = u.Unwrap()
	}
}

func (w *exchangeWriter) state() *exchangeState { return &w.exchangeState }

// progress moves the write deadline if the last move is an eighth of the
// send timeout old.
func (w *exchangeWriter) progress() {
	if w.dl == nil {
		return
	}
	w.progressAt(time.Now())
}

// progressAt is progress for a caller that has just read the clock.
func (w *exchangeWriter) progressAt(now time.Time) {
	if w.dl == nil {
		return
	}
	if now.UnixNano()-w.extended.Load() < int64(w.send/8) {
		return
	}
	w.extend(now)
}

func (w *exchangeWriter) extend(now time.Time) {
	if w.dl == nil {
		return
	}
	w.extended.Store(now.UnixNano())
	d, slack := sendDeadline(now, w.send, w.limit)
	if w.sdl != nil {
		_ = w.sdl.SetWriteDeadlineWithin(d, slack)
		return
	}
	_ = w.dl.SetWriteDeadline(d)
}

func (w *exchangeWriter) WriteHeader(code int) {
	if code >= 200 || code == http.StatusSwitchingProtocols {
		w.status.CompareAndSwap(0, int32(code))
	}
	w.progress()
	w.ResponseWriter.WriteHeader(code)
}

func (w *exchangeWriter) Write(b []byte) (int, error) {
	w.status.CompareAndSwap(0, http.StatusOK)
	w.progress()
	n, err := w.ResponseWriter.Write(b)
	w.bytes.Add(int64(n))
	return n, err
}

// Flush lets handlers that type-assert http.Flusher flush through.
func (w *exchangeWriter) Flush() {
	w.progress()
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// headerFieldsWriter is a writer that takes a final response's head as a
// list of fields, without a header map: internal/http1's.
type headerFieldsWriter interface {
	WriteHeaderFields(code int, fields []httpfield.Field)
}

// fieldsTarget returns the writer under w when it takes a response's head
// as fields, or nil.
func (w *exchangeWriter) fieldsTarget() headerFieldsWriter {
	fw, _ := w.ResponseWriter.(headerFieldsWriter)
	return fw
}

// writeHeaderFields is WriteHeader for a head given as fields, passed on
// to to, the writer fieldsTarget returned, by a caller that read the clock
// at now, just before.
func (w *exchangeWriter) writeHeaderFields(code int, fields []httpfield.Field, to headerFieldsWriter, now time.Time) {
	if code >= 200 || code == http.StatusSwitchingProtocols {
		w.status.CompareAndSwap(0, int32(code))
	}
	w.progressAt(now)
	to.WriteHeaderFields(code, fields)
}

// exchangeWriterOf returns the exchangeWriter w is, or nil.
func exchangeWriterOf(w http.ResponseWriter) *exchangeWriter {
	switch x := w.(type) {
	case *hijackableWriter:
		return &x.exchangeWriter
	case *exchangeWriter:
		return x
	}
	return nil
}

// SetReadDeadline sets the read deadline of the connection under w, for
// http.ResponseController. A deadline already past is how a limit's
// reclaim cuts an exchange (httplimit): the exchange records it, so that
// its end is not taken for its client's leaving.
func (w *exchangeWriter) SetReadDeadline(t time.Time) error {
	if !t.IsZero() && !t.After(time.Now()) {
		w.cut.Store(true)
	}
	return http.NewResponseController(w.ResponseWriter).SetReadDeadline(t)
}

// Unwrap returns the wrapped writer, for http.ResponseController.
func (w *exchangeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Hijack hands the connection over, without a deadline: a tunnel's bounds
// are its own.
func (w *hijackableWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := w.hj.Hijack()
	if err == nil && w.dl != nil {
		if err := c.SetWriteDeadline(time.Time{}); err != nil && !errors.Is(err, net.ErrClosed) {
			_ = c.Close()
			return nil, nil, err
		}
	}
	return c, brw, err
}
