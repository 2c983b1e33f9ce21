package config

import "maps"

// Rate is a keyed request rate, nginx limit_req's model: each key value may make Rate
// requests, with Burst more arriving early; of those, the first Delay go through at once and
// the others wait so that they proceed spaced out at Rate; a request beyond the burst is
// refused. A rate is checked before any concurrency limit of the same place, so a delayed
// request holds no permit while it waits.
type Rate struct {
	// Rate is the sustained rate per key value, written "10r/s", "600r/m", "30r/h" or
	// "unlimited" (ParseRateValue). Required: the zero RateValue is invalid.
	Rate RateValue `yaml:"rate"`

	// Burst is how many requests of one key value may arrive ahead of Rate (nginx's burst).
	// Zero means none: a request less than one interval after the previous one is refused.
	// Negative and above 1073741824 are invalid.
	Burst int `yaml:"burst"`

	// Delay is how many of the Burst early requests go through at once; the rest wait so
	// that they proceed at Rate (nginx's delay=N). Zero, nginx's default, delays every early
	// request. A Delay of Burst or more is the same as NoDelay. Negative is invalid, and so
	// is a Delay with NoDelay.
	Delay int `yaml:"delay"`

	// NoDelay lets the whole burst through at once, nginx's nodelay. False (the default)
	// delays the early requests beyond Delay.
	NoDelay bool `yaml:"nodelay"`

	// Key says what is counted, as for a Limit. Empty means KeyClientIP.
	Key LimitKey `yaml:"key"`

	// DryRun lets every request through at once, counting and logging those the rate would
	// have delayed or refused (nginx's limit_req_dry_run), to try a rate out. False (the
	// default) enforces it.
	DryRun bool `yaml:"dry_run"`

	// Status is the HTTP status of a refusal, 400 to 599. Zero means DefaultStatus (429).
	Status int `yaml:"status"`

	// Headers says which responses carry the RateLimit and RateLimit-Policy fields of
	// draft-ietf-httpapi-ratelimit-headers. Empty means RateHeadersRefusal. Refusals carry
	// Retry-After whatever it says.
	Headers RateHeaders `yaml:"headers"`

	// Overrides give single key values their own limit, written as nginx writes one:
	// "100r/s burst=50", "5r/s burst=10 nodelay", "unlimited". With key client_ip an
	// override's key is an IP address or CIDR, and the longest prefix holding a client key
	// wins. Nil means none.
	Overrides map[string]RateLimit `yaml:"overrides"`
}

// ConnRate is a per-client rate of new connections (or QUIC handshakes), checked at accept:
// one over it is refused as one over the connection cap is. Its burst is admitted at once;
// a connection is never delayed.
type ConnRate struct {
	// Rate is the sustained rate per client key, "20r/s", "600r/m", "30r/h"
	// (ParseRateValue). Required: the zero RateValue is invalid; "unlimited" is accepted and
	// limits nothing.
	Rate RateValue `yaml:"rate"`

	// Burst is how many connections one client may open at once beyond Rate. Zero means
	// none. Negative and above 1073741824 are invalid.
	Burst int `yaml:"burst"`
}

// RateHeaders says which responses carry the RateLimit fields.
type RateHeaders string

// The RateLimit header policies.
const (
	// RateHeadersRefusal sends them with refusals only, so admitted responses cost nothing.
	RateHeadersRefusal RateHeaders = "refusal"
	// RateHeadersAlways also sends them with every admitted response.
	RateHeadersAlways RateHeaders = "always"
	// RateHeadersNever sends neither field.
	RateHeadersNever RateHeaders = "never"
)

// Limit returns the RateLimit of r: its Rate, Burst and Delay, NoDelay as RateNoDelay.
func (r *Rate) Limit() RateLimit {
	l := RateLimit{Rate: r.Rate, Burst: r.Burst, Delay: r.Delay}
	if r.NoDelay {
		l.Delay = RateNoDelay
	}
	return l
}

// Limit returns the RateLimit of c: its Rate and Burst, the burst admitted at once.
func (c *ConnRate) Limit() RateLimit {
	return RateLimit{Rate: c.Rate, Burst: c.Burst, Delay: RateNoDelay}
}

// effective fills a rate's defaults.
func (r *Rate) effective() Rate {
	e := *r
	e.Key = orDefault(e.Key, KeyClientIP)
	e.Status = orDefault(e.Status, DefaultStatus)
	e.Headers = orDefault(e.Headers, RateHeadersRefusal)
	e.Overrides = maps.Clone(r.Overrides)
	return e
}

// effectiveRate returns the effective copy of r, or nil.
func effectiveRate(r *Rate) *Rate {
	if r == nil {
		return nil
	}
	e := r.effective()
	return &e
}

// cloneConnRate returns a copy of c, or nil.
func cloneConnRate(c *ConnRate) *ConnRate {
	if c == nil {
		return nil
	}
	e := *c
	return &e
}
