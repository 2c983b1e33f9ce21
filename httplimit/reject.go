package httplimit

import (
	"errors"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/seed-a07d1050/portcullis/limit"
)

// refuse reports and answers a refused request.
func (l *Limiter) refuse(w http.ResponseWriter, r *http.Request, key string, err error) {
	if l.s.OnReject != nil {
		l.s.OnReject(key, r, err)
	}
	l.log.refused(r, key, err)
	if l.s.Reject != nil {
		l.s.Reject(w, r, key, err)
		return
	}
	l.writeRefusal(w, statusFor(l.s.Status, err))
}

// statusFor is the status of a refusal: the configured one when the limit
// refused, 503 when the limiter could not decide (closed, Store failed) or
// the wait ended for another reason.
func statusFor(limited int, err error) int {
	switch {
	case errors.Is(err, limit.ErrLimited), errors.Is(err, limit.ErrQueueFull), errors.Is(err, limit.ErrQueueTimeout):
		return limited
	default:
		return http.StatusServiceUnavailable
	}
}

// writeRefusal writes the default refusal: a short text/plain body.
func (l *Limiter) writeRefusal(w http.ResponseWriter, status int) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	if l.s.retryAfter != "" {
		h.Set("Retry-After", l.s.retryAfter)
	}
	w.WriteHeader(status)
	_, _ = w.Write([]byte(http.StatusText(status) + "\n"))
}

func (l *Limiter) shadowRefused(r *http.Request, key string) {
	if l.s.OnReject != nil {
		l.s.OnReject(key, r, ErrShadowRefused)
	}
	l.log.refused(r, key, ErrShadowRefused)
}

// refusalLog writes refusal lines, at most one per period, so that a flood
// of refusals cannot flood the log; the next line written says how many
// were left out (suppressed).
type refusalLog struct {
	logger     *slog.Logger
	name       string
	every      int64        // nanoseconds; 0: every refusal
	next       atomic.Int64 // Unix nanoseconds before which lines are left out
	suppressed atomic.Int64
}

func (g *refusalLog) init(s *settings) {
	g.logger, g.name, g.every = s.Logger, s.Name, int64(s.logEvery)
}

func (g *refusalLog) initWith(logger *slog.Logger, name string, every time.Duration) {
	g.logger, g.name, g.every = logger, name, int64(every)
}

func (g *refusalLog) refused(r *http.Request, key string, err error) {
	if !g.logger.Enabled(r.Context(), slog.LevelInfo) {
		return
	}
	if g.every > 0 {
		now := time.Now().UnixNano()
		next := g.next.Load()
		if now < next || !g.next.CompareAndSwap(next, now+g.every) {
			g.suppressed.Add(1)
			return
		}
	}
	msg := "request refused"
	switch {
	case errors.Is(err, ErrShadowRefused):
		msg = "request over the limit let through (shadow mode)"
	case errors.Is(err, ErrShadowDelayed):
		msg = "request over the rate let through without its delay (shadow mode)"
	}
	attrs := []slog.Attr{
		slog.String("limiter", g.name),
		slog.String("key", key),
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.String("reason", refusalReason(err)),
	}
	if errors.Is(err, limit.ErrStore) {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	attrs = append(attrs, slog.Int64("suppressed", g.suppressed.Swap(0)))
	g.logger.LogAttrs(r.Context(), slog.LevelInfo, msg, attrs...)
}

// refusalReason names why a request was refused as the limiter's metrics
// do (limit.EventKind names: refused, queue_full, queue_timeout,
// store_failed, shadow_refused), and "closed" for a closed limiter.
func refusalReason(err error) string {
	if errors.Is(err, ErrShadowRefused) {
		return limit.ShadowRefused.String()
	}
	if k := limit.RefusalKind(err); k != 0 {
		return k.String()
	}
	return "closed"
}
