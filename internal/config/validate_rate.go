package config

import (
	"maps"
	"math"
	"slices"

	"github.com/seed-a07d1050/portcullis/internal/ratetext"
)

// listenerRates checks the rates of a listener: its request rate, connection rate and
// handshake rate (whether the protocol takes them is checked by protocolFields).
func (v *validator) listenerRates(l *Listener, p string) {
	if l.Rate != nil && l.RoutesFrom != "" && l.Protocol.IsHTTP() {
		v.addf(p+".rate", "must be left out: this listener shares the routes and the rate of %q (routes_from)", l.RoutesFrom)
	} else if l.Protocol.Uses("rate") {
		v.rate(l.Rate, p+".rate")
	}
	if l.Protocol.Uses("conn_rate") {
		v.connRate(l.ConnRate, p+".conn_rate")
	}
	if l.Protocol.Uses("handshake_rate") {
		v.connRate(l.HandshakeRate, p+".handshake_rate")
	}
	v.rateKeys(l, p)
}

// rateKeys refuses the keys a rate cannot count by on its listener, as for limits: on a
// reverse listener proxy_user and target_host, and user without the authentication that
// verifies it; on a forward listener user and host, and proxy_user without authentication.
func (v *validator) rateKeys(l *Listener, p string) {
	check := func(r *Rate, rp string) {
		if r == nil {
			return
		}
		kp := rp + ".key"
		switch {
		case l.IsForward() && r.Key == KeyUser:
			v.addf(kp, "a forward listener counts its verified users with key proxy_user")
		case l.IsForward() && r.Key == KeyHost:
			v.addf(kp, "a forward listener counts targets with key target_host")
		case l.IsForward() && r.Key == KeyTargetAddr && l.Forward != nil && l.Forward.Intercept != nil:
			v.addf(kp, targetAddrIntercept)
		case l.IsForward() && r.Key == KeyProxyUser && l.Auth == nil:
			v.addf(kp, "counts the user the listener's auth block verified, and this listener has none: add auth (an htpasswd file)")
		case l.IsForward():
		case r.Key == KeyUser && l.Auth == nil && l.Protocol.Uses("auth"):
			v.addf(kp, "counts the user an auth block verified, and this listener has none: add auth (an htpasswd file) to the listener, or any client could name itself in Authorization to dodge the rate")
		case r.Key == KeyProxyUser:
			v.addf(kp, "proxy_user is for forward listeners; a reverse listener with auth counts its users with key user")
		case r.Key == KeyTargetHost:
			v.addf(kp, "target_host is for forward listeners; a reverse listener counts the request host with key host")
		case r.Key == KeyTargetAddr:
			v.addf(kp, targetAddrReverse)
		}
	}
	if l.Protocol.Uses("rate") && l.RoutesFrom == "" {
		check(l.Rate, p+".rate")
	}
	if l.Protocol.IsHTTP() && !l.IsForward() {
		for i := range l.Routes {
			check(l.Routes[i].Rate, indexPath(p+".routes", i)+".rate")
		}
	}
}

// rate checks the request rate at path p, if any.
func (v *validator) rate(r *Rate, p string) {
	if r == nil {
		return
	}
	v.rateLimit(r.Rate, r.Burst, p)
	switch {
	case r.Delay < 0:
		v.addf(p+".delay", "must be 0 (delay every early request) or more (got %d)", r.Delay)
	case r.Delay > 0 && r.NoDelay:
		v.addf(p+".nodelay", "cannot be combined with delay: nodelay lets the whole burst through at once, delay only its first %d", r.Delay)
	}
	v.limitKey(r.Key, p+".key", routeLimit)
	if r.Status != 0 && (r.Status < 400 || r.Status > 599) {
		v.addf(p+".status", "must be from 400 to 599 (got %d)", r.Status)
	}
	switch r.Headers {
	case "", RateHeadersRefusal, RateHeadersAlways, RateHeadersNever:
	default:
		v.addf(p+".headers", "must be refusal, always or never (got %q)", r.Headers)
	}
	v.rateOverrides(r, p+".overrides")
}

// connRate checks a connection or handshake rate at path p, if any.
func (v *validator) connRate(c *ConnRate, p string) {
	if c != nil {
		v.rateLimit(c.Rate, c.Burst, p)
	}
}

// rateLimit checks the rate and burst of the block at p.
func (v *validator) rateLimit(r RateValue, burst int, p string) {
	switch {
	case r.IsZero():
		v.addf(p+".rate", "required: a rate such as 10r/s, 600r/m or 30r/h")
		return
	case r.Problem() != "":
		v.addf(p+".rate", "%s (got %s)", r.Problem(), r)
		return
	}
	if !r.HasText() {
		v.addf(p+".rate", "must count per second, minute or hour, as in 10r/s, 600r/m or 30r/h (got %s)", r)
		return
	}
	if burst < 0 || burst > 1<<30 {
		v.addf(p+".burst", "must be from 0 to %d (got %d)", 1<<30, burst)
		return
	}
	if !ratetext.SpanFits(r, burst) {
		v.addf(p+".burst", "spans too long at %s: (burst+1) intervals must stay under about 73 years (got %d)", r, burst)
	}
}

// rateOverrides checks per-key limits, in key order so the errors come out the same every
// time.
func (v *validator) rateOverrides(r *Rate, p string) {
	// A target_host override is parsed where the daemon builds the rate, as a limit's.
	byIP := orDefault(r.Key, KeyClientIP) == KeyClientIP
	for _, key := range slices.Sorted(maps.Keys(r.Overrides)) {
		kp := keyPath(p, key)
		switch {
		case key == "":
			v.addf(kp, "the key value must not be empty")
		case byIP || r.Key == KeyTargetAddr:
			if pfx, err := parsePrefix(key); err != nil {
				v.addf(kp, "must be an IP address or a CIDR, since the rate counts by %s (got %q)", orDefault(r.Key, KeyClientIP), key)
			} else if pfx.Masked() != pfx {
				v.addf(kp, "has bits set after the prefix length; did you mean %s? (got %q)", pfx.Masked(), key)
			}
		}
		lim := r.Overrides[key]
		switch problem := lim.Problem(); {
		case problem != "":
			v.addf(kp, "must be a valid rate limit: %s", problem)
		case !lim.Rate.HasText():
			v.addf(kp, "must count per second, minute or hour, as in 10r/s, 600r/m or 30r/h (got %s)", lim.Rate)
		}
	}
}

// clusterRates checks the cluster fields that only rates use.
func (v *validator) clusterRates(c *Cluster) {
	if math.IsNaN(c.LocalShare) || c.LocalShare < 0 || c.LocalShare > 1 {
		v.addf("cluster.local_share", "must be from 0 (every admission asks Redis) to 1 (got %g)", c.LocalShare)
	}
	if c.RateLease < 0 {
		v.addf("cluster.rate_lease", "must be 0 (%d) or more, 1 meaning no lease (got %d)", DefaultRateLease, c.RateLease)
	}
	v.nonNegativeDuration("cluster.flush_interval", c.FlushInterval)
}
