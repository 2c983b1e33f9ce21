package httplimit

import (
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"time"

	"github.com/seed-a07d1050/portcullis/limit"
	"github.com/seed-a07d1050/portcullis/rate"
)

// RateHeaders says which responses carry the IETF RateLimit and
// RateLimit-Policy header fields (draft-ietf-httpapi-ratelimit-headers).
type RateHeaders uint8

const (
	// RateHeadersOnRefusal, the zero value, sends them with refusals only,
	// so that admitted responses cost nothing extra.
	RateHeadersOnRefusal RateHeaders = iota
	// RateHeadersAlways also sends them with every admitted request's
	// response, set before the handler runs (it may change them).
	RateHeadersAlways
	// RateHeadersNever sends neither field; refusals still carry
	// Retry-After.
	RateHeadersNever
)

// RateConfig configures a [RateLimiter]: nginx limit_req's rate, burst and
// delay per key, as HTTP middleware. Its fields map one to one to the
// daemon's `rate:` block (rate, burst, delay or nodelay). Rate is required:
// the zero RateConfig is invalid. NewRate copies the RateConfig, its map
// included; changing it afterwards has no effect.
type RateConfig struct {
	// Key names what is limited: each distinct key has its own rate. It is
	// called once per request, on the request's goroutine; an empty key
	// means the request is not limited (neither counted nor refused). Nil
	// means ByClientIP(nil): the peer address.
	Key KeyFunc

	// Rate is each key's sustained rate, such as rate.PerSecond(10) or
	// rate.ParseRate("600r/m"). The zero Rate is an error; rate.Unlimited
	// lets everything through (still counted).
	Rate rate.Rate

	// Burst is how many requests of one key may arrive ahead of Rate, as
	// nginx's burst. Zero means none. It must be in 0..2^30.
	Burst int

	// Delay is how many of the Burst early requests go through at once;
	// the others wait on their own goroutine so that they proceed spaced
	// out at Rate. Zero, nginx's default, delays them all; N is nginx's
	// delay=N; rate.NoDelay (-1) is nginx's nodelay. Other negative values
	// are invalid. A request whose client goes away while it waits gives
	// its place back (see rate.Reservation.Cancel).
	Delay int

	// Overrides gives keys their own limit, for example {"batch":
	// {Rate: rate.PerSecond(100), Burst: 50}}. Keys are written as the Key
	// function produces them. Each Limit must be valid. Nil or empty means
	// none.
	Overrides map[string]rate.Limit

	// LimitFor gives a key not in Overrides its own limit when it returns
	// true. It is called for every request of such a key, with no lock
	// held; it must be fast and must not block. Nil means Rate, Burst and
	// Delay for every key not in Overrides.
	LimitFor func(key string) (rate.Limit, bool)

	// Shadow lets every request through at once, even over the rate,
	// while counting (Totals.ShadowRefused, ShadowDelayed) and reporting
	// (OnReject with ErrShadowRefused or ErrShadowDelayed, and the log)
	// what enforcing would have done. False, the zero value, enforces.
	Shadow bool

	// Status is the status code of a refusal by the rate. Zero means 429
	// Too Many Requests. It must be in 400..599. A refusal for another
	// reason answers 503 Service Unavailable: the shared Store failed, or
	// the client went away while its request was delayed.
	Status int

	// Headers says which responses carry the RateLimit and
	// RateLimit-Policy fields. The zero value sends them with refusals
	// only.
	Headers RateHeaders

	// PolicyName names the quota policy in those fields, a structured
	// field String of printable ASCII. Empty means "default".
	PolicyName string

	// Reject, if set, writes the whole response to a refused request in
	// place of the default (Status, text/plain body, Retry-After and the
	// RateLimit fields). It gets the key, the decision (with the key's
	// real state: RetryAfter, Remaining) and why: an error matching
	// rate.ErrLimited (which also matches limit.ErrLimited) or
	// rate.ErrStore, or the request context's error when the client went
	// away while delayed. It is called on the request's goroutine after
	// OnReject. Nil means the default response.
	Reject func(w http.ResponseWriter, r *http.Request, key string, d rate.Decision, err error)

	// OnReject, if set, is called for every refused request, and in
	// shadow mode for every request let through over the rate (with
	// ErrShadowRefused or ErrShadowDelayed), on the request's goroutine,
	// before any response is written. It must be fast and must not block;
	// it must not write the response. Nil means no callback.
	OnReject func(key string, r *http.Request, d rate.Decision, err error)

	// OnAdmit, if set, is called for every request the RateLimiter lets
	// through, on the request's goroutine, after its delay (d.Delay, for
	// a Delayed verdict) and before the wrapped handler runs; d.Shadowed
	// reports a request let through over the rate in shadow mode. It
	// serves access logs: it must be fast, must not block and must not
	// write the response. Nil means no callback.
	OnAdmit func(w http.ResponseWriter, r *http.Request, key string, d rate.Decision)

	// Store shares the rate state with other processes
	// (redisstore.RateStore). Nil means this process's state only.
	Store rate.Store[string]

	// Observer is told of every decision. Nil means none.
	Observer rate.Observer[string]

	// Clock tells the time. Nil means the real clock; tests inject
	// limit/limittest.Clock.
	Clock limit.Clock

	// Logger receives one INFO line per refusal (and shadow refusal or
	// delay), at most one per LogEvery with a count of the lines left out.
	// Nil means no logs: a library logs only where it is told to.
	Logger *slog.Logger

	// LogEvery is the shortest time between two refusal lines. Zero means
	// 1s; negative means every refusal is logged.
	LogEvery time.Duration

	// Name identifies the RateLimiter in logs. Empty means
	// "httplimit-rate".
	Name string
}

// rateSettings is a RateConfig with its defaults applied and checked.
type rateSettings struct {
	RateConfig
	logEvery time.Duration
	item     string // the quoted policy name
}

func (c RateConfig) settings() (rateSettings, error) {
	s := rateSettings{RateConfig: c}
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
	if s.PolicyName == "" {
		s.PolicyName = "default"
	}
	s.item = sfString(s.PolicyName)
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
		s.Name = "httplimit-rate"
	}
	return s, nil
}

func (c RateConfig) validate() error {
	switch {
	case c.Status != 0 && (c.Status < 400 || c.Status > 599):
		return fmt.Errorf("httplimit: Status must be in 400..599 (got %d)", c.Status)
	case c.Headers > RateHeadersNever:
		return fmt.Errorf("httplimit: Headers must be RateHeadersOnRefusal, RateHeadersAlways or RateHeadersNever (got %d)", c.Headers)
	}
	if err := (rate.Limit{Rate: c.Rate, Burst: c.Burst, Delay: c.Delay}).Validate(); err != nil {
		return fmt.Errorf("httplimit: %w", err)
	}
	for i := 0; i < len(c.PolicyName); i++ {
		if b := c.PolicyName[i]; b < 0x20 || b > 0x7e {
			return fmt.Errorf("httplimit: PolicyName must be printable ASCII (got %q)", c.PolicyName)
		}
	}
	for key, lim := range c.Overrides {
		if key == "" {
			return fmt.Errorf("httplimit: Overrides has an empty key, which is never limited")
		}
		if err := lim.Validate(); err != nil {
			return fmt.Errorf("httplimit: Overrides[%q]: %w", key, err)
		}
	}
	return nil
}

// limitFor returns the rate limiter's LimitFor: Overrides first, then
// LimitFor.
func (s *rateSettings) limitFor() func(string) (rate.Limit, bool) {
	overrides, limitFor := s.Overrides, s.LimitFor
	if len(overrides) == 0 {
		return limitFor
	}
	return func(key string) (rate.Limit, bool) {
		if lim, ok := overrides[key]; ok {
			return lim, true
		}
		if limitFor != nil {
			return limitFor(key)
		}
		return rate.Limit{}, false
	}
}
