package config

import (
	"fmt"
	"math"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
)

// listener checks one listener at path p. An invalid protocol stops the checks there: every
// other rule depends on it, and guessing would only add confusing errors.
func (v *validator) listener(l *Listener, p string) {
	if l.Name != "" && !isName(l.Name) {
		v.addf(p+".name", "must be 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit (got %q)", l.Name)
	}
	switch {
	case l.Protocol == "":
		v.addf(p+".protocol", "required: one of http, https, tcp, http3")
		return
	case !l.Protocol.IsValid():
		v.addf(p+".protocol", "must be one of http, https, tcp, http3 (got %q)", l.Protocol)
		return
	}
	if l.Listen == "" {
		v.addf(p+".listen", "required: a host:port such as 127.0.0.1:8080")
	} else {
		v.hostPort(p+".listen", l.Listen, true)
	}
	v.protocolFields(l, p)
	v.serverTLS(l, p)
	v.connCaps(l, p)
	v.clientIdentity(l, p)
	v.accessLists(l, p)
	v.httpServer(l, p)
	v.tcpProxy(l, p)
	v.quic(l, p)
	v.listenerRates(l, p)
	v.routes(l, p)
	v.listenerMode(l, p)
	v.escapedSlashes(l, p)
}

// escapedSlashes checks a listener's escaped_slashes: one of its actions, on a reverse
// listener with routes of its own (whether the protocol takes it is checked by
// protocolFields).
func (v *validator) escapedSlashes(l *Listener, p string) {
	if l.EscapedSlashes == "" || !l.Protocol.Uses("escaped_slashes") {
		return
	}
	p += ".escaped_slashes"
	switch l.EscapedSlashes {
	case EscapedSlashesReject, EscapedSlashesKeep, EscapedSlashesUnescapeAndForward, EscapedSlashesUnescapeAndRedirect:
	default:
		v.addf(p, "must be reject, keep, unescape_and_forward or unescape_and_redirect (got %q)", l.EscapedSlashes)
		return
	}
	switch {
	case l.IsForward():
		v.addf(p, "only for reverse listeners: a forward listener routes no path")
	case l.RoutesFrom != "":
		v.addf(p, "must be left out: this listener shares the routes of %q (routes_from), and their escaped_slashes", l.RoutesFrom)
	}
}

func (v *validator) serverTLS(l *Listener, p string) {
	p += ".tls"
	if !l.Protocol.Uses("tls") {
		return
	}
	if l.TLS == (TLS{}) {
		v.addf(p, "required for %s listeners: cert_file and key_file", l.Protocol)
		return
	}
	if l.TLS.CertFile == "" {
		v.addf(p+".cert_file", "required with key_file")
	}
	if l.TLS.KeyFile == "" {
		v.addf(p+".key_file", "required with cert_file")
	}
	if l.TLS.CertFile != "" && l.TLS.KeyFile != "" {
		v.keyPair(p, l.TLS.CertFile, l.TLS.KeyFile)
	}
}

// connCaps checks the accept-time caps: per client, per prefix level, per listener.
func (v *validator) connCaps(l *Listener, p string) {
	if l.MaxConnsPerClient < Unlimited {
		v.addf(p+".max_conns_per_client", "must be -1 (unlimited) or more (got %d)", l.MaxConnsPerClient)
	}
	v.atMostMaxCount(p+".max_conns_per_client", l.MaxConnsPerClient)
	if l.MaxConns < 0 {
		v.addf(p+".max_conns", "must be 0 (no cap) or more (got %d)", l.MaxConns)
	}
	v.atMostMaxCount(p+".max_conns", l.MaxConns)
	ok4 := v.prefixLen(p+".ipv4_prefix", l.IPv4Prefix, 32)
	ok6 := v.prefixLen(p+".ipv6_prefix", l.IPv6Prefix, 128)
	key4, key6 := orDefault(l.IPv4Prefix, DefaultIPv4Prefix), orDefault(l.IPv6Prefix, DefaultIPv6Prefix)
	if !ok4 {
		key4 = 0 // unknown: skip the checks that compare with it
	}
	if !ok6 {
		key6 = 0
	}
	v.prefixLevels(l.PrefixLevels, p+".prefix_levels", key4, key6)
	v.connOverrides(l.ConnOverrides, p+".conn_overrides", key4, key6)
	switch {
	case l.EnforceAbove < 0:
		v.addf(p+".enforce_above", "must be 0 (always enforce) or more (got %d)", l.EnforceAbove)
	case l.MaxConns > 0 && l.EnforceAbove >= l.MaxConns:
		v.addf(p+".enforce_above", "must be below max_conns (%d), or the per-client cap could never apply (got %d)",
			l.MaxConns, l.EnforceAbove)
	}
	if l.SYNFilter {
		switch {
		case l.EnforceAbove > 0:
			v.addf(p+".syn_filter", "cannot be combined with enforce_above: the filter drops a client at its cap at once")
		case l.ProxyProtocol:
			v.addf(p+".syn_filter", "cannot be combined with proxy_protocol: the peer the kernel sees is the proxy, not the client")
		}
	}
}

// prefixLen checks a listener's key prefix length: zero (the default) unless written as 0.
func (v *validator) prefixLen(path string, bits, max int) bool {
	if bits < 0 || bits > max || (bits == 0 && v.written(path)) {
		v.addf(path, "must be from 1 to %d (got %d)", max, bits)
		return false
	}
	return true
}

func (v *validator) prefixLevels(levels []PrefixLevel, p string, key4, key6 int) {
	seen4, seen6 := make(map[int]int), make(map[int]int)
	for i, lv := range levels {
		lp := indexPath(p, i)
		if lv.IPv4Prefix == 0 && lv.IPv6Prefix == 0 {
			v.addf(lp, "needs ipv4_prefix or ipv6_prefix (or both)")
		}
		v.levelPrefix(lp+".ipv4_prefix", lv.IPv4Prefix, 32, key4, "ipv4_prefix", seen4, i)
		v.levelPrefix(lp+".ipv6_prefix", lv.IPv6Prefix, 128, key6, "ipv6_prefix", seen6, i)
		if lv.Max < 1 {
			v.addf(lp+".max", "must be 1 or more (got %d)", lv.Max)
		}
		v.atMostMaxCount(lp+".max", lv.Max)
	}
}

// levelPrefix checks one prefix of a level: it must group several client keys, so it is
// shorter than the listener's key prefix (keyBits; 0 when that one is invalid).
func (v *validator) levelPrefix(path string, bits, max, keyBits int, field string, seen map[int]int, i int) {
	switch {
	case bits == 0:
		return
	case bits < 0 || bits >= max:
		v.addf(path, "must be from 1 to %d (got %d)", max-1, bits)
	case keyBits != 0 && bits >= keyBits:
		v.addf(path, "must be shorter than the listener's %s (%d), so that a level groups several clients (got %d)",
			field, keyBits, bits)
	default:
		if j, dup := seen[bits]; dup {
			v.addf(path, "duplicate level (also prefix_levels[%d]) (got %d)", j, bits)
			return
		}
		seen[bits] = i
	}
}

func (v *validator) connOverrides(overrides []ConnOverride, p string, key4, key6 int) {
	seen := make(map[netip.Prefix]int)
	for i, o := range overrides {
		op := indexPath(p, i)
		if v.cidr(op+".cidr", o.CIDR) {
			v.overrideWithinKey(op+".cidr", o.CIDR, key4, key6)
			if j, dup := seen[o.CIDR]; dup {
				v.addf(op+".cidr", "duplicate CIDR (also conn_overrides[%d]) (got %s)", j, o.CIDR)
			}
			seen[o.CIDR] = i
		}
		if o.Max == 0 || o.Max < Unlimited {
			v.addf(op+".max", "must be -1 (unlimited) or 1 or more (got %d)", o.Max)
		}
		v.atMostMaxCount(op+".max", o.Max)
	}
}

// overrideWithinKey refuses an override network narrower than a client key: keys are whole
// networks of the key prefix, so such an override could never match a key as a whole.
func (v *validator) overrideWithinKey(path string, pfx netip.Prefix, key4, key6 int) {
	field, keyBits := "ipv6_prefix", key6
	if pfx.Addr().Is4() {
		field, keyBits = "ipv4_prefix", key4
	}
	if keyBits != 0 && pfx.Bits() > keyBits {
		v.addf(path, "is narrower than a client key (the listener's %s is %d), so it could never match one (got %s)",
			field, keyBits, pfx)
	}
}

// cidr checks a network: valid, in canonical form, and not IPv4-mapped IPv6 (clients with
// such addresses are keyed as IPv4, so the network would never match).
func (v *validator) cidr(path string, pfx netip.Prefix) bool {
	switch {
	case !pfx.IsValid():
		v.addf(path, "required: a CIDR such as 10.0.0.0/8 or an IP address")
	case pfx.Addr().Is4In6():
		v.addf(path, "is IPv4-mapped IPv6; write it as IPv4 (got %s)", pfx)
	case pfx.Masked() != pfx:
		v.addf(path, "has bits set after the prefix length; did you mean %s? (got %s)", pfx.Masked(), pfx)
	default:
		return true
	}
	return false
}

// clientIdentity checks who is trusted to name the client.
func (v *validator) clientIdentity(l *Listener, p string) {
	seen := make(map[netip.Prefix]int)
	for i, pfx := range l.TrustedProxies {
		tp := indexPath(p+".trusted_proxies", i)
		if !v.cidr(tp, pfx) {
			continue
		}
		if j, dup := seen[pfx]; dup {
			v.addf(tp, "duplicate CIDR (also trusted_proxies[%d]) (got %s)", j, pfx)
		}
		seen[pfx] = i
	}
	switch l.ForwardedHeader {
	case "", ForwardedXFF, ForwardedRFC7239, ForwardedNone:
	default:
		v.addf(p+".forwarded_header", "must be one of x-forwarded-for, forwarded, none (got %q)", l.ForwardedHeader)
	}
	if !l.Protocol.Uses("proxy_protocol") {
		return
	}
	if l.ProxyProtocol && len(l.TrustedProxies) == 0 {
		v.addf(p+".proxy_protocol", "needs trusted_proxies: the PROXY header is read only from them")
	}
	v.nonNegativeDuration(p+".proxy_protocol_timeout", l.ProxyProtocolTimeout)
}

// httpServer checks the HTTP server settings and the listener-wide client limit.
func (v *validator) httpServer(l *Listener, p string) {
	durations := []struct {
		key string
		d   time.Duration
	}{
		{"read_header_timeout", l.ReadHeaderTimeout}, {"read_timeout", l.ReadTimeout},
		{"write_timeout", l.WriteTimeout}, {"idle_timeout", l.IdleTimeout},
		{"send_timeout", l.SendTimeout},
	}
	if !l.Protocol.IsHTTP() {
		return
	}
	for _, f := range durations {
		v.nonNegativeDuration(p+"."+f.key, f.d)
	}
	if l.MaxHeaderBytes < 0 {
		v.addf(p+".max_header_bytes", "must be 0 or more (got %d)", l.MaxHeaderBytes)
	}
	switch l.HTTP1Server {
	case "", HTTP1ServerFast, HTTP1ServerNetHTTP, HTTP1ServerLean, HTTP1ServerEventLoop:
	default:
		v.addf(p+".http1_server", "must be eventloop or net/http (got %q)", l.HTTP1Server)
	}
	if l.MaxConcurrentStreams < 0 || l.MaxConcurrentStreams > math.MaxInt32 {
		v.addf(p+".max_concurrent_streams", "must be 0 to %d (got %d)", math.MaxInt32, l.MaxConcurrentStreams)
	}
	v.limit(l.ClientLimit, p+".client_limit", clientLimit)
	v.listenerAccessLog(l.AccessLog, p+".access_log")
	v.requestID(l, p+".request_id")
}

// requestID checks a listener's request_id: a header the daemon may set, a known accept.
func (v *validator) requestID(l *Listener, p string) {
	r := l.RequestID
	if r == nil {
		return
	}
	switch {
	case l.IsForward():
		v.addf(p, "only for reverse listeners: a forward proxy adds nothing to what its clients send")
	case l.RoutesFrom != "":
		v.addf(p, "must be left out: this listener shares the routes of %q (routes_from), and their request_id", l.RoutesFrom)
	}
	if r.Header != "" {
		if !httpguts.ValidHeaderFieldName(r.Header) {
			v.addf(p+".header", "must be a header field name (got %q)", r.Header)
		} else if managedHeader(r.Header) {
			v.addf(p+".header", "%q is a field the daemon manages itself; choose another, such as %s", r.Header, DefaultRequestIDHeader)
		}
	}
	switch r.Accept {
	case "", RequestIDAcceptTrustedProxies, RequestIDAcceptAny:
	default:
		v.addf(p+".accept", "must be %s or %s (got %q)", RequestIDAcceptTrustedProxies, RequestIDAcceptAny, r.Accept)
	}
}

// managedHeader reports whether name is a field the daemon writes or removes on its own:
// Host, the hop-by-hop fields and the forwarding fields.
func managedHeader(name string) bool {
	switch strings.ToLower(name) {
	case "host", "connection", "keep-alive", "proxy-connection", "proxy-authorization",
		"proxy-authenticate", "te", "trailer", "transfer-encoding", "upgrade", "content-length",
		"x-forwarded-for", "x-forwarded-proto", "x-forwarded-host", "forwarded", "x-real-ip":
		return true
	}
	return false
}

// listenerAccessLog checks a listener's access-log fields: known names,
// each once.
func (v *validator) listenerAccessLog(a *ListenerAccessLog, p string) {
	if a == nil {
		return
	}
	for i, f := range a.Fields {
		fp := indexPath(p+".fields", i)
		if !slices.Contains(AccessFields, f) {
			v.addf(fp, "must be one of %s (got %q)", strings.Join(AccessFields, ", "), f)
			continue
		}
		if j := slices.Index(a.Fields, f); j < i {
			v.addf(fp, "duplicate field %q (also fields[%d])", f, j)
		}
	}
}

func (v *validator) tcpProxy(l *Listener, p string) {
	if l.Protocol != ProtocolTCP {
		return
	}
	switch {
	case l.Upstream == "":
		v.addf(p+".upstream", "required for tcp listeners: the host:port to proxy to")
	default:
		v.hostPort(p+".upstream", l.Upstream, false)
	}
	v.nonNegativeDuration(p+".tcp_idle_timeout", l.TCPIdleTimeout)
}

func (v *validator) quic(l *Listener, p string) {
	p += ".quic"
	q := &l.QUIC
	if l.Protocol != ProtocolHTTP3 {
		return
	}
	fields := []struct {
		key string
		n   int
	}{{"retry_threshold_min", q.RetryThresholdMin}, {"retry_threshold_max", q.RetryThresholdMax}, {"max_in_progress", q.MaxInProgress}}
	for _, f := range fields {
		if f.n < 0 {
			v.addf(p+"."+f.key, "must be 0 or more (got %d)", f.n)
		}
	}
	// A minimum above the maximum pins the threshold at the minimum, and
	// max_in_progress caps it: both are meaningful (quicadmit does the same),
	// so neither is refused.
	switch q.Retry {
	case "", RetryAdaptive:
	case RetryAlways:
		for _, f := range fields[:2] {
			if f.n != 0 {
				v.addf(p+"."+f.key, "not used with retry: always, which sends every unproven attempt a Retry; leave it out (got %d)", f.n)
			}
		}
	default:
		v.addf(p+".retry", "must be adaptive or always (got %q)", q.Retry)
	}
	switch {
	case q.HandshakeTimeout < 0:
		v.addf(p+".handshake_timeout", "must be 0 or more (got %s)", q.HandshakeTimeout)
	case q.HandshakeTimeout > MaxHandshakeTimeout:
		v.addf(p+".handshake_timeout", "must be at most %s (got %s)", MaxHandshakeTimeout, q.HandshakeTimeout)
	}
	if q.TokenKeyFile != "" {
		if b, err := os.ReadFile(q.TokenKeyFile); err != nil {
			v.add(p+".token_key_file", err, readProblem(err)+quoteGot(q.TokenKeyFile))
		} else if _, ok := parseTokenKey(b); !ok {
			v.addf(p+".token_key_file", "%s (got %q)", tokenKeyFormat, q.TokenKeyFile)
		}
	}
}

// routes checks a listener's routes, or its routes_from (whose target is checked once every
// listener name is known).
func (v *validator) routes(l *Listener, p string) {
	if !l.Protocol.IsHTTP() || l.IsForward() {
		return
	}
	if l.RoutesFrom != "" {
		if len(l.Routes) > 0 {
			v.addf(p+".routes", "must be empty: this listener uses the routes of %q (routes_from)", l.RoutesFrom)
		}
		return
	}
	if len(l.Routes) == 0 {
		v.addf(p+".routes", "at least one route is required, or routes_from")
		return
	}
	names := make(map[string]int)
	matches := make(map[string]int)
	for i := range l.Routes {
		r := &l.Routes[i]
		rp := indexPath(p+".routes", i)
		v.route(r, rp)
		name := orDefault(r.Name, defaultRouteName(i))
		if j, dup := names[name]; dup {
			v.addf(rp+".name", "duplicate route name %q (also routes[%d])", name, j)
		} else {
			names[name] = i
		}
		match := routeMatch(r)
		if j, dup := matches[match]; dup {
			v.addf(rp+".path_prefix", "unreachable: routes[%d] has the same host and path_prefix and comes first (got %q)",
				j, orDefault(r.PathPrefix, "/"))
		} else {
			matches[match] = i
		}
	}
}

// routeMatch is what a route matches, for finding routes hidden behind an earlier one.
func routeMatch(r *Route) string {
	hosts := make([]string, len(r.Host))
	for i, h := range r.Host {
		hosts[i] = strings.ToLower(h)
	}
	slices.Sort(hosts)
	return fmt.Sprintf("%q %s", hosts, orDefault(r.PathPrefix, "/"))
}

func (v *validator) route(r *Route, p string) {
	if r.Name != "" && !isName(r.Name) {
		v.addf(p+".name", "must be 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit (got %q)", r.Name)
	}
	seen := make(map[string]int)
	for i, h := range r.Host {
		hp := indexPath(p+".host", i)
		if err := checkHostPattern(h); err != nil {
			v.addf(hp, "%v (got %q)", err, h)
			continue
		}
		if j, dup := seen[strings.ToLower(h)]; dup {
			v.addf(hp, "duplicate host (also host[%d]) (got %q)", j, h)
			continue
		}
		seen[strings.ToLower(h)] = i
	}
	if r.PathPrefix != "" {
		if err := checkPathPrefix(r.PathPrefix); err != nil {
			v.addf(p+".path_prefix", "%v (got %q)", err, r.PathPrefix)
		}
	}
	v.upstreams(r.Upstreams, p+".upstreams")
	v.nonNegativeDuration(p+".upstream_timeout", r.UpstreamTimeout)
	v.rate(r.Rate, p+".rate")
	v.limit(r.Limit, p+".limit", routeLimit)
	v.limit(r.ShadowLimit, p+".shadow_limit", shadowLimit)
}

func (v *validator) upstreams(ups []string, p string) {
	if len(ups) == 0 {
		v.addf(p, "at least one upstream URL is required, such as http://127.0.0.1:9000")
		return
	}
	seen := make(map[string]int)
	for i, u := range ups {
		up := indexPath(p, i)
		if err := checkUpstreamURL(u); err != nil {
			v.addf(up, "%v (got %q)", err, u)
			continue
		}
		if j, dup := seen[u]; dup {
			v.addf(up, "duplicate upstream (also upstreams[%d]) (got %q)", j, u)
			continue
		}
		seen[u] = i
	}
}
