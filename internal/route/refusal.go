package route

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/limit"
)

// refusalResponse returns the httplimit.Config.Reject function of a limit:
// a refusal the limit decided (over the limit, queue full, wait too long)
// gets the limit's status and Retry-After, with the body and headers of
// its response block if it has one; any other (the limiter closed, the
// cluster store failed, the client gone while waiting) gets httplimit's
// default 503, since the configured text would not be true. Without a
// response block the answer is byte for byte httplimit's default; a
// table sets Reject anyway so that the access log learns why (see
// exchange.AdmissionHooks).
func refusalResponse(cfg *config.Limit) func(http.ResponseWriter, *http.Request, string, error) {
	status := cfg.Status
	if status == 0 {
		status = config.DefaultStatus
	}
	body := http.StatusText(status) + "\n"
	var extra http.Header
	if cfg.Response != nil {
		if cfg.Response.Body != "" {
			body = cfg.Response.Body
		}
		extra = make(http.Header, len(cfg.Response.Headers))
		for name, value := range cfg.Response.Headers {
			extra.Set(name, value)
		}
	}
	retryAfter := retryAfterValue(cfg.RetryAfter)
	return func(w http.ResponseWriter, r *http.Request, _ string, err error) {
		h := w.Header()
		h.Set("Content-Type", "text/plain; charset=utf-8")
		h.Set("X-Content-Type-Options", "nosniff")
		if retryAfter != "" {
			h.Set("Retry-After", retryAfter)
		}
		if !decidedByLimit(err) {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, http.StatusText(http.StatusServiceUnavailable)+"\n")
			return
		}
		for name, values := range extra {
			h[name] = values
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

// decidedByLimit reports whether a refusal is the limit's own decision,
// as httplimit tells them apart for its status.
func decidedByLimit(err error) bool {
	return errors.Is(err, limit.ErrLimited) || errors.Is(err, limit.ErrQueueFull) || errors.Is(err, limit.ErrQueueTimeout)
}

// retryAfterValue is the Retry-After header of an effective retry_after:
// whole seconds rounded up, "1" for zero, none for NoRetryAfter.
func retryAfterValue(d time.Duration) string {
	switch {
	case d == config.NoRetryAfter || d < 0:
		return ""
	case d == 0:
		return "1"
	}
	return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10)
}
