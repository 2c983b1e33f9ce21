// Package logtest records log records in tests: those a package writes to
// a logger it is given, and those it writes to the process-wide default
// logger, which a library must leave alone unless told otherwise. A
// [Recorder] keeps each record's level and message; a [Buffer] keeps the
// bytes a handler (slog's text or JSON handler, an access log) wrote, for a
// test that checks a line's fields.
package logtest

import (
	"bytes"
	"context"
	"log"
	"log/slog"
	"sync"
	"testing"
)

// A Buffer is a bytes.Buffer that goroutines may write to while a test
// reads it: the destination of a logger that logs from other goroutines
// than the test's. Its zero value is empty and ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p; it never fails.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns a copy of everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// A Recorder is a slog.Handler that keeps "LEVEL message" of every record it
// handles, at every level. It is safe for concurrent use.
type Recorder struct {
	mu    sync.Mutex
	lines []string
}

var _ slog.Handler = (*Recorder)(nil)

// Enabled reports true: a Recorder wants every record.
func (r *Recorder) Enabled(context.Context, slog.Level) bool { return true }

// Handle keeps the record's level and message.
func (r *Recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, rec.Level.String()+" "+rec.Message)
	return nil
}

// WithAttrs returns r: attributes are not recorded.
func (r *Recorder) WithAttrs([]slog.Attr) slog.Handler { return r }

// WithGroup returns r: groups are not recorded.
func (r *Recorder) WithGroup(string) slog.Handler { return r }

// Lines returns a copy of what was recorded, in order.
func (r *Recorder) Lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.lines...)
}

// CaptureDefault makes a new Recorder the handler of slog's default logger
// (and so of the log package's) until t ends, then puts back the previous
// default logger and the log package's output and flags. A test using it
// must not run in parallel with others of its package.
func CaptureDefault(t testing.TB) *Recorder {
	t.Helper()
	prev, out, flags := slog.Default(), log.Writer(), log.Flags()
	r := &Recorder{}
	slog.SetDefault(slog.New(r))
	t.Cleanup(func() {
		slog.SetDefault(prev)
		// SetDefault redirected the log package to r; undo that too.
		log.SetOutput(out)
		log.SetFlags(flags)
	})
	return r
}
