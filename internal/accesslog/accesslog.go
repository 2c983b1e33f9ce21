package accesslog

import (
	"context"
	"io"
	"log/slog"
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

// LineBuffer collects the access log's lines and writes them to out in
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
type LineBuffer struct {
	Out io.Writer
	wmu sync.Mutex // held while a batch is written

	mu    sync.Mutex
	buf   []byte
	spare []byte      // a written batch's buffer, for the next one
	timer *time.Timer // armed while buf holds lines
	err   error       // the last write error, reported by the next Write
}

// NewLineBuffer returns a LineBuffer writing to out, directly when out is
// a file that can be (see directWriter).
func NewLineBuffer(out io.Writer) *LineBuffer {
	if d := newDirectWriter(out); d != nil {
		out = d
	}
	return &LineBuffer{Out: out, buf: make([]byte, 0, accessBufferSize)}
}

// Write adds p, which slog's handlers make one whole line, to the batch.
// It returns the error of the last batch written, if any.
func (b *LineBuffer) Write(p []byte) (int, error) {
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
func (b *LineBuffer) addAccessLine(json bool, t time.Time, f *Fields) bool {
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
func (b *LineBuffer) Flush() {
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
func (b *LineBuffer) takeLocked() []byte {
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
func (b *LineBuffer) writeUnlock(batches [][]byte) {
	if len(batches) == 0 {
		b.mu.Unlock()
		return
	}
	b.wmu.Lock()
	b.mu.Unlock()
	var werr error
	for _, batch := range batches {
		if _, err := b.Out.Write(batch); err != nil {
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

// Logger writes the access lines of the HTTP listeners: through
// log, or, when the daemon built the logger itself, formatted here, in
// exactly the bytes log's handler would write (TestAccessLineMatchesSlog),
// straight into out. slog's handlers spend most of the access log's cost:
// a record, an attribute walk and a quoting check per value.
type Logger struct {
	Log   *slog.Logger
	Out   *LineBuffer    // nil: every line through log
	Level *slog.LevelVar // the level log's handler follows
	JSON  bool           // the JSON format, else slog's text format
}

// accessFields are the fields of one access line, in their order. The
// optional ones (a zero value) are left out of the line.
type Fields struct {
	Listener string
	// Client is the address the limits count: the peer, or who a
	// trusted proxy's forwarding header names (the PROXY protocol's
	// source is the peer already). Invalid: "-".
	Client                    netip.Addr
	Peer                      string   // the connection's remote address (r.RemoteAddr)
	Keys                      []string // the distinct keys the limits counted; optional
	Route                     string   // optional
	Method, Host, Path, Proto string
	Status                    int
	Bytes                     int64
	Duration                  time.Duration
	Upstream                  time.Duration // to the upstream's response head; optional
	Admission                 Outcome
	Queued                    time.Duration // optional
	Limit, Reason             string        // optional
	// RateDry is what a dry-run rate would have done: "delayed" or
	// "rejected"; optional.
	RateDry string
	// RequestID is the request's id; optional.
	RequestID string
	// Query, userAgent and referer are the optional fields a listener
	// asks for (see accessExtra); "" is left out.
	Query, UserAgent, Referer string
}

// Outcome is what the limits decided about an exchange, as the access log
// writes it (field admission).
type Outcome uint8

const (
	Admitted   Outcome = iota // let through at once, or no limit applies
	Queued                    // let through after waiting in a limit's queue
	ShadowOver                // over a limit, let through by shadow mode
	Refused                   // refused by a limit or a rate
)

var outcomeNames = [...]string{Admitted: "admitted", Queued: "queued", ShadowOver: "shadow_over", Refused: "refused"}

func (o Outcome) String() string { return outcomeNames[o] }

// accessExtra is the set of optional fields a listener's access lines
// carry (config.ListenerAccessLog.Fields).
type Extra uint8

const (
	FieldQuery Extra = 1 << iota
	FieldUserAgent
	FieldReferer
)

// accessExtraOf returns the optional fields a asks for.
func ExtraOf(a *config.ListenerAccessLog) Extra {
	var e Extra
	if a.Has(config.AccessFieldQuery) {
		e |= FieldQuery
	}
	if a.Has(config.AccessFieldUserAgent) {
		e |= FieldUserAgent
	}
	if a.Has(config.AccessFieldReferer) {
		e |= FieldReferer
	}
	return e
}

func (a *Logger) Write(now time.Time, f *Fields) {
	if a.Out != nil {
		if a.Level.Level() > slog.LevelInfo {
			return
		}
		if a.Out.addAccessLine(a.JSON, now, f) {
			return
		}
	}
	a.writeSlog(now, f)
}

// clientString is the client field's value.
func (f *Fields) clientString() string {
	if !f.Client.IsValid() {
		return "-"
	}
	return f.Client.String()
}

// millis is d in milliseconds, to the microsecond.
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// writeSlog hands the line to the handler itself: slog.Logger would look
// up its caller's program counter for every line, which an access line
// never shows.
func (a *Logger) writeSlog(now time.Time, f *Fields) {
	ctx := context.Background()
	h := a.Log.Handler()
	if !h.Enabled(ctx, slog.LevelInfo) {
		return
	}
	rec := slog.NewRecord(now, slog.LevelInfo, "access", 0)
	rec.AddAttrs(slog.String("listener", f.Listener), slog.String("client", f.clientString()),
		slog.String("peer", f.Peer))
	if len(f.Keys) > 0 {
		rec.AddAttrs(slog.String("key", strings.Join(f.Keys, ",")))
	}
	if f.Route != "" {
		rec.AddAttrs(slog.String("route", f.Route))
	}
	rec.AddAttrs(
		slog.String("method", f.Method), slog.String("host", f.Host), slog.String("path", f.Path),
		slog.String("proto", f.Proto), slog.Int("status", f.Status), slog.Int64("bytes", f.Bytes),
		slog.Float64("duration_ms", millis(f.Duration)))
	if f.Upstream > 0 {
		rec.AddAttrs(slog.Float64("upstream_ms", millis(f.Upstream)))
	}
	rec.AddAttrs(slog.String("admission", f.Admission.String()))
	if f.Queued > 0 {
		rec.AddAttrs(slog.Float64("queued_ms", millis(f.Queued)))
	}
	if f.Limit != "" {
		rec.AddAttrs(slog.String("limit", f.Limit))
	}
	if f.Reason != "" {
		rec.AddAttrs(slog.String("reason", f.Reason))
	}
	if f.RateDry != "" {
		rec.AddAttrs(slog.String("rate_dry_run", f.RateDry))
	}
	if f.RequestID != "" {
		rec.AddAttrs(slog.String("request_id", f.RequestID))
	}
	if f.Query != "" {
		rec.AddAttrs(slog.String("query", f.Query))
	}
	if f.UserAgent != "" {
		rec.AddAttrs(slog.String("user_agent", f.UserAgent))
	}
	if f.Referer != "" {
		rec.AddAttrs(slog.String("referer", f.Referer))
	}
	_ = h.Handle(ctx, rec)
}

// lineWriter appends the fields of an access line in slog's text or JSON
// form.
type lineWriter struct {
	b    []byte
	JSON bool
}

func (w *lineWriter) key(k string) {
	if w.JSON {
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
	if w.JSON {
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
	if us < 0 || (!w.JSON && us >= 1e9) || us >= 1e15 {
		fmt := byte('g')
		if w.JSON {
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
func appendAccessLine(b []byte, json bool, t time.Time, f *Fields) ([]byte, bool) {
	for _, v := range [...]string{f.Listener, f.Peer, f.Method, f.Host, f.Path, f.Proto} {
		if !plainValue(v) {
			return b, false
		}
	}
	for _, v := range f.Keys {
		if !plainValue(v) {
			return b, false
		}
	}
	if (f.Route != "" && !plainValue(f.Route)) || f.Client.Zone() != "" {
		return b, false
	}
	for _, v := range [...]string{f.RequestID, f.Query, f.UserAgent, f.Referer} {
		if v != "" && !plainValue(v) {
			return b, false
		}
	}
	w := lineWriter{b: b, JSON: json}
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
	w.str("listener", f.Listener)
	w.key("client")
	if json {
		w.b = append(w.b, '"')
	}
	if f.Client.IsValid() {
		w.b = f.Client.AppendTo(w.b)
	} else {
		w.b = append(w.b, '-')
	}
	if json {
		w.b = append(w.b, '"')
	}
	w.str("peer", f.Peer)
	if len(f.Keys) > 0 {
		w.key("key")
		if json {
			w.b = append(w.b, '"')
		}
		for i, k := range f.Keys {
			if i > 0 {
				w.b = append(w.b, ',')
			}
			w.b = append(w.b, k...)
		}
		if json {
			w.b = append(w.b, '"')
		}
	}
	if f.Route != "" {
		w.str("route", f.Route)
	}
	w.str("method", f.Method)
	w.str("host", f.Host)
	w.str("path", f.Path)
	w.str("proto", f.Proto)
	w.int("status", int64(f.Status))
	w.int("bytes", f.Bytes)
	w.ms("duration_ms", f.Duration)
	if f.Upstream > 0 {
		w.ms("upstream_ms", f.Upstream)
	}
	w.str("admission", f.Admission.String())
	if f.Queued > 0 {
		w.ms("queued_ms", f.Queued)
	}
	if f.Limit != "" {
		w.str("limit", f.Limit)
	}
	if f.Reason != "" {
		w.str("reason", f.Reason)
	}
	if f.RateDry != "" {
		w.str("rate_dry_run", f.RateDry)
	}
	if f.RequestID != "" {
		w.str("request_id", f.RequestID)
	}
	if f.Query != "" {
		w.str("query", f.Query)
	}
	if f.UserAgent != "" {
		w.str("user_agent", f.UserAgent)
	}
	if f.Referer != "" {
		w.str("referer", f.Referer)
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

// NewLogger returns the logger a configuration asks for, writing to out:
// slog's text or JSON handler at a level read from level, which the caller
// may change later (the daemon does on reload).
func NewLogger(lc config.Log, out io.Writer, level *slog.LevelVar) *slog.Logger {
	level.Set(lc.Level.Slog())
	opts := &slog.HandlerOptions{Level: level}
	if lc.Format == config.LogJSON {
		return slog.New(slog.NewJSONHandler(out, opts))
	}
	return slog.New(slog.NewTextHandler(out, opts))
}
