package httplimit

import (
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"time"

	"github.com/seed-a07d1050/portcullis/limit"
)

// Defaults used where a [Config] field is left zero.
const (
	DefaultPermits    = limit.DefaultPermits // per key
	DefaultStatus     = http.StatusTooManyRequests
	DefaultRetryAfter = time.Second
	DefaultLogEvery   = time.Second
)

// Policy is the shape of a limit shared by every layer of Portcullis;
// see [limit.Policy].
type Policy = limit.Policy[string]

// Config configures a [Limiter]: its [Policy], embedded, and what is HTTP's
// own (the key, the refusal's response, tunnels, hooks). The zero Config is
// valid: 64 exchanges at once per client address (IPv4 /32, IPv6 /64), no
// queue, refusals answered with 429 and Retry-After: 1, tunnels counted
// with the other exchanges and holding their permit until they close,
// permits held for more than 10 minutes reclaimed (established tunnels
// exempt). New copies the Config, its map included; changing it afterwards
// has no effect.
type Config struct {
	// Policy is what each key is allowed: Permits (exchanges of one key
	// at once through the Limiter), Overrides and PermitsFor, the queue,
	// Shadow and ReclaimAfter, with the meanings [limit.Policy] gives them
	// (zero means the default, limit.Unlimited (-1) no limit, other
	// negative values are invalid). Here a waiting request blocks only its
	// own goroutine and leaves the queue as soon as its context ends (the
	// client went away); shadow refusals are reported to OnReject with
	// ErrShadowRefused and counted in Totals.ShadowRefused; established
	// tunnels are never reclaimed. Override keys are written as the Key
	// function produces them (for ByClientIP, the clientkey.Key String
	// form: "192.0.2.7", "2001:db8:1:2::/64"); an empty one is invalid,
	// since an empty key is never limited. With TunnelPermits set,
	// Overrides and PermitsFor apply to exchanges only.
	Policy

	// Key names what is limited: each distinct key has its own permits.
	// It is called once per request, on the request's goroutine, before
	// anything else; an empty key means the request is not limited (it is
	// neither counted nor refused). Keys from different functions share
	// one namespace in a Limiter. Nil means ByClientIP(nil): the peer
	// address.
	Key KeyFunc

	// Status is the status code of a refusal by the limit (over the limit,
	// queue full, wait limit reached). Zero means 429 Too Many Requests.
	// It must be in 400..599. A refusal for another reason answers 503
	// Service Unavailable instead: the limiter was closed, its shared Store
	// failed, or the request's context ended while it waited (the client
	// has usually gone by then).
	Status int

	// RetryAfter is sent, in whole seconds rounded up, in the Retry-After
	// header of a refusal. Zero means 1s; negative means no Retry-After
	// header.
	RetryAfter time.Duration

	// Reject, if set, writes the whole response to a refused request in
	// place of the default (Status, text/plain body, Retry-After). It gets
	// the key and why the request was refused: an error matching
	// limit.ErrLimited, limit.ErrQueueFull, limit.ErrQueueTimeout,
	// limit.ErrClosed or limit.ErrStore, or the request context's error
	// when the client went away while waiting. It is called on the
	// request's goroutine after OnReject. Nil means the default response.
	Reject func(w http.ResponseWriter, r *http.Request, key string, err error)

	// OnReject, if set, is called for every refused request, and in shadow
	// mode for every request let through over the limit (with
	// ErrShadowRefused), on the request's goroutine, before any response is
	// written. err is as for Reject. It must be fast and must not block;
	// it must not write the response. Nil means no callback.
	OnReject func(key string, r *http.Request, err error)

	// OnAdmit, if set, is called for every request the Limiter lets
	// through, on the request's goroutine, before the wrapped handler runs
	// (for a tunnel request with TunnelPermits set, once per permit it
	// takes). waited is how long the request waited in the queue
	// (limit.Permit.Waited), zero when it was admitted at once; shadowed
	// reports that it went over the limit and was let through in shadow
	// mode (OnReject is called too, with ErrShadowRefused). It serves
	// access logs: it must be fast, must not block and must not write the
	// response. Nil means no callback.
	OnAdmit func(w http.ResponseWriter, r *http.Request, key string, waited time.Duration, shadowed bool)

	// TunnelPermits, when not zero, gives tunnels (CONNECT requests,
	// HTTP/1.1 upgrades such as WebSocket, HTTP/2 extended CONNECT) their
	// own permits per key, counted apart from the other exchanges, so that
	// long-lived tunnels and short exchanges do not starve each other.
	// Zero means tunnels share Permits with the other exchanges; -1 means
	// tunnels are unlimited (still counted); other negative values are
	// invalid. Overrides and PermitsFor apply to exchanges only when it is
	// set; TunnelPermitsFor then gives per-key tunnel permits. A request
	// is a tunnel only once it is answered 101 (or 2xx for CONNECT): until
	// then it also holds an exchange permit, given back when the tunnel
	// is established, while a request the handler answers otherwise (an
	// upstream ignoring the Upgrade header) gives its tunnel permit back
	// and runs on as an ordinary exchange. The Upgrade header is thus no
	// way around the exchange limit.
	TunnelPermits int

	// TunnelPermitsFor, used only with TunnelPermits set, gives a key its
	// own number of tunnel permits, as PermitsFor does for exchanges. Nil
	// means every key gets TunnelPermits.
	TunnelPermitsFor func(key string) int

	// ReleaseTunnels releases a tunnel's permit as soon as the tunnel is
	// established (101 Switching Protocols, or a 2xx answer to CONNECT)
	// instead of when it closes, so that only tunnels being set up are
	// limited. False means a tunnel holds its permit until it closes.
	ReleaseTunnels bool

	// Store shares the counts with other processes (limit/redisstore).
	// Separate tunnel permits are kept in the same Store under keys
	// prefixed with "tunnel:". Nil means this process's counts only.
	Store limit.Store[string]

	// Observer is told of every decision, of the exchange and the tunnel
	// limiter alike, for example to feed a queue-wait histogram. Nil means
	// none.
	Observer limit.Observer[string]

	// Clock tells the time, for queue waits and reclaim. Nil means the
	// real clock; tests inject limit/limittest.Clock.
	Clock limit.Clock

	// Logger receives one INFO line per refusal (and shadow refusal), at
	// most one per LogEvery with a count of the lines left out, and the
	// WARN of a reclaimed permit. Nil means no logs: a library logs only
	// where it is told to.
	Logger *slog.Logger

	// LogEvery is the shortest time between two refusal lines. Zero means
	// 1s; negative means every refusal is logged.
	LogEvery time.Duration

	// Name identifies the Limiter in logs. Empty means "httplimit".
	Name string
}

// settings is a Config with its defaults applied and checked.
type settings struct {
	Config
	retryAfter string // header value; "" for none
	logEvery   time.Duration
}

func (c Config) settings() (settings, error) {
	s := settings{Config: c}
	if err := c.validate(); err != nil {
		return s, err
	}
	s.Overrides = maps.Clone(c.Overrides)
	if s.Key == nil {
		s.Key = ByClientIP(nil)
	}
	if s.Status == 0 {
		s.Status = DefaultStatus
	}
	switch {
	case c.RetryAfter == 0:
		s.retryAfter = "1"
	case c.RetryAfter > 0:
		s.retryAfter = fmt.Sprint(int64((c.RetryAfter + time.Second - 1) / time.Second))
	}
	switch {
	case c.LogEvery == 0:
		s.logEvery = DefaultLogEvery
	case c.LogEvery > 0:
		s.logEvery = c.LogEvery
	}
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
	if s.Name == "" {
		s.Name = "httplimit"
	}
	return s, nil
}

func (c Config) validate() error {
	if err := c.Policy.Validate(); err != nil {
		return fmt.Errorf("httplimit: %w", err)
	}
	switch {
	case c.TunnelPermits < limit.Unlimited:
		return fmt.Errorf("httplimit: TunnelPermits must be ≥ -1 (limit.Unlimited) (got %d)", c.TunnelPermits)
	case c.Status != 0 && (c.Status < 400 || c.Status > 599):
		return fmt.Errorf("httplimit: Status must be in 400..599 (got %d)", c.Status)
	case c.TunnelPermitsFor != nil && c.TunnelPermits == 0:
		return fmt.Errorf("httplimit: TunnelPermitsFor needs TunnelPermits set")
	}
	if _, ok := c.Overrides[""]; ok {
		return fmt.Errorf("httplimit: Overrides has an empty key, which is never limited")
	}
	return nil
}

// limitConfig is the limit.Config of the exchange limiter (tunnels false)
// or the tunnel limiter: the same Policy, except that the tunnel limiter
// has TunnelPermits and TunnelPermitsFor for permits.
func (s *settings) limitConfig(tunnels bool) limit.Config[string] {
	c := limit.Config[string]{
		Policy:   s.Policy,
		Store:    s.Store,
		Clock:    s.Clock,
		Observer: s.Observer,
		Logger:   s.Logger,
		Name:     s.Name,
	}
	if tunnels {
		c.Permits, c.Overrides, c.PermitsFor = s.TunnelPermits, nil, s.TunnelPermitsFor
		c.Name += "/tunnels"
		if s.Store != nil {
			c.Store = prefixed{s: s.Store, prefix: "tunnel:"}
		}
	}
	return c
}
