package proxy

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/config"
)

// Access log lines are written in batches, as nginx's "access_log ...
// buffer= flush=" writes them: one write per line would cost a system
// call per exchange, about as much as the rest of the line's logging.
const (
	// accessFlushAfter is the longest an access line waits in the buffer.
	accessFlushAfter = 100 * time.Millisecond
	// accessBufferSize is how many bytes of lines are written at once.
	accessBufferSize = 32 << 10
)

// lineBuffer collects the access log's lines and writes them to out in
// batches: when accessBufferSize bytes are waiting, or accessFlushAfter
// after the first line that is waiting, whichever comes first, and on
// Flush. One timer at most is armed, and only while lines wait; no
// goroutine runs in between. A line is never split across two writes.
//
// A batch is written outside the lock the lines are added under: a write
// to a file can last tens of microseconds, and a goroutine adding its
// line meanwhile (an event loop, whose every connection waits for it)
// should not wait for it. Batches still go out in the order they were
// taken: wmu is taken before mu is let go.
type lineBuffer struct {
	out io.Writer
	wmu sync.Mutex // held while a batch is written

	mu    sync.Mutex
	buf   []byte
	spare []byte      // a written batch's buffer, for the next one
	timer *time.Timer // armed while buf holds lines
	err   error       // the last write error, reported by the next Write
}

// newLineBuffer returns a lineBuffer writing to out, directly when out is
// a file that can be (see directWriter).
func newLineBuffer(out io.Writer) *lineBuffer {
	if d := newDirectWriter(out); d != nil {
		out = d
	}
	return &lineBuffer{out: out, buf: make([]byte, 0, accessBufferSize)}
}

// Write adds p, which slog's handlers make one whole line, to the batch.
// It returns the error of the last batch written, if any.
func (b *lineBuffer) Write(p []byte) (int, error) {
	var full [2][]byte // at most the lines before p, then p alone
	n := 0
	b.mu.Lock()
	if len(b.buf)+len(p) > accessBufferSize && len(b.buf) > 0 {
		full[n] = b.takeLocked()
		n++
	}
	b.buf = append(b.buf, p...)
	if len(b.buf) >= accessBufferSize {
		full[n] = b.takeLocked()
		n++
	} else if b.timer == nil {
		b.timer = time.AfterFunc(accessFlushAfter, b.Flush)
	}
	err := b.err
	b.err = nil
	b.writeUnlock(full[:n])
	return len(p), err
}

// addAccessLine formats the access line of f logged at t straight into
// the batch, under the lock lines are added under, and reports true; or
// reports false, having added nothing, when the line is left to slog (see
// appendAccessLine). Formatting in place spares a buffer of its own and a
// copy per line; a line takes about a microsecond to format, well under
// what its system calls would hold the lock for were it written alone.
func (b *lineBuffer) addAccessLine(json bool, t time.Time, f *accessFields) bool {
	b.mu.Lock()
	// A panic while formatting must not leave every later line waiting
	// for the lock: the loops recover from their handlers' panics.
	formatting := true
	defer func() {
		if formatting {
			b.mu.Unlock()
		}
	}()
	at := len(b.buf)
	buf, ok := appendAccessLine(b.buf, json, t, f)
	formatting = false
	if !ok {
		b.buf = buf[:at]
		b.mu.Unlock()
		return false
	}
	b.buf = buf
	var full [1][]byte
	n := 0
	// The batch goes once the next line might not fit: lines are
	// formatted in place, so one that did not would move the whole batch
	// to a larger array.
	if len(b.buf) > accessBufferSize-accessLineRoom {
		full[0] = b.takeLocked()
		n = 1
	} else if b.timer == nil {
		b.timer = time.AfterFunc(accessFlushAfter, b.Flush)
	}
	b.writeUnlock(full[:n])
	return true
}

// accessLineRoom is the room for the next line a batch must have left:
// access lines are shorter, unless a path or host is long.
const accessLineRoom = 1 << 10

// Flush writes the lines waiting, at once.
func (b *lineBuffer) Flush() {
	b.mu.Lock()
	var full [1][]byte
	n := 0
	if len(b.buf) > 0 {
		full[0] = b.takeLocked()
		n = 1
	} else if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	b.writeUnlock(full[:n])
}

// takeLocked returns the lines waiting as a batch and starts another.
func (b *lineBuffer) takeLocked() []byte {
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	batch := b.buf
	b.buf, b.spare = b.spare[:0], nil
	if b.buf == nil {
		b.buf = make([]byte, 0, accessBufferSize)
	}
	return batch
}

// writeUnlock writes batches, in order after any batch taken before them,
// and lets go of mu, which the caller holds, before it writes.
func (b *lineBuffer) writeUnlock(batches [][]byte) {
	if len(batches) == 0 {
		b.mu.Unlock()
		return
	}
	b.wmu.Lock()
	b.mu.Unlock()
	var werr error
	for _, batch := range batches {
		if _, err := b.out.Write(batch); err != nil {
			werr = err
		}
	}
	b.wmu.Unlock()
	last := batches[len(batches)-1]
	b.mu.Lock()
	if werr != nil {
		b.err = werr
	}
	if b.spare == nil && cap(last) <= 2*accessBufferSize { // not after one huge line
		b.spare = last[:0]
	}
	b.mu.Unlock()
}

// accessLogger writes the access lines of the HTTP listeners: through
// log, or, when the daemon built the logger itself, formatted here, in
// exactly the bytes log's handler would write (TestAccessLineMatchesSlog),
// straight into out. slog's handlers spend most of the access log's cost:
// a record, an attribute walk and a quoting check per value.
type accessLogger struct {
	log   *slog.Logger
	out   *lineBuffer    // nil: every line through log
	level *slog.LevelVar // the level log's handler follows
	json  bool           // the JSON format, else slog's text format
}

// accessFields are the fields of one access line, in their order. The
// optional ones (a zero value) are left out of the line.
type accessFields struct {
	listener string
	// client is the address the limits count: the peer, or who a
	// trusted proxy's forwarding header names (the PROXY protocol's
	// source is the peer already). Invalid: "-".
	client                    netip.Addr
	peer                      string   // the connection's remote address (r.RemoteAddr)
	keys                      []string // the distinct keys the limits counted; optional
	route                     string   // optional
	method, host, path, proto string
	status                    int
	bytes                     int64
	duration                  time.Duration
	upstream                  time.Duration // to the upstream's response head; optional
	admission                 outcome
	queued                    time.Duration // optional
	limit, reason             string        // optional
	// rateDry is what a dry-run rate would have done: "delayed" or
	// "rejected"; optional.
	rateDry string
	// requestID is the request's id; optional.
	requestID string
	// query, userAgent and referer are the optional fields a listener
	// asks for (see accessExtra); "" is left out.
	query, userAgent, referer string
}

// accessExtra is the set of optional fields a listener's access lines
// carry (config.ListenerAccessLog.Fields).
type accessExtra uint8

const (
	accessQuery accessExtra = 1 << iota
	accessUserAgent
	accessReferer
)

// accessExtraOf returns the optional fields a asks for.
func accessExtraOf(a *config.ListenerAccessLog) accessExtra {
	var e accessExtra
	if a.Has(config.AccessFieldQuery) {
		e |= accessQuery
	}
	if a.Has(config.AccessFieldUserAgent) {
		e |= accessUserAgent
	}
	if a.Has(config.AccessFieldReferer) {
		e |= accessReferer
	}
	return e
}

// logAccess writes the access line of one exchange that began at start
// and ended now with status.
func logAccess(o *exchangeOpts, r *http.Request, st *exchangeState, status int, start, now time.Time) {
	client := st.client
	if !client.IsValid() {
		client = o.clients.client(r)
	}
	f := accessFields{
		listener: o.listener, client: client, peer: r.RemoteAddr,
		keys: st.keys[:st.nkeys], route: st.route,
		method: r.Method, host: r.Host, path: r.URL.Path, proto: r.Proto,
		status: status, bytes: st.bytes.Load(), duration: now.Sub(start), upstream: st.upstream,
		admission: st.outcome, queued: st.waited, limit: st.by, reason: st.reason,
		rateDry: rateDryNames[st.rateDry], requestID: st.requestID,
	}
	if o.extra != 0 {
		if o.extra&accessQuery != 0 {
			f.query = r.URL.RawQuery
		}
		if o.extra&accessUserAgent != 0 {
			f.userAgent = r.Header.Get("User-Agent")
		}
		if o.extra&accessReferer != 0 {
			f.referer = r.Header.Get("Referer")
		}
	}
	o.log.write(now, &f)
}

func (a *accessLogger) write(now time.Time, f *accessFields) {
	if a.out != nil {
		if a.level.Level() > slog.LevelInfo {
			return
		}
		if a.out.addAccessLine(a.json, now, f) {
			return
		}
	}
	a.writeSlog(now, f)
}

// clientString is the client field's value.
func (f *accessFields) clientString() string {
	if !f.client.IsValid() {
		return "-"
	}
	return f.client.String()
}

// millis is d in milliseconds, to the microsecond.
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// writeSlog hands the line to the handler itself: slog.Logger would look
// up its caller's program counter for every line, which an access line
// never shows.
func (a *accessLogger) writeSlog(now time.Time, f *accessFields) {
	ctx := context.Background()
	h := a.log.Handler()
	if !h.Enabled(ctx, slog.LevelInfo) {
		return
	}
	rec := slog.NewRecord(now, slog.LevelInfo, "access", 0)
	rec.AddAttrs(slog.String("listener", f.listener), slog.String("client", f.clientString()),
		slog.String("peer", f.peer))
	if len(f.keys) > 0 {
		rec.AddAttrs(slog.String("key", strings.Join(f.keys, ",")))
	}
	if f.route != "" {
		rec.AddAttrs(slog.String("route", f.route))
	}
	rec.AddAttrs(
		slog.String("method", f.method), slog.String("host", f.host), slog.String("path", f.path),
		slog.String("proto", f.proto), slog.Int("status", f.status), slog.Int64("bytes", f.bytes),
		slog.Float64("duration_ms", millis(f.duration)))
	if f.upstream > 0 {
		rec.AddAttrs(slog.Float64("upstream_ms", millis(f.upstream)))
	}
	rec.AddAttrs(slog.String("admission", f.admission.String()))
	if f.queued > 0 {
		rec.AddAttrs(slog.Float64("queued_ms", millis(f.queued)))
	}
	if f.limit != "" {
		rec.AddAttrs(slog.String("limit", f.limit))
	}
	if f.reason != "" {
		rec.AddAttrs(slog.String("reason", f.reason))
	}
	if f.rateDry != "" {
		rec.AddAttrs(slog.String("rate_dry_run", f.rateDry))
	}
	if f.requestID != "" {
		rec.AddAttrs(slog.String("request_id", f.requestID))
	}
	if f.query != "" {
		rec.AddAttrs(slog.String("query", f.query))
	}
	if f.userAgent != "" {
		rec.AddAttrs(slog.String("user_agent", f.userAgent))
	}
	if f.referer != "" {
		rec.AddAttrs(slog.String("referer", f.referer))
	}
	_ = h.Handle(ctx, rec)
}

// lineWriter appends the fields of an access line in slog's text or JSON
// form.
type lineWriter struct {
	b    []byte
	json bool
}

func (w *lineWriter) key(k string) {
	if w.json {
		w.b = append(w.b, `,"`...)
		w.b = append(w.b, k...)
		w.b = append(w.b, `":`...)
		return
	}
	w.b = append(w.b, ' ')
	w.b = append(w.b, k...)
	w.b = append(w.b, '=')
}

// str appends a plain string value.
func (w *lineWriter) str(k, v string) {
	w.key(k)
	if w.json {
		w.b = append(w.b, '"')
		w.b = append(w.b, v...)
		w.b = append(w.b, '"')
		return
	}
	w.b = append(w.b, v...)
}

func (w *lineWriter) int(k string, v int64) {
	w.key(k)
	w.b = strconv.AppendInt(w.b, v, 10)
}

// ms appends d in milliseconds as slog writes a float64: strconv's
// shortest 'g' form in text, encoding/json's in JSON ('f' for the range a
// duration in milliseconds to the microsecond can take, 0.001 to 1e13).
//
// Below 1e6 ms (where 'g' turns to exponents) both forms are the decimal
// of the whole microseconds, without trailing zeros: a number of at most
// 15 significant digits is the shortest that reads back as its float64.
// That is written with integer arithmetic, which costs a fraction of
// strconv's shortest-float search.
func (w *lineWriter) ms(k string, d time.Duration) {
	w.key(k)
	us := d.Microseconds()
	if us < 0 || (!w.json && us >= 1e9) || us >= 1e15 {
		fmt := byte('g')
		if w.json {
			fmt = 'f'
		}
		w.b = strconv.AppendFloat(w.b, millis(d), fmt, -1, 64)
		return
	}
	w.b = strconv.AppendInt(w.b, us/1000, 10)
	frac := us % 1000
	if frac == 0 {
		return
	}
	digits := [3]byte{byte('0' + frac/100), byte('0' + frac/10%10), byte('0' + frac%10)}
	n := 3
	for digits[n-1] == '0' {
		n--
	}
	w.b = append(w.b, '.')
	w.b = append(w.b, digits[:n]...)
}

// appendAccessLine appends the access line of f logged at t, as slog's
// text or JSON handler writes it, and reports true; or reports false,
// with b's contents undefined, when a value is not plain (see plainValue)
// and the line is left to slog, which knows how to quote it.
func appendAccessLine(b []byte, json bool, t time.Time, f *accessFields) ([]byte, bool) {
	for _, v := range [...]string{f.listener, f.peer, f.method, f.host, f.path, f.proto} {
		if !plainValue(v) {
			return b, false
		}
	}
	for _, v := range f.keys {
		if !plainValue(v) {
			return b, false
		}
	}
	if (f.route != "" && !plainValue(f.route)) || f.client.Zone() != "" {
		return b, false
	}
	for _, v := range [...]string{f.requestID, f.query, f.userAgent, f.referer} {
		if v != "" && !plainValue(v) {
			return b, false
		}
	}
	w := lineWriter{b: b, json: json}
	t = t.Round(0)
	if json {
		w.b = append(w.b, `{"time":"`...)
		w.b = jsonStamps.append(w.b, t)
		w.b = append(w.b, `","level":"INFO","msg":"access"`...)
	} else {
		w.b = append(w.b, "time="...)
		w.b = textStamps.append(w.b, t)
		w.b = append(w.b, " level=INFO msg=access"...)
	}
	w.str("listener", f.listener)
	w.key("client")
	if json {
		w.b = append(w.b, '"')
	}
	if f.client.IsValid() {
		w.b = f.client.AppendTo(w.b)
	} else {
		w.b = append(w.b, '-')
	}
	if json {
		w.b = append(w.b, '"')
	}
	w.str("peer", f.peer)
	if len(f.keys) > 0 {
		w.key("key")
		if json {
			w.b = append(w.b, '"')
		}
		for i, k := range f.keys {
			if i > 0 {
				w.b = append(w.b, ',')
			}
			w.b = append(w.b, k...)
		}
		if json {
			w.b = append(w.b, '"')
		}
	}
	if f.route != "" {
		w.str("route", f.route)
	}
	w.str("method", f.method)
	w.str("host", f.host)
	w.str("path", f.path)
	w.str("proto", f.proto)
	w.int("status", int64(f.status))
	w.int("bytes", f.bytes)
	w.ms("duration_ms", f.duration)
	if f.upstream > 0 {
		w.ms("upstream_ms", f.upstream)
	}
	w.str("admission", f.admission.String())
	if f.queued > 0 {
		w.ms("queued_ms", f.queued)
	}
	if f.limit != "" {
		w.str("limit", f.limit)
	}
	if f.reason != "" {
		w.str("reason", f.reason)
	}
	if f.rateDry != "" {
		w.str("rate_dry_run", f.rateDry)
	}
	if f.requestID != "" {
		w.str("request_id", f.requestID)
	}
	if f.query != "" {
		w.str("query", f.query)
	}
	if f.userAgent != "" {
		w.str("user_agent", f.userAgent)
	}
	if f.referer != "" {
		w.str("referer", f.referer)
	}
	if json {
		return append(w.b, "}\n"...), true
	}
	return append(w.b, '\n'), true
}

// plainValue reports whether s is written as it is by both of slog's
// handlers: not empty, and only printable ASCII other than space, '=',
// '"', '\\' and the characters JSON encoders may escape ('<', '>', '&').
func plainValue(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !plainBytes[s[i]] {
			return false
		}
	}
	return true
}

// plainBytes are the bytes of plain values. Every byte of a line's
// values is checked, and one load a byte costs a fraction of the tests
// it stands for.
var plainBytes = func() (plain [256]bool) {
	for c := '!'; c < 0x7f; c++ {
		plain[c] = true
	}
	for _, c := range `="\<>&` {
		plain[c] = false
	}
	return plain
}()
