package proxy

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"
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
type lineBuffer struct {
	out io.Writer

	mu    sync.Mutex
	buf   []byte
	timer *time.Timer // armed while buf holds lines
	err   error       // the last write error, reported by the next Write
}

func newLineBuffer(out io.Writer) *lineBuffer {
	return &lineBuffer{out: out, buf: make([]byte, 0, accessBufferSize)}
}

// Write adds p, which slog's handlers make one whole line, to the batch.
// It returns the error of the last batch written, if any.
func (b *lineBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.buf)+len(p) > accessBufferSize && len(b.buf) > 0 {
		b.flushLocked()
	}
	b.buf = append(b.buf, p...)
	if len(b.buf) >= accessBufferSize {
		b.flushLocked()
	} else if b.timer == nil {
		b.timer = time.AfterFunc(accessFlushAfter, b.Flush)
	}
	err := b.err
	b.err = nil
	return len(p), err
}

// Flush writes the lines waiting, at once.
func (b *lineBuffer) Flush() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.flushLocked()
}

func (b *lineBuffer) flushLocked() {
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	if len(b.buf) == 0 {
		return
	}
	if _, err := b.out.Write(b.buf); err != nil {
		b.err = err
	}
	if cap(b.buf) > 2*accessBufferSize {
		b.buf = make([]byte, 0, accessBufferSize) // after one huge line
	} else {
		b.buf = b.buf[:0]
	}
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

// accessFields are the fields of one access line, in their order.
type accessFields struct {
	listener, client, method, host, path, proto string
	status                                      int
	bytes                                       int64
	duration                                    time.Duration
}

var lineBufs = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

// logAccess writes the access line of one exchange.
func logAccess(o exchangeOpts, r *http.Request, st *exchangeState, start time.Time) {
	status := int(st.status.Load())
	if status == 0 {
		status = http.StatusOK
	}
	now := time.Now()
	f := accessFields{
		listener: o.listener, client: r.RemoteAddr, method: r.Method, host: r.Host, path: r.URL.Path,
		proto: r.Proto, status: status, bytes: st.bytes.Load(), duration: now.Sub(start),
	}
	o.log.write(now, &f)
}

func (a *accessLogger) write(now time.Time, f *accessFields) {
	if a.out != nil {
		if a.level.Level() > slog.LevelInfo {
			return
		}
		bp := lineBufs.Get().(*[]byte)
		b, ok := appendAccessLine((*bp)[:0], a.json, now, f)
		if ok {
			_, _ = a.out.Write(b)
		}
		*bp = b
		lineBufs.Put(bp)
		if ok {
			return
		}
	}
	a.writeSlog(now, f)
}

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
	rec.AddAttrs(
		slog.String("listener", f.listener), slog.String("client", f.client),
		slog.String("method", f.method), slog.String("host", f.host), slog.String("path", f.path),
		slog.String("proto", f.proto), slog.Int("status", f.status), slog.Int64("bytes", f.bytes),
		slog.Duration("duration", f.duration))
	_ = h.Handle(ctx, rec)
}

// appendAccessLine appends the access line of f logged at t, as slog's
// text or JSON handler writes it, and reports true; or reports false,
// with b's contents undefined, when a value is not plain (see plainValue)
// and the line is left to slog, which knows how to quote it.
func appendAccessLine(b []byte, json bool, t time.Time, f *accessFields) ([]byte, bool) {
	strs := [...]struct{ k, v string }{
		{"listener", f.listener}, {"client", f.client}, {"method", f.method},
		{"host", f.host}, {"path", f.path}, {"proto", f.proto},
	}
	for _, kv := range strs {
		if !plainValue(kv.v) {
			return b, false
		}
	}
	t = t.Round(0)
	if json {
		b = append(b, `{"time":"`...)
		b = t.AppendFormat(b, time.RFC3339Nano)
		b = append(b, `","level":"INFO","msg":"access"`...)
		for _, kv := range strs {
			b = append(b, `,"`...)
			b = append(b, kv.k...)
			b = append(b, `":"`...)
			b = append(b, kv.v...)
			b = append(b, '"')
		}
		b = append(b, `,"status":`...)
		b = strconv.AppendInt(b, int64(f.status), 10)
		b = append(b, `,"bytes":`...)
		b = strconv.AppendInt(b, f.bytes, 10)
		b = append(b, `,"duration":`...)
		b = strconv.AppendInt(b, int64(f.duration), 10)
		return append(b, "}\n"...), true
	}
	b = append(b, "time="...)
	b = t.AppendFormat(b, "2006-01-02T15:04:05.000Z07:00")
	b = append(b, " level=INFO msg=access"...)
	for _, kv := range strs {
		b = append(b, ' ')
		b = append(b, kv.k...)
		b = append(b, '=')
		b = append(b, kv.v...)
	}
	b = append(b, " status="...)
	b = strconv.AppendInt(b, int64(f.status), 10)
	b = append(b, " bytes="...)
	b = strconv.AppendInt(b, f.bytes, 10)
	b = append(b, " duration="...)
	b = append(b, f.duration.String()...)
	return append(b, '\n'), true
}

// plainValue reports whether s is written as it is by both of slog's
// handlers: not empty, and only printable ASCII other than space, '=',
// '"', '\\' and the characters JSON encoders may escape ('<', '>', '&').
func plainValue(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c <= ' ' || c >= 0x7f:
			return false
		case c == '=' || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&':
			return false
		}
	}
	return true
}
