package httplimit

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/seed-a07d1050/portcullis/rate"
)

// A RateLimiter limits how fast each key (client, user, host, header) may
// make requests through the handlers it wraps, with nginx limit_req's rate,
// burst and delay ([RateLimiter.Wrap]). It counts only the requests that
// pass through those handlers, as [Limiter] does, so a RateLimiter mounted
// on one route limits that route. It is an http.Handler middleware and
// works alike for HTTP/1, HTTP/2 and HTTP/3. A RateLimiter is safe for
// concurrent use.
type RateLimiter struct {
	s   rateSettings
	lim *rate.Limiter[string]
	log refusalLog
}

// NewRate returns a RateLimiter configured by cfg, or an error naming the
// first invalid field; on error nothing is started. The RateLimiter runs a
// background sweep of idle keys until [RateLimiter.Close].
func NewRate(cfg RateConfig) (*RateLimiter, error) {
	s, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	l := &RateLimiter{s: s}
	l.log.initWith(s.Logger, s.Name, s.logEvery)
	l.lim, err = rate.New(rate.Config[string]{
		Rate:     s.Rate,
		Burst:    s.Burst,
		Delay:    s.Delay,
		LimitFor: s.limitFor(),
		Shadow:   s.Shadow,
		Store:    s.Store,
		Clock:    s.Clock,
		Observer: s.Observer,
		Name:     s.Name,
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// Wrap returns a handler that decides each request under the RateLimiter
// before calling next. A request within the rate proceeds at once; one in
// the delayed part of the burst waits on its own goroutine until its turn
// and leaves as soon as its context ends (the client went away, an HTTP/2
// or HTTP/3 stream was reset), giving its place back; one over the rate
// and burst gets the refusal response and next is not called. A nil next
// is treated as http.NotFoundHandler().
func (l *RateLimiter) Wrap(next http.Handler) http.Handler {
	if next == nil {
		next = http.NotFoundHandler()
	}
	return &rateHandler{l: l, next: next}
}

type rateHandler struct {
	l    *RateLimiter
	next http.Handler
}

var _ http.Handler = (*rateHandler)(nil)

func (h *rateHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l := h.l
	key := l.s.Key(r)
	if key == "" {
		h.next.ServeHTTP(w, r)
		return
	}
	d, err := l.lim.Wait(r.Context(), key)
	if err != nil {
		l.refuse(w, r, key, d, err)
		return
	}
	switch d.Verdict {
	case rate.ShadowRefused:
		l.shadow(r, key, d, ErrShadowRefused)
	case rate.ShadowDelayed:
		l.shadow(r, key, d, ErrShadowDelayed)
	}
	if l.s.OnAdmit != nil {
		l.s.OnAdmit(w, r, key, d)
	}
	if l.s.Headers == RateHeadersAlways && d.Interval() > 0 {
		l.setHeaders(w.Header(), d)
	}
	h.next.ServeHTTP(w, r)
}

// TryAdmit is the quiet form of what the handler of [RateLimiter.Wrap]
// decides, for a caller that serves the requests it can by other means (a
// data path working on bytes) and sends the others through that handler:
// it admits r only when r may proceed at once, and otherwise does nothing
// at all, so that the handler then delays, refuses or lets r through in
// shadow mode and counts that once ([rate.Limiter.AllowQuiet]).
//
// It returns r's key and true when r is admitted (counted as an admission)
// or the RateLimiter does not apply to r (its Key function returned ""); or
// false, with nothing counted: r would wait or be refused, the RateLimiter
// shares its state through a Store, it sends the RateLimit fields with
// every answer (RateHeadersAlways, which the caller would have to add), or
// it is closed. Config.OnAdmit is not called: the caller records the
// admission.
func (l *RateLimiter) TryAdmit(r *http.Request) (string, bool) {
	key := l.s.Key(r)
	return key, l.TryAdmitKey(key)
}

// TryAdmitKey is TryAdmit for a caller that has r's key already (from
// [RateLimiter.Admits]): "" admits, as a request the RateLimiter does not
// apply to.
func (l *RateLimiter) TryAdmitKey(key string) bool {
	if key == "" {
		return true
	}
	if l.s.Headers == RateHeadersAlways {
		return false
	}
	_, ok := l.lim.AllowQuiet(key)
	return ok
}

// Admits reports r's key and whether TryAdmit would admit r now, and
// changes nothing ([rate.Limiter.WouldAllow]). A caller that takes other
// permits before the rate's admission asks it first, so that a request
// the rate leaves to the handler takes (and counts) none of them.
func (l *RateLimiter) Admits(r *http.Request) (string, bool) {
	key := l.s.Key(r)
	if key == "" {
		return "", true
	}
	return key, l.s.Headers != RateHeadersAlways && l.lim.WouldAllow(key)
}

func (l *RateLimiter) shadow(r *http.Request, key string, d rate.Decision, err error) {
	if l.s.OnReject != nil {
		l.s.OnReject(key, r, d, err)
	}
	l.log.refused(r, key, err)
}

// refuse reports and answers a refused request.
func (l *RateLimiter) refuse(w http.ResponseWriter, r *http.Request, key string, d rate.Decision, err error) {
	if l.s.OnReject != nil {
		l.s.OnReject(key, r, d, err)
	}
	l.log.refused(r, key, err)
	if l.s.Reject != nil {
		l.s.Reject(w, r, key, d, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	status := http.StatusServiceUnavailable
	if errors.Is(err, rate.ErrLimited) {
		status = l.s.Status
		h.Set("Retry-After", strconv.FormatInt(ceilSeconds(d.RetryAfter), 10))
		if l.s.Headers != RateHeadersNever && d.Interval() > 0 {
			l.setHeaders(h, d)
		}
	}
	w.WriteHeader(status)
	_, _ = w.Write([]byte(http.StatusText(status) + "\n"))
}

// setHeaders writes the RateLimit-Policy and RateLimit fields of
// draft-ietf-httpapi-ratelimit-headers for the key's state in d.
func (l *RateLimiter) setHeaders(h http.Header, d rate.Decision) {
	h["Ratelimit-Policy"] = []string{PolicyField(l.s.PolicyName, d)}
	h["Ratelimit"] = []string{LimitField(l.s.PolicyName, d)}
}

// PolicyField returns the value of a RateLimit-Policy field for the limit
// a decision was made under, as draft-ietf-httpapi-ratelimit-headers
// writes it: the policy's name, its quota q = Burst+1 requests (what a
// fresh key may send at once) and its window w, the whole seconds the
// quota takes to come back from empty, (Burst+1)/rate rounded up. A
// client that sends at most q requests every w seconds is never refused.
// For example 10r/s with burst 20 is `"default";q=21;w=3`. The name is
// written as a structured field String.
func PolicyField(name string, d rate.Decision) string {
	q := d.Burst() + 1
	w := ceilSeconds(time.Duration(q) * d.Interval())
	return sfString(name) + ";q=" + strconv.Itoa(q) + ";w=" + strconv.FormatInt(max(w, 1), 10)
}

// LimitField returns the value of a RateLimit field for the key's state
// after a decision: r, the requests it may still send now without being
// refused, and t, the whole seconds (rounded up) until one more becomes
// available, left out when the key is back to fresh.
func LimitField(name string, d rate.Decision) string {
	r := d.Remaining()
	s := sfString(name) + ";r=" + strconv.Itoa(r)
	if d.Reset <= 0 {
		return s
	}
	// The remaining count grows by one when the state is one interval
	// less ahead than the count allows now.
	next := d.Reset - time.Duration(d.Burst()-r)*d.Interval()
	if d.RetryAfter > 0 {
		next = d.RetryAfter
	}
	return s + ";t=" + strconv.FormatInt(max(ceilSeconds(next), 1), 10)
}

// ceilSeconds returns d in whole seconds, rounded up; zero for d ≤ 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// sfString writes s as a structured field String (RFC 9651 §3.3.3): in
// double quotes, with backslash and double quote escaped. s must be
// printable ASCII, as RateConfig's validation makes sure.
func sfString(s string) string {
	if !strings.ContainsAny(s, `"\`) {
		return `"` + s + `"`
	}
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
	return b.String()
}

// Snapshot returns the RateLimiter's busy keys, the furthest ahead of
// their rate first, at most top (top ≤ 0: all), and its totals.
func (l *RateLimiter) Snapshot(top int) rate.Snapshot[string] { return l.lim.Snapshot(top) }

// Totals returns the RateLimiter's totals.
func (l *RateLimiter) Totals() rate.Totals { return l.lim.Totals() }

// Close stops the RateLimiter's background sweep. Requests keep being
// decided after it. Close is idempotent and returns nil.
func (l *RateLimiter) Close() error { return l.lim.Close() }
