package intercept

import (
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

func writePlain(w http.ResponseWriter, status int, body string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

// logGate lets at most one line through per period and counts the others.
type logGate struct {
	every   time.Duration
	next    atomic.Int64
	skipped atomic.Int64
}

func (g *logGate) allow() (bool, int64) {
	now := time.Now().UnixNano()
	next := g.next.Load()
	if now < next || !g.next.CompareAndSwap(next, now+int64(g.every)) {
		g.skipped.Add(1)
		return false, 0
	}
	return true, g.skipped.Swap(0)
}
