package config

import (
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
)

// forwardLimit is a limit of forward.limits: keyed by client_ip, proxy_user, target_host or
// a header.
const forwardLimit limitKind = clientLimit + 1

// IsForward reports whether l is a forward listener: an http or https listener with mode
// forward.
func (l *Listener) IsForward() bool {
	return l.Mode == ModeForward && l.Protocol.Uses("mode")
}

// listenerMode checks the mode of a listener, its auth and forward blocks, and that the
// keys and tunnel settings of its limits make sense for its mode.
func (v *validator) listenerMode(l *Listener, p string) {
	switch l.Mode {
	case "", ModeReverse, ModeForward:
	default:
		v.addf(p+".mode", "must be reverse or forward (got %q)", l.Mode)
	}
	if l.Auth != nil && l.Protocol.Uses("auth") {
		if l.RoutesFrom != "" {
			v.addf(p+".auth", "a listener with routes_from uses the authentication of %q: set auth there", l.RoutesFrom)
		}
		v.auth(l.Auth, p+".auth")
	}
	if !l.IsForward() {
		if l.Forward != nil && l.Protocol.Uses("forward") {
			v.addf(p+".forward", "only for forward listeners (mode: forward)")
		}
		v.reverseLimits(l, p)
		return
	}
	const why = "a forward listener has no routes: it carries each request to the target it names"
	if len(l.Routes) > 0 {
		v.addf(p+".routes", why)
	}
	if l.RoutesFrom != "" {
		v.addf(p+".routes_from", "%s (got %q)", why, l.RoutesFrom)
	}
	if l.Forward != nil {
		v.forward(l.Forward, p+".forward")
	}
	v.forwardLimits(l, p)
}

func (v *validator) auth(a *Auth, p string) {
	if a.Htpasswd == "" {
		v.addf(p+".htpasswd", "required: an htpasswd file of bcrypt hashes, as `htpasswd -B -c FILE USER` makes")
	} else {
		v.readable(p+".htpasswd", a.Htpasswd) // its lines are checked where it is loaded
	}
	if len(a.Realm) > 128 {
		v.addf(p+".realm", "must be at most 128 bytes (got %d bytes)", len(a.Realm))
	}
	for i := 0; i < len(a.Realm); i++ {
		if b := a.Realm[i]; b < 0x20 || b > 0x7e || b == '"' || b == '\\' {
			v.addf(p+".realm", "must be printable ASCII without '\"' or '\\' (got %q)", a.Realm)
			break
		}
	}
	if a.CacheSize < -1 {
		v.addf(p+".cache_size", "must be -1 (no cache), 0 (the default) or more (got %d)", a.CacheSize)
	}
	v.atMostMaxCount(p+".cache_size", a.CacheSize)
	if a.MaxConcurrentChecks < 0 {
		v.addf(p+".max_concurrent_checks", "must be 0 (half the CPUs) or more (got %d)", a.MaxConcurrentChecks)
	}
	v.atMostMaxCount(p+".max_concurrent_checks", a.MaxConcurrentChecks)
	v.nonNegativeDuration(p+".check_timeout", a.CheckTimeout)
	if a.Failures.Burst < 0 {
		v.addf(p+".failures.burst", "must be 0 (the default) or more (got %d)", a.Failures.Burst)
	}
	v.atMostMaxCount(p+".failures.burst", a.Failures.Burst)
	v.nonNegativeDuration(p+".failures.interval", a.Failures.Interval)
	burst := orDefault(a.Failures.Burst, DefaultFailureBurst)
	interval := orDefault(a.Failures.Interval, DefaultFailureInterval)
	if burst > 0 && interval > 0 && interval > maxFailureBudget/time.Duration(burst) {
		v.addf(p+".failures", "burst × interval must be at most %s, the longest a client may wait for its whole budget to come back (got %d × %s)",
			maxFailureBudget, burst, interval)
	}
}

// maxFailureBudget bounds burst × interval of auth.failures.
const maxFailureBudget = 8760 * time.Hour

func (v *validator) forward(f *Forward, p string) {
	v.destinations(&f.Destinations, p+".destinations")
	v.portRanges(f.ConnectPorts, p+".connect_ports")
	for _, d := range []struct {
		key string
		d   time.Duration
	}{
		{"dial_timeout", f.DialTimeout}, {"upstream_timeout", f.UpstreamTimeout},
		{"tunnel_idle_timeout", f.TunnelIdleTimeout}, {"tunnel_lifetime", f.TunnelLifetime},
		{"idle_conn_timeout", f.IdleConnTimeout},
	} {
		v.nonNegativeDuration(p+"."+d.key, d.d)
	}
	if f.MaxIdleConnsPerTarget < -1 {
		v.addf(p+".max_idle_conns_per_target", "must be -1 (none kept), 0 (the default) or more (got %d)", f.MaxIdleConnsPerTarget)
	}
	v.atMostMaxCount(p+".max_idle_conns_per_target", f.MaxIdleConnsPerTarget)
	if f.MaxIdleConns < 0 {
		v.addf(p+".max_idle_conns", "must be 0 (the default) or more (got %d)", f.MaxIdleConns)
	}
	v.atMostMaxCount(p+".max_idle_conns", f.MaxIdleConns)
	if f.Via != "" && (len(f.Via) > 64 || !isHeaderName(f.Via)) {
		v.addf(p+".via", "must be a token of at most 64 letters, digits and !#$%%&'*+-.^_`|~, such as egress-1 (got %q)", f.Via)
	}
	if f.Intercept != nil {
		v.intercept(f.Intercept, p+".intercept")
	}
	keys := make(map[LimitKey]int)
	for i := range f.Limits {
		lp := indexPath(p+".limits", i)
		l := &f.Limits[i]
		v.limit(l, lp, forwardLimit)
		key := orDefault(l.Key, KeyClientIP)
		if j, dup := keys[key]; dup {
			v.addf(lp+".key", "limits[%d] counts by %s already: one limit per key (got %q)", j, key, key)
			continue
		}
		keys[key] = i
	}
}

func (v *validator) destinations(d *Destinations, p string) {
	for _, list := range []struct {
		key      string
		prefixes []netip.Prefix
	}{{"allow", d.Allow}, {"deny", d.Deny}} {
		seen := make(map[netip.Prefix]int)
		for i, pfx := range list.prefixes {
			ip := indexPath(p+"."+list.key, i)
			if !v.cidr(ip, pfx) {
				continue
			}
			if j, dup := seen[pfx]; dup {
				v.addf(ip, "duplicate CIDR (also %s[%d]) (got %s)", list.key, j, pfx)
			}
			seen[pfx] = i
		}
	}
	v.portRanges(d.Ports, p+".ports")
}

// portRanges checks a list of ports and port ranges at p.
func (v *validator) portRanges(ports []string, p string) {
	seen := make(map[string]int)
	for i, s := range ports {
		pp := indexPath(p, i)
		r, err := ParsePortRange(s)
		if err != nil {
			v.addf(pp, "%v (got %q)", err, s)
			continue
		}
		if j, dup := seen[r.String()]; dup {
			v.addf(pp, "duplicate port range (also ports[%d]) (got %q)", j, s)
		}
		seen[r.String()] = i
	}
}

// A PortRange is an inclusive range of TCP ports, From ≤ To, as destinations.ports and
// connect_ports write them: "443" is From = To = 443.
type PortRange struct {
	From, To uint16
}

// String returns r as ParsePortRange reads it: "443" or "1024-65535".
func (r PortRange) String() string {
	if r.From == r.To {
		return strconv.Itoa(int(r.From))
	}
	return fmt.Sprintf("%d-%d", r.From, r.To)
}

// ParsePortRange reads a destinations.ports entry: a port ("443") or an inclusive range
// ("1024-65535"), within 1 to 65535.
func ParsePortRange(s string) (PortRange, error) {
	from, to, isRange := strings.Cut(s, "-")
	a, err := parsePortNumber(from)
	if err != nil {
		return PortRange{}, err
	}
	if !isRange {
		return PortRange{From: a, To: a}, nil
	}
	b, err := parsePortNumber(to)
	if err != nil {
		return PortRange{}, err
	}
	if a > b {
		return PortRange{}, fmt.Errorf("must be a port or a range low-high, low first")
	}
	return PortRange{From: a, To: b}, nil
}

func parsePortNumber(s string) (uint16, error) {
	if s == "" || len(s) > 5 || strings.Trim(s, "0123456789") != "" || s[0] == '0' {
		return 0, fmt.Errorf("must be a port from 1 to 65535, or a range such as 1024-65535")
	}
	n, _ := strconv.Atoi(s)
	if n > 65535 {
		return 0, fmt.Errorf("must be a port from 1 to 65535, or a range such as 1024-65535")
	}
	return uint16(n), nil
}

// PortRanges parses a list of ports and ranges that Validate accepted; nil stays nil (the
// default). It fails, naming field and entry, for what Validate refuses.
func PortRanges(field string, list []string) ([]PortRange, error) {
	if list == nil {
		return nil, nil
	}
	out := make([]PortRange, 0, len(list))
	for _, s := range list {
		r, err := ParsePortRange(s)
		if err != nil {
			return nil, fmt.Errorf("config: %s %q: %w", field, s, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// reverseLimits refuses the keys and settings that only forward listeners have, and a user
// key without the authentication that makes the user name verified.
func (v *validator) reverseLimits(l *Listener, p string) {
	v.eachLimit(l, p, func(lim *Limit, lp string, client bool) {
		switch {
		case client: // client_limit counts by client_ip only, which limitKey checks
		case lim.Key == KeyUser:
			if l.Auth == nil && l.RoutesFrom == "" && l.Protocol.Uses("auth") {
				v.addf(lp+".key", "counts the user an auth block verified, and this listener has none: add auth (an htpasswd file) to the listener, or any client could name itself in Authorization to dodge the limit")
			}
		case lim.Key == KeyProxyUser:
			v.addf(lp+".key", "proxy_user is for forward listeners; a reverse listener with auth counts its users with key user")
		case lim.Key == KeyTargetHost:
			v.addf(lp+".key", "target_host is for forward listeners; a reverse listener counts the request host with key host")
		case lim.Key == KeyTargetAddr:
			v.addf(lp+".key", targetAddrReverse)
		}
		if lim.CountTunnels != nil {
			v.addf(lp+".count_tunnels", "only for the limits of forward listeners; on a reverse listener, release_tunnels: true gives an upgrade's permit back after its 101")
		}
	})
}

// The refusals of key target_addr where it cannot count.
const (
	targetAddrReverse   = "target_addr is for forward listeners; a reverse listener connects to its routes' upstreams, not to a target the client names"
	targetAddrIntercept = "target_addr cannot be used with forward.intercept: an intercepted session connects to its target on its own, not to the address the limit would count; use target_host"
)

// forwardLimits refuses the keys a forward listener does not have, and proxy_user without
// authentication.
func (v *validator) forwardLimits(l *Listener, p string) {
	v.eachLimit(l, p, func(lim *Limit, lp string, client bool) {
		switch {
		case client:
		case lim.Key == KeyUser:
			v.addf(lp+".key", "a forward listener counts its verified users with key proxy_user")
		case lim.Key == KeyHost:
			v.addf(lp+".key", "a forward listener counts targets with key target_host")
		case lim.Key == KeyTargetAddr && l.Forward != nil && l.Forward.Intercept != nil:
			v.addf(lp+".key", targetAddrIntercept)
		case lim.Key == KeyProxyUser:
			if l.Auth == nil {
				v.addf(lp+".key", "counts the user the listener's auth block verified, and this listener has none: add auth (an htpasswd file)")
			}
		}
	})
}

// eachLimit calls f with every limit of l and its path.
func (v *validator) eachLimit(l *Listener, p string, f func(lim *Limit, path string, client bool)) {
	if l.ClientLimit != nil && l.Protocol.Uses("client_limit") {
		f(l.ClientLimit, p+".client_limit", true)
	}
	if l.Protocol.IsHTTP() && !l.IsForward() {
		for i := range l.Routes {
			rp := indexPath(p+".routes", i)
			if r := l.Routes[i].Limit; r != nil {
				f(r, rp+".limit", false)
			}
			if r := l.Routes[i].ShadowLimit; r != nil {
				f(r, rp+".shadow_limit", false)
			}
		}
	}
	if l.Forward != nil && l.IsForward() {
		for i := range l.Forward.Limits {
			f(&l.Forward.Limits[i], indexPath(p+".forward.limits", i), false)
		}
	}
}

// serverHeaders are the headers a refusal's response may not set: the server frames the
// response and owns the connection.
var serverHeaders = map[string]bool{
	"Connection": true, "Content-Length": true, "Keep-Alive": true, "Proxy-Connection": true,
	"Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

// limitExtras checks the fields a limit gained with the forward proxy: reclaim_after and
// response.
func (v *validator) limitExtras(l *Limit, p string, kind limitKind) {
	switch d := l.ReclaimAfter; {
	case d == 0 || d == NoReclaim:
	case d < time.Second:
		v.addf(p+".reclaim_after", "must be at least 1s, or none (got %s)", d)
	}
	if l.Response == nil {
		return
	}
	if kind == shadowLimit {
		v.addf(p+".response", "a shadow_limit never refuses: leave response out")
		return
	}
	r := l.Response
	if len(r.Body) > MaxResponseBody {
		v.addf(p+".response.body", "must be at most %d bytes (got %d bytes)", MaxResponseBody, len(r.Body))
	}
	seen := make(map[string]string)
	for _, name := range slices.Sorted(maps.Keys(r.Headers)) {
		hp := keyPath(p+".response.headers", name)
		canon := http.CanonicalHeaderKey(name)
		switch {
		case !httpguts.ValidHeaderFieldName(name):
			v.addf(hp, "must be an HTTP field name (letters, digits and !#$%%&'*+-.^_`|~) (got %q)", name)
		case canon == "Retry-After":
			v.addf(hp, "is set by retry_after")
		case serverHeaders[canon]:
			v.addf(hp, "is the server's to write, not a refusal's")
		case seen[canon] != "":
			v.addf(hp, "duplicate header (also %q)", seen[canon])
		case !httpguts.ValidHeaderFieldValue(r.Headers[name]):
			v.addf(hp, "must not hold control characters (got %q)", r.Headers[name])
		}
		seen[canon] = name
	}
}
