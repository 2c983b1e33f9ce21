package exchange

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/accesslog"
	"github.com/seed-a07d1050/portcullis/internal/httpfield"
)

// Opts are the per-exchange settings of an HTTP listener.
type Opts struct {
	Listener string
	Log      *accesslog.Logger // nil: no access log
	// Metrics are the series of the listener's requests that no route
	// takes; nil: no metrics (tests).
	Metrics *RouteMetrics
	// Clients finds the client the limits count, for the access line;
	// nil: the peer.
	Clients *accesslog.Clients
	// Send is the write-progress bound: an exchange whose client accepts no
	// byte of the response for this long ends (nginx's send_timeout).
	// Zero means none.
	Send time.Duration
	// Whole is the listener's write_timeout, a bound on writing the whole
	// response that send must never extend. Zero means none.
	Whole time.Duration
	// Stopping is set once the daemon is shutting down or closing: a
	// request whose context ends then was cut off by the daemon (or may
	// have been), no client hang-up. Nil: never.
	Stopping *atomic.Bool
	// Extra are the optional access-log fields the listener asks for
	// (accessQuery, ...); zero: the default fields only.
	Extra accesslog.Extra
	// IDs names each request (config.RequestID); nil: none.
	IDs *RequestIDs
}

// exchanges returns the outermost handler of an HTTP listener's chain: it
// gives every exchange an Writer, and when the exchange ends counts
// it in its route's metrics and logs it if the access log is on (also when
// a handler panicked, as http.ErrAbortHandler does for a response cut
// short).
func Handler(next http.Handler, o Opts) http.Handler {
	tunnel := o
	tunnel.Send = 0 // a CONNECT tunnel has its own bounds: see internal/forward
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		eo := &o
		if r.Method == http.MethodConnect {
			eo = &tunnel
		}
		ew := NewWriter(w, *eo, start)
		st := ew.Exchange()
		st.Metrics = o.Metrics
		if o.IDs != nil {
			st.RequestID = o.IDs.Of(r, PeerAddr(r))
		}
		defer Ended(&o, r, st, start)
		next.ServeHTTP(ew, r)
	})
}

// Ended counts and logs an exchange that began at start.
func Ended(o *Opts, r *http.Request, st *State, start time.Time) {
	EndedAt(o, r, st, start, time.Now())
}

// EndedAt counts and logs an exchange that began at start and
// ended at now.
func EndedAt(o *Opts, r *http.Request, st *State, start, now time.Time) {
	status := int(st.Status.Load())
	if status == 0 {
		status = http.StatusOK // nothing written: net/http answers 200
	}
	if st.Left && !st.Cut.Load() && (o.Stopping == nil || !o.Stopping.Load()) {
		status = StatusClientClosed
	}
	if st.Metrics != nil {
		st.Metrics.ended(status, now.Sub(start))
	}
	if o.Log != nil {
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

// State is what an Writer records. Flushes may come from
// another goroutine than writes (ReverseProxy flushes streams from a
// timer), hence the atomics.
type State struct {
	Status   atomic.Int32 // the final status written; 0 until then
	Bytes    atomic.Int64 // body bytes written
	Extended atomic.Int64 // Unix nanoseconds of the last deadline extension
	// Cut: the daemon ended the exchange (a limit's reclaim), so a client
	// that seems to have left did not leave of its own (see Admission.Left).
	Cut       atomic.Bool
	Admission // the exchange's goroutine only
}

// Writer is the ResponseWriter of one exchange. It records the
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
type Writer struct {
	http.ResponseWriter
	State
	dl    deadliner      // nil when the writer cannot take deadlines
	sdl   slackDeadliner // dl, when it can leave a deadline within a slack
	Send  time.Duration
	limit time.Time // the write_timeout deadline; zero without
}

// SendDeadline returns the write deadline a send timeout of send sets at
// now, and how much later it may expire, for an exchange whose
// write_timeout ends at limit (zero: none), which is exact.
func SendDeadline(now time.Time, send time.Duration, limit time.Time) (time.Time, time.Duration) {
	d := now.Add(send)
	if !limit.IsZero() && limit.Before(d) {
		return limit, 0
	}
	return d, min(send/8, 500*time.Millisecond)
}

// hijackableWriter is an Writer over a writer that can be hijacked
// (HTTP/1.1).
type hijackableWriter struct {
	Writer
	hj http.Hijacker
}

var (
	_ http.Flusher  = (*Writer)(nil)
	_ http.Hijacker = (*hijackableWriter)(nil)
)

// writerOf is the interface both writer types offer the exchange handler.
type StateWriter interface {
	http.ResponseWriter
	Exchange() *State
}

func NewWriter(w http.ResponseWriter, o Opts, start time.Time) StateWriter {
	var ew *Writer
	var out StateWriter
	if hj, ok := w.(http.Hijacker); ok {
		hw := &hijackableWriter{hj: hj}
		ew, out = &hw.Writer, hw
	} else {
		ew = new(Writer)
		out = ew
	}
	ew.ResponseWriter, ew.Send = w, o.Send
	if o.Send > 0 {
		ew.dl = findDeadliner(w)
		ew.sdl, _ = ew.dl.(slackDeadliner)
		if o.Whole > 0 {
			ew.limit = start.Add(o.Whole)
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

func (w *Writer) Exchange() *State { return &w.State }

// progress moves the write deadline if the last move is an eighth of the
// send timeout old.
func (w *Writer) progress() {
	if w.dl == nil {
		return
	}
	w.progressAt(time.Now())
}

// progressAt is progress for a caller that has just read the clock.
func (w *Writer) progressAt(now time.Time) {
	if w.dl == nil {
		return
	}
	if now.UnixNano()-w.Extended.Load() < int64(w.Send/8) {
		return
	}
	w.extend(now)
}

func (w *Writer) extend(now time.Time) {
	if w.dl == nil {
		return
	}
	w.Extended.Store(now.UnixNano())
	d, slack := SendDeadline(now, w.Send, w.limit)
	if w.sdl != nil {
		_ = w.sdl.SetWriteDeadlineWithin(d, slack)
		return
	}
	_ = w.dl.SetWriteDeadline(d)
}

func (w *Writer) WriteHeader(code int) {
	if code >= 200 || code == http.StatusSwitchingProtocols {
		w.Status.CompareAndSwap(0, int32(code))
	}
	w.progress()
	w.ResponseWriter.WriteHeader(code)
}

func (w *Writer) Write(b []byte) (int, error) {
	w.Status.CompareAndSwap(0, http.StatusOK)
	w.progress()
	n, err := w.ResponseWriter.Write(b)
	w.Bytes.Add(int64(n))
	return n, err
}

// Flush lets handlers that type-assert http.Flusher flush through.
func (w *Writer) Flush() {
	w.progress()
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// HeaderFieldsWriter is a writer that takes a final response's head as a
// list of fields, without a header map: internal/http1's.
type HeaderFieldsWriter interface {
	WriteHeaderFields(code int, fields []httpfield.Field)
}

// FieldsTarget returns the writer under w when it takes a response's head
// as fields, or nil.
func (w *Writer) FieldsTarget() HeaderFieldsWriter {
	fw, _ := w.ResponseWriter.(HeaderFieldsWriter)
	return fw
}

// WriteHeaderFields is WriteHeader for a head given as fields, passed on
// to to, the writer fieldsTarget returned, by a caller that read the clock
// at now, just before.
func (w *Writer) WriteHeaderFields(code int, fields []httpfield.Field, to HeaderFieldsWriter, now time.Time) {
	if code >= 200 || code == http.StatusSwitchingProtocols {
		w.Status.CompareAndSwap(0, int32(code))
	}
	w.progressAt(now)
	to.WriteHeaderFields(code, fields)
}

// WriterOf returns the Writer w is, or nil.
func WriterOf(w http.ResponseWriter) *Writer {
	switch x := w.(type) {
	case *hijackableWriter:
		return &x.Writer
	case *Writer:
		return x
	}
	return nil
}

// SetReadDeadline sets the read deadline of the connection under w, for
// http.ResponseController. A deadline already past is how a limit's
// reclaim cuts an exchange (httplimit): the exchange records it, so that
// its end is not taken for its client's leaving.
func (w *Writer) SetReadDeadline(t time.Time) error {
	if !t.IsZero() && !t.After(time.Now()) {
		w.Cut.Store(true)
	}
	return http.NewResponseController(w.ResponseWriter).SetReadDeadline(t)
}

// Unwrap returns the wrapped writer, for http.ResponseController.
func (w *Writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }

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

// logAccess writes the access line of one exchange that began at start
// and ended now with status.
func logAccess(o *Opts, r *http.Request, st *State, status int, start, now time.Time) {
	client := st.Client
	if !client.IsValid() {
		client = o.Clients.Client(r)
	}
	f := accesslog.Fields{
		Listener: o.Listener, Client: client, Peer: r.RemoteAddr,
		Keys: st.keys[:st.nkeys], Route: st.Route,
		Method: r.Method, Host: r.Host, Path: r.URL.Path, Proto: r.Proto,
		Status: status, Bytes: st.Bytes.Load(), Duration: now.Sub(start), Upstream: st.Upstream,
		Admission: st.outcome, Queued: st.waited, Limit: st.by, Reason: st.reason,
		RateDry: rateDryNames[st.RateDry], RequestID: st.RequestID,
	}
	if o.Extra != 0 {
		if o.Extra&accesslog.FieldQuery != 0 {
			f.Query = r.URL.RawQuery
		}
		if o.Extra&accesslog.FieldUserAgent != 0 {
			f.UserAgent = r.Header.Get("User-Agent")
		}
		if o.Extra&accesslog.FieldReferer != 0 {
			f.Referer = r.Header.Get("Referer")
		}
	}
	o.Log.Write(now, &f)
}

// WriteShort writes a short plain-text answer that proxies and browsers show
// as is.
func WriteShort(w http.ResponseWriter, status int, body string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}
