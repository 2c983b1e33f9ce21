package config

import (
	"maps"
	"slices"
	"time"
)

// limitKind is where a Limit sits, which decides the fields it may use.
type limitKind int

const (
	routeLimit  limitKind = iota // routes[].limit
	shadowLimit                  // routes[].shadow_limit: never refuses, never queues
	clientLimit                  // listeners[].client_limit: keyed by client_ip only
)

// limit checks the limit at path p, if any.
func (v *validator) limit(l *Limit, p string, kind limitKind) {
	if l == nil {
		return
	}
	v.limitKey(l.Key, p+".key", kind)
	if l.Permits < Unlimited {
		v.addf(p+".permits", "must be -1 (unlimited) or more (got %d)", l.Permits)
	}
	v.atMostMaxCount(p+".permits", l.Permits)
	v.overrides(l, p+".overrides")
	v.queue(&l.Queue, p+".queue", kind)
	v.refusal(l, p, kind)
	if l.TunnelPermits < Unlimited {
		v.addf(p+".tunnel_permits", "must be -1 (unlimited), 0 (share permits) or more (got %d)", l.TunnelPermits)
	}
	v.atMostMaxCount(p+".tunnel_permits", l.TunnelPermits)
	v.limitExtras(l, p, kind)
}

// atMostMaxCount refuses a count above MaxCount, which no limiter can hold.
func (v *validator) atMostMaxCount(p string, n int) {
	if n > MaxCount {
		v.addf(p, "must be at most %d (got %d)", MaxCount, n)
	}
}

func (v *validator) limitKey(k LimitKey, p string, kind limitKind) {
	if kind == clientLimit {
		if k != "" && k != KeyClientIP {
			v.addf(p, "a client_limit counts by client_ip only (got %q)", k)
		}
		return
	}
	switch k {
	case "", KeyClientIP, KeyUser, KeyHost, KeyProxyUser, KeyTargetHost, KeyTargetAddr:
		return
	}
	if name, ok := k.Header(); ok {
		if !isHeaderName(name) {
			v.addf(p, "header: must be followed by a header name, as in header:X-Api-Key (got %q)", k)
		}
		return
	}
	v.addf(p, "must be client_ip, user, host, proxy_user, target_host, target_addr or header:<name> (got %q)", k)
}

// overrides checks per-key permits, in key order so the errors come out the same every time.
func (v *validator) overrides(l *Limit, p string) {
	// A target_host override names a target pattern, which the forward proxy parses where
	// the daemon builds the limit (the prepare step, which check runs too).
	byIP := orDefault(l.Key, KeyClientIP) == KeyClientIP
	for _, key := range slices.Sorted(maps.Keys(l.Overrides)) {
		kp := keyPath(p, key)
		n := l.Overrides[key]
		switch {
		case key == "":
			v.addf(kp, "the key value must not be empty")
		case byIP || l.Key == KeyTargetAddr:
			if pfx, err := parsePrefix(key); err != nil {
				v.addf(kp, "must be an IP address or a CIDR, since the limit counts by %s (got %q)", orDefault(l.Key, KeyClientIP), key)
			} else if pfx.Masked() != pfx {
				v.addf(kp, "has bits set after the prefix length; did you mean %s? (got %q)", pfx.Masked(), key)
			}
		}
		if n == 0 || n < Unlimited {
			v.addf(kp, "must be -1 (unlimited) or 1 or more (got %d)", n)
		}
		v.atMostMaxCount(kp, n)
	}
}

func (v *validator) queue(q *Queue, p string, kind limitKind) {
	if kind == shadowLimit {
		if *q != (Queue{}) {
			v.addf(p, "a shadow_limit never queues: leave queue out")
		}
		return
	}
	if q.Size < 0 {
		v.addf(p+".size", "must be 0 (no queue) or more (got %d)", q.Size)
	}
	v.atMostMaxCount(p+".size", q.Size)
	switch {
	case q.Timeout < 0:
		v.addf(p+".timeout", "must be 0 (wait until the client leaves) or more (got %s)", q.Timeout)
	case q.Timeout > 0 && q.Size == 0:
		v.addf(p+".timeout", "needs queue.size: with no queue nothing waits (got %s)", q.Timeout)
	}
}

// refusal checks how a refused request is answered.
func (v *validator) refusal(l *Limit, p string, kind limitKind) {
	if kind == shadowLimit {
		if l.Status != 0 {
			v.addf(p+".status", "a shadow_limit never refuses: leave status out (got %d)", l.Status)
		}
		if l.RetryAfter != 0 {
			v.addf(p+".retry_after", "a shadow_limit never refuses: leave retry_after out (got %s)", retryAfterString(l.RetryAfter))
		}
		return
	}
	if l.Status != 0 && (l.Status < 400 || l.Status > 599) {
		v.addf(p+".status", "must be from 400 to 599 (got %d)", l.Status)
	}
	switch d := l.RetryAfter; {
	case d == 0 || d == NoRetryAfter:
	case d < time.Second:
		v.addf(p+".retry_after", "must be at least 1s, or none (got %s)", d)
	case d%time.Second != 0:
		v.addf(p+".retry_after", "must be a whole number of seconds, as Retry-After counts seconds (got %s)", d)
	}
}

// retryAfterString writes a RetryAfter as YAML does: "none" for NoRetryAfter.
func retryAfterString(d time.Duration) string {
	if d == NoRetryAfter {
		return "none"
	}
	return d.String()
}
