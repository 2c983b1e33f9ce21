package connlimit

import (
	"context"
	"log/slog"
	"net/netip"
	"sync/atomic"
	"time"
)

// logEvery is the least time between two refusal lines of one listener.
const logEvery = time.Second

// logGate lets one line through per logEvery and counts the lines it held
// back, so that a flood of refusals costs one line a second. It takes no
// lock: a refusal that loses the race to log is counted as suppressed.
type logGate struct {
	last       atomic.Int64 // Unix nanoseconds of the last line let through; 0: never
	suppressed atomic.Uint64
}

// pass reports whether a line may be written at now and, if so, how many
// were suppressed since the previous one.
func (g *logGate) pass(now int64) (suppressed uint64, ok bool) {
	last := g.last.Load()
	if last != 0 && now-last < int64(logEvery) || !g.last.CompareAndSwap(last, now) {
		g.suppressed.Add(1)
		return 0, false
	}
	return g.suppressed.Swap(0), true
}

// logRefusal writes a rate-limited line about a refused connection: peer
// as host:port. A refusal whose line is held back arms, once per
// window, a timer that writes the count held back at the window's end (see
// reportSuppressed), so that the count of the last burst of a flood is
// reported too, not only when the next refusal comes. The addresses are
// formatted only for lines that are written.
func (l *Listener) logRefusal(why reason, peer netip.AddrPort, client netip.Addr, err error) {
	ctx := context.Background()
	if !l.s.Logger.Enabled(ctx, l.s.LogLevel) {
		return
	}
	suppressed, ok := l.refusalGate.pass(l.now().UnixNano())
	if !ok {
		if l.suppressedArmed.CompareAndSwap(false, true) {
			time.AfterFunc(logEvery, l.reportSuppressed)
		}
		return
	}
	attrs := []slog.Attr{
		slog.String("listener", l.s.Name),
		slog.String("reason", why.String()),
		slog.String("peer", peer.String()),
	}
	if client != peer.Addr() {
		attrs = append(attrs, slog.String("client", client.String()))
	}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	attrs = append(attrs, slog.Uint64("suppressed", suppressed))
	l.s.Logger.LogAttrs(ctx, l.s.LogLevel, "connlimit: connection refused", attrs...)
}

// reportSuppressed writes the count of refusal lines held back since the
// last line, if any: "connlimit: connection refusals suppressed" with the
// listener and suppressed. Each held-back line is counted in one line
// only: this one or the next refusal's, whichever takes the count first.
func (l *Listener) reportSuppressed() {
	l.suppressedArmed.Store(false)
	n := l.refusalGate.suppressed.Swap(0)
	if n == 0 {
		return
	}
	l.s.Logger.LogAttrs(context.Background(), l.s.LogLevel, "connlimit: connection refusals suppressed",
		slog.String("listener", l.s.Name), slog.Uint64("suppressed", n))
}

// logAcceptError writes a rate-limited WARN about a temporary accept error.
func (l *Listener) logAcceptError(err error, delay time.Duration) {
	suppressed, ok := l.acceptErrGate.pass(l.now().UnixNano())
	if !ok {
		return
	}
	l.s.Logger.LogAttrs(context.Background(), slog.LevelWarn, "connlimit: accept error; retrying",
		slog.String("listener", l.s.Name), slog.String("error", err.Error()),
		slog.Duration("delay", delay), slog.Uint64("suppressed", suppressed))
}
