package caddyportcullis

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/httplimit"
	"github.com/seed-a07d1050/portcullis/limit"
	"github.com/seed-a07d1050/portcullis/promlimit"
)

func init() {
	caddy.RegisterModule(Handler{})
}

// Handler caps how many requests run at once per key through the route it
// is placed on (the portcullis_limit directive). A request over the limit
// waits in its key's queue when QueueSize allows, or is refused: the
// handler returns a Caddy error with status 429 (or Status) and sets
// Retry-After, so that handle_errors can shape the answer. The permit is
// taken when the request reaches the handler, so the authentication
// handlers before it refuse first, and is released exactly once when the
// rest of the route returns, however it ends; a WebSocket or CONNECT
// tunnel holds it until it closes.
//
// Its zero value allows 64 requests at once per client address, with no
// queue.
type Handler struct {
	// Name labels the limit's metrics and its entry in the admin
	// endpoint's snapshot. Empty means "portcullis_limit", numbered from
	// the second unnamed limit of a configuration on ("portcullis_limit#2").
	Name string `json:"name,omitempty"`

	// Key is a placeholder template whose value names what is limited,
	// such as "{http.request.remote.host}", "{http.auth.user.id}" or
	// "{http.request.header.X-Api-Key}"; a request whose key is empty is
	// not limited. Empty means the client address: Caddy's client IP
	// ({http.request.client_ip}, which follows the server's
	// trusted_proxies), IPv6 masked to IPv6Prefix.
	Key string `json:"key,omitempty"`

	// IPv4Prefix and IPv6Prefix mask the client address of the default
	// key. Zero means 32 and 64. Unused when Key is set.
	IPv4Prefix int `json:"ipv4_prefix,omitempty"`
	IPv6Prefix int `json:"ipv6_prefix,omitempty"`

	// Permits is how many requests of one key may run at once. Zero means
	// 64; -1 means unlimited (still counted).
	Permits int `json:"permits,omitempty"`

	// Overrides gives keys their own permits, written as the key's value
	// ("192.0.2.7", "2001:db8:1:2::/64", a user name). Zero means Permits,
	// -1 unlimited. Empty means none.
	Overrides map[string]int `json:"overrides,omitempty"`

	// QueueSize is how many requests of one key may wait for a permit, in
	// arrival order. Zero means none: over the limit is refused at once.
	QueueSize int `json:"queue_size,omitempty"`

	// QueueTimeout is the longest a request waits in the queue. Zero means
	// until a permit comes or the client leaves.
	QueueTimeout caddy.Duration `json:"queue_timeout,omitempty"`

	// Shadow lets every request through while counting and logging those
	// the limit would have refused. False, the zero value, enforces it.
	Shadow bool `json:"shadow,omitempty"`

	// Status is the status of a refusal by the limit. Zero means 429. A
	// refusal because the limiter could not decide is 503.
	Status int `json:"status,omitempty"`

	// RetryAfter is the Retry-After of a refusal, in whole seconds rounded
	// up. Zero means 1s; negative means no Retry-After.
	RetryAfter caddy.Duration `json:"retry_after,omitempty"`

	name       string
	lim        *httplimit.Limiter
	wait       *promlimit.WaitHistogram
	app        *App
	status     int
	retryAfter string
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.portcullis_limit",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision builds the limiter and registers it with the portcullis app.
func (h *Handler) Provision(ctx caddy.Context) error {
	app, err := appFrom(ctx)
	if err != nil {
		return err
	}
	key, err := h.keyFunc()
	if err != nil {
		return err
	}
	h.app = app
	h.name = app.name(h.Name, "portcullis_limit")
	h.status = h.Status
	if h.status == 0 {
		h.status = httplimit.DefaultStatus
	}
	switch {
	case h.RetryAfter == 0:
		h.retryAfter = "1"
	case h.RetryAfter > 0:
		h.retryAfter = strconv.FormatInt(int64((time.Duration(h.RetryAfter)+time.Second-1)/time.Second), 10)
	}
	h.wait = promlimit.NewWaitHistogram(promlimit.Opts{Subsystem: "http_exchanges", ConstLabels: prometheus.Labels{"limiter": h.name}}, nil)
	h.lim, err = httplimit.New(httplimit.Config{
		Key: key,
		Policy: httplimit.Policy{
			Permits:      h.Permits,
			Overrides:    h.Overrides,
			QueueSize:    h.QueueSize,
			QueueTimeout: time.Duration(h.QueueTimeout),
			Shadow:       h.Shadow,
		},
		Status:   h.Status,
		Reject:   h.reject,
		Observer: promlimit.ObserverFor[string](h.wait),
		Logger:   ctx.Slogger(),
		Name:     "portcullis_limit " + h.name,
	})
	if err != nil {
		return fmt.Errorf("portcullis_limit: %w", err)
	}
	if err := app.addHandler(h); err != nil {
		h.lim.Close()
		return err
	}
	return nil
}

// keyFunc returns the key function of the Key template, or of the client
// address.
func (h *Handler) keyFunc() (httplimit.KeyFunc, error) {
	if h.Key != "" {
		tmpl := h.Key
		return func(r *http.Request) string {
			repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
			if !ok {
				return ""
			}
			return repl.ReplaceKnown(tmpl, "")
		}, nil
	}
	keyer, err := clientkey.NewKeyer(h.IPv4Prefix, h.IPv6Prefix)
	if err != nil {
		return nil, fmt.Errorf("portcullis_limit: %w", err)
	}
	return func(r *http.Request) string {
		ip, _ := caddyhttp.GetVar(r.Context(), caddyhttp.ClientIPVarKey).(string)
		a, err := netip.ParseAddr(ip)
		if err != nil {
			// Not behind Caddy's server (a bare handler in a test):
			// the peer address.
			return (&clientkey.Resolver{Keyer: keyer}).Key(r).String()
		}
		return keyer.FromAddr(a).String()
	}, nil
}

// Validate is called after Provision; everything was checked there.
func (h *Handler) Validate() error {
	if h.lim == nil {
		return errors.New("portcullis_limit: not provisioned")
	}
	return nil
}

// Cleanup closes the limiter: requests still running keep their permits
// until they end, later ones of the old configuration are refused 503.
func (h *Handler) Cleanup() error {
	if h.app != nil {
		h.app.removeHandler(h)
	}
	if h.lim != nil {
		return h.lim.Close()
	}
	return nil
}

// refusedVar is the request variable through which the Reject hook hands
// the refusal to ServeHTTP.
const refusedVar = "portcullis.refused"

// reject records a refusal instead of writing it, so that ServeHTTP
// returns it as a Caddy error.
func (h *Handler) reject(w http.ResponseWriter, r *http.Request, _ string, err error) {
	if h.retryAfter != "" {
		w.Header().Set("Retry-After", h.retryAfter)
	}
	caddyhttp.SetVar(r.Context(), refusedVar, err)
}

// ServeHTTP admits the request under the limit and runs the rest of the
// route with the permit held.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	x := &exchange{next: next}
	h.lim.Wrap(x).ServeHTTP(w, r)
	if err, ok := caddyhttp.GetVar(r.Context(), refusedVar).(error); ok {
		caddyhttp.SetVar(r.Context(), refusedVar, nil)
		return caddyhttp.Error(statusFor(h.status, err), err)
	}
	return x.err
}

// statusFor is the status of a refusal: the configured one when the limit
// refused, 503 when the limiter could not decide or the client left while
// waiting.
func statusFor(limited int, err error) int {
	switch {
	case errors.Is(err, limit.ErrLimited), errors.Is(err, limit.ErrQueueFull), errors.Is(err, limit.ErrQueueTimeout):
		return limited
	}
	return http.StatusServiceUnavailable
}

// exchange runs the rest of the route inside httplimit's middleware and
// keeps its error.
type exchange struct {
	next caddyhttp.Handler
	err  error
}

func (x *exchange) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	x.err = x.next.ServeHTTP(w, r)
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
