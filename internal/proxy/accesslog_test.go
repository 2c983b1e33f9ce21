package proxy

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// recordingWriter records every Write it gets.
type recordingWriter struct {
	mu     sync.Mutex
	writes []string
	err    error
}

func (w *recordingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, string(p))
	return len(p), w.err
}

func (w *recordingWriter) got() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.writes...)
}

func TestLineBufferBatchesLines(t *testing.T) {
	t.Run("a line waits at most accessFlushAfter", func(t *testing.T) {
		var out recordingWriter
		b := newLineBuffer(&out)
		start := time.Now()
		_, _ = b.Write([]byte("one\n"))
		_, _ = b.Write([]byte("two\n"))
		if w := out.got(); len(w) != 0 {
			t.Fatalf("written at once: %q", w)
		}
		for len(out.got()) == 0 {
			if time.Since(start) > 5*time.Second {
				t.Fatal("the lines were never written")
			}
			time.Sleep(5 * time.Millisecond)
		}
		if took := time.Since(start); took < accessFlushAfter {
			t.Errorf("written after %v, before accessFlushAfter (%v)", took, accessFlushAfter)
		}
		if w := out.got(); len(w) != 1 || w[0] != "one\ntwo\n" {
			t.Errorf("writes %q, want both lines in one", w)
		}
	})
	t.Run("a full buffer is written at once, lines whole", func(t *testing.T) {
		var out recordingWriter
		b := newLineBuffer(&out)
		line := strings.Repeat("x", 1000) + "\n"
		for range 100 {
			_, _ = b.Write([]byte(line))
		}
		b.Flush()
		var all bytes.Buffer
		for _, w := range out.got() {
			if len(w) > accessBufferSize || len(w)%len(line) != 0 {
				t.Errorf("a write of %d bytes: more than the buffer, or a line split", len(w))
			}
			all.WriteString(w)
		}
		if all.String() != strings.Repeat(line, 100) {
			t.Errorf("wrote %d bytes, want the 100 lines in order", all.Len())
		}
		if n := len(out.got()); n < 100*len(line)/accessBufferSize {
			t.Errorf("%d writes for %d bytes", n, 100*len(line))
		}
	})
	t.Run("a line longer than the buffer", func(t *testing.T) {
		var out recordingWriter
		b := newLineBuffer(&out)
		_, _ = b.Write([]byte("short\n"))
		long := strings.Repeat("y", 2*accessBufferSize) + "\n"
		_, _ = b.Write([]byte(long))
		if w := out.got(); len(w) != 2 || w[0] != "short\n" || w[1] != long {
			t.Errorf("writes of %d lines, want the short line then the long one, each whole", len(w))
		}
	})
	t.Run("a failed write is reported by the next line", func(t *testing.T) {
		out := recordingWriter{err: errors.New("disk full")}
		b := newLineBuffer(&out)
		_, _ = b.Write([]byte("one\n"))
		b.Flush()
		if _, err := b.Write([]byte("two\n")); err == nil || err.Error() != "disk full" {
			t.Errorf("Write after a failed batch: %v, want the failure", err)
		}
		b.Flush()
	})
}
