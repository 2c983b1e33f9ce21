package proxy

import (
	"context"
	"io"
	"log/slog"
	"net/http"
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

// logAccess writes the access line of one exchange. It hands the record
// to the handler itself: slog.Logger would look up its caller's program
// counter for every line, which an access line never shows.
func logAccess(o exchangeOpts, r *http.Request, st *exchangeState, start time.Time) {
	ctx := context.Background()
	h := o.log.Handler()
	if !h.Enabled(ctx, slog.LevelInfo) {
		return
	}
	status := int(st.status.Load())
	if status == 0 {
		status = http.StatusOK
	}
	now := time.Now()
	rec := slog.NewRecord(now, slog.LevelInfo, "access", 0)
	rec.AddAttrs(
		slog.String("listener", o.listener), slog.String("client", r.RemoteAddr),
		slog.String("method", r.Method), slog.String("host", r.Host), slog.String("path", r.URL.Path),
		slog.String("proto", r.Proto), slog.Int("status", status), slog.Int64("bytes", st.bytes.Load()),
		slog.Duration("duration", now.Sub(start)))
	_ = h.Handle(ctx, rec)
}
