package proxy

import (
	stdlog "log"
	"log/slog"
	"net"
	"sync/atomic"
	"time"
)

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

// addrString formats an address for a log line: as text, where a JSON
// handler would write a *net.TCPAddr as its fields; "" for none.
func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}
