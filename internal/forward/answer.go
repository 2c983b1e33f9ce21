package forward

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/upstream"
)

// errClosed is why a CONNECT is refused once the Proxy is closed.
var errClosed = errors.New("forward: proxy is shutting down")

// refuse answers a request the proxy will not carry out: a bad target, an
// origin-form request, a loop, a destination the policy refuses, a closed
// proxy. Every refusal names its reason and is logged at INFO.
func (p *Proxy) refuse(w http.ResponseWriter, r *http.Request, err error) {
	status, body, reason := http.StatusBadRequest, "", "bad_target"
	var denied *DeniedError
	switch {
	case errors.As(err, &denied):
		p.stats.denied.Add(1)
		status, body, reason = http.StatusForbidden, "forbidden: destination "+denied.Destination()+" refused by rule \""+denied.Rule+"\"\n", "denied"
	case errors.Is(err, ErrOriginForm):
		body, reason = "bad request: this is a forward proxy; send absolute-form requests (GET http://host/path) or CONNECT host:port\n", "origin_form"
	case errors.Is(err, errLoop):
		status, body, reason = http.StatusLoopDetected, "loop detected: the request already passed through this proxy\n", "loop"
	case errors.Is(err, errClosed):
		status, body, reason = http.StatusServiceUnavailable, "service unavailable: the proxy is shutting down\n", "closed"
	default:
		body = "bad request: " + err.Error() + "\n"
	}
	if p.onRefuse != nil {
		p.onRefuse(w, r, status, reason)
	}
	if status != http.StatusForbidden {
		p.stats.refused.Add(1)
	}
	if ok, held := p.refusals.allow(); ok {
		p.log.LogAttrs(r.Context(), slog.LevelInfo, "forward request refused",
			slog.Int("status", status),
			slog.String("method", r.Method),
			slog.String("target", targetForLog(r)),
			slog.String("client", r.RemoteAddr),
			slog.String("reason", err.Error()),
			slog.Int64("suppressed", held))
	}
	writePlain(w, status, body)
}

// targetFailed answers a request whose target could not be reached or
// failed: 403 when the policy refused every address of the target, 504
// when it did not answer in time, 502 otherwise, each with a short reason.
// Its signature is that of httputil.ReverseProxy.ErrorHandler.
func (p *Proxy) targetFailed(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, ErrDenied) {
		p.refuse(w, r, err)
		return
	}
	if r.Context().Err() != nil {
		// The client went away or the server is stopping: nobody reads this.
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	p.stats.failed.Add(1)
	if p.onFailed != nil {
		p.onFailed(r, err)
	}
	t, _ := TargetOf(r)
	status, reason := classify(err)
	if ok, held := p.failures.allow(); ok {
		p.log.LogAttrs(r.Context(), slog.LevelWarn, "forward target failed",
			slog.Int("status", status),
			slog.String("method", r.Method),
			slog.String("target", t.String()),
			slog.String("error", err.Error()),
			slog.Int64("suppressed", held))
	}
	writePlain(w, status, http.StatusText(status)+": "+t.String()+": "+reason+"\n")
}

// classify maps a target failure to a status and a reason fit for the
// client: it names what went wrong without the proxy's internal details
// (resolver addresses, local ports).
func classify(err error) (int, string) {
	var dnsErr *net.DNSError
	var ne net.Error
	switch {
	case errors.As(err, &dnsErr):
		if dnsErr.IsNotFound {
			return http.StatusBadGateway, "cannot resolve the host: no such host"
		}
		if dnsErr.IsTimeout {
			return http.StatusGatewayTimeout, "cannot resolve the host: the resolver did not answer in time"
		}
		return http.StatusBadGateway, "cannot resolve the host"
	case errors.Is(err, upstream.ErrHeadTimeout):
		return http.StatusGatewayTimeout, "no response in time"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return http.StatusGatewayTimeout, "connection timed out"
	case errors.Is(err, syscall.ECONNREFUSED):
		return http.StatusBadGateway, "connection refused"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return http.StatusBadGateway, "host unreachable"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return http.StatusBadGateway, "the target closed the connection"
	case errors.Is(err, upstream.ErrHeadTooLarge):
		return http.StatusBadGateway, "response head too large"
	default:
		return http.StatusBadGateway, "the target failed"
	}
}

func writePlain(w http.ResponseWriter, status int, body string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

// targetForLog is the request target as the client wrote it, bounded.
func targetForLog(r *http.Request) string {
	s := r.RequestURI
	if s == "" {
		s = r.URL.String()
	}
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// logGate lets at most one line through per period and counts the others.
type logGate struct {
	every   time.Duration
	next    atomic.Int64
	skipped atomic.Int64
}

func (g *logGate) allow() (bool, int64) {
	if g.every <= 0 {
		return true, 0
	}
	now := time.Now().UnixNano()
	next := g.next.Load()
	if now < next || !g.next.CompareAndSwap(next, now+int64(g.every)) {
		g.skipped.Add(1)
		return false, 0
	}
	return true, g.skipped.Swap(0)
}
