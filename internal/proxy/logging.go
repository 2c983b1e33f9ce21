package proxy

import (
	"io"
	stdlog "log"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/config"
)

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

// accessLog logs one INFO line per exchange after it ends.
func accessLog(next http.Handler, log *slog.Logger, listener string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &recorder{ResponseWriter: w}
		defer func() {
			status := int(rec.status.Load())
			if status == 0 {
				status = http.StatusOK
			}
			log.Info("access", "listener", listener, "client", r.RemoteAddr, "method", r.Method,
				"host", r.Host, "path", r.URL.Path, "proto", r.Proto, "status", status,
				"bytes", rec.bytes.Load(), "duration", time.Since(start))
		}()
		next.ServeHTTP(rec, r)
	})
}

// recorder notes the status and body size of a response. It unwraps to the
// original writer, so http.ResponseController (which ReverseProxy uses to
// flush and hijack) still reaches the connection.
type recorder struct {
	http.ResponseWriter
	status atomic.Int32
	bytes  atomic.Int64
}

func (r *recorder) WriteHeader(code int) {
	if code >= 200 || code == http.StatusSwitchingProtocols {
		r.status.CompareAndSwap(0, int32(code))
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	r.status.CompareAndSwap(0, http.StatusOK)
	n, err := r.ResponseWriter.Write(b)
	r.bytes.Add(int64(n))
	return n, err
}

// Flush lets handlers that type-assert http.Flusher flush through the
// recorder.
func (r *recorder) Flush() { _ = http.NewResponseController(r.ResponseWriter).Flush() }

// Unwrap returns the wrapped writer, for http.ResponseController.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

var _ http.Flusher = (*recorder)(nil)

// newServerErrorLog returns the log.Logger an http.Server writes its own
// errors to (TLS handshake failures, malformed requests). They are logged at
// DEBUG: a client can cause any number of them.
func newServerErrorLog(log *slog.Logger) *stdlog.Logger {
	return slog.NewLogLogger(log.Handler(), slog.LevelDebug)
}

// logGate lets one log line through per interval and counts the others, so
// that a flood of failures cannot flood the log.
type logGate struct {
	interval   time.Duration
	next       atomic.Int64 // unix nanoseconds before which lines are held back
	suppressed atomic.Uint64
}

// allow reports whether a line may be logged now and, if so, how many were
// held back since the last one.
func (g *logGate) allow(now time.Time) (bool, uint64) {
	next := g.next.Load()
	if now.UnixNano() < next || !g.next.CompareAndSwap(next, now.Add(g.interval).UnixNano()) {
		g.suppressed.Add(1)
		return false, 0
	}
	return true, g.suppressed.Swap(0)
}
