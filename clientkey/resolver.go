package clientkey

import (
	"net/http"
	"net/netip"
	"slices"
	"strings"
)

// Resolver finds the real client of an HTTP request behind trusted reverse
// proxies. The zero Resolver, like a nil *Resolver, trusts no one: the peer
// is always the client. A Resolver is read-only once in use and then safe
// for concurrent use; it does not modify the requests or headers it reads.
type Resolver struct {
	// Trusted holds the proxies whose forwarding headers are believed, both
	// as the peer and as hops inside the header. Nil trusts no one.
	Trusted *ProxySet
	// Header selects the header walked when the peer is trusted. The zero
	// value, HeaderNone, ignores headers: the peer is always the client.
	// Values other than the Header constants behave as HeaderNone.
	Header Header
	// Keyer turns the client address into a Key in [Resolver.Key]. The
	// zero Keyer keys IPv4 by /32 and IPv6 by /64.
	Keyer Keyer
}

// ClientAddr returns the address of the client that sent req.
//
// The peer is read from req.RemoteAddr as "ip:port" with
// [netip.ParseAddrPort] (never by splitting on ':', which breaks IPv6);
// a bare address is accepted too. If RemoteAddr is neither, ClientAddr
// returns the invalid Addr. Otherwise the result is that of
// [Resolver.ClientAddrFrom] for the peer and req.Header.
func (r *Resolver) ClientAddr(req *http.Request) netip.Addr {
	peer, ok := parseHostAddr(req.RemoteAddr)
	if !ok {
		return netip.Addr{}
	}
	return r.ClientAddrFrom(peer, req.Header)
}

// KeyFromPeer returns [Resolver.Key] of req, and whether that key was
// found from req.RemoteAddr alone: the peer's address was read and r reads
// no forwarding header from it (it is not a trusted proxy, or r reads no
// header). Every request with the same RemoteAddr then has the same key,
// so that a caller may remember it for that RemoteAddr; a key found in a
// forwarding header must not be, since a proxy sends many clients'
// requests over one connection.
func (r *Resolver) KeyFromPeer(req *http.Request) (k Key, fromPeer bool) {
	var keyer Keyer
	if r != nil {
		keyer = r.Keyer
	}
	peer, ok := parseHostAddr(req.RemoteAddr)
	if !ok {
		return Key{}, false
	}
	fromPeer = r == nil || r.Header.canonicalName() == "" || !r.Trusted.Contains(peer)
	return keyer.FromAddr(r.ClientAddrFrom(peer, req.Header)), fromPeer
}

// Key returns the key of the client that sent req: r.Keyer applied to
// [Resolver.ClientAddr]. It is the zero Key when RemoteAddr cannot be read.
func (r *Resolver) Key(req *http.Request) Key {
	var k Keyer
	if r != nil {
		k = r.Keyer
	}
	return k.FromAddr(r.ClientAddr(req))
}

// ClientAddrFrom returns the client's address given the peer's address and
// the request header, as [Resolver.ClientAddr] does after reading
// RemoteAddr. It serves callers that learned the peer another way, such as
// from a PROXY protocol header.
//
// If r is nil, r.Header is HeaderNone, or peer is invalid or not in
// r.Trusted, the result is peer: only a trusted proxy's header is believed.
// Otherwise every field line of the header is walked, the last line first
// and each line from its right end, the hop nearest to us first:
//
//   - a hop in r.Trusted is skipped;
//   - the first hop not in r.Trusted is the client and is returned;
//   - a hop that cannot be parsed, or that is "unknown" or obfuscated,
//     breaks the chain before a client is found, and the result is peer;
//   - if every hop is trusted, the left-most hop is returned;
//   - a header that is absent or holds only empty elements gives peer.
//
// Hops left of the client never change the result. The address is returned
// as written in the header (an IPv4-mapped form stays mapped; the Keyer
// unmaps it). h is read under the canonical header name, as net/http
// stores it. With well-formed headers ClientAddrFrom does not allocate,
// except to decode a Forwarded node written with backslash escapes.
func (r *Resolver) ClientAddrFrom(peer netip.Addr, h http.Header) netip.Addr {
	if r == nil || !r.Trusted.Contains(peer) {
		return peer
	}
	name := r.Header.canonicalName()
	if name == "" {
		return peer
	}
	// Index the map directly: net/http stores canonical keys, and
	// Header.Values would canonicalize our constant on every call.
	return walkHops(peer, r.Trusted, h[name], r.Header)
}

// ClientAddrFromLines is [Resolver.ClientAddrFrom] for callers whose
// forwarding header is not in an [net/http.Header]: lines are the field
// lines of the header r.Header names (X-Forwarded-For or Forwarded), in the
// order received, as gRPC metadata holds them under "x-forwarded-for" or
// "forwarded". The result is that of ClientAddrFrom for an http.Header
// holding lines under the header's canonical name; nil lines give peer.
// It does not allocate for well-formed lines.
func (r *Resolver) ClientAddrFromLines(peer netip.Addr, lines []string) netip.Addr {
	if r == nil || !r.Trusted.Contains(peer) || r.Header.canonicalName() == "" {
		return peer
	}
	return walkHops(peer, r.Trusted, lines, r.Header)
}

// walkHops applies the walk of [Resolver.ClientAddrFrom] to the field lines
// of one header.
func walkHops(peer netip.Addr, trusted *ProxySet, lines []string, h Header) netip.Addr {
	var leftmost netip.Addr
	for i := len(lines) - 1; i >= 0; i-- {
		first, client, v := scanLine(lines[i], trusted, h)
		switch v {
		case lineBroken:
			return peer
		case lineClient:
			return client
		case lineTrusted:
			leftmost = first
		}
	}
	if leftmost.IsValid() {
		return leftmost
	}
	return peer
}

// lineVerdict is what the right-most decisive hop of a field line says.
type lineVerdict int

const (
	lineEmpty   lineVerdict = iota // no hop at all
	lineTrusted                    // every hop is trusted and well formed
	lineClient                     // the right-most hop not trusted is an address
	lineBroken                     // the right-most hop not trusted is malformed
)

// scanLine reads one field line left to right (a quoted-string in Forwarded
// may hold commas, so only a left-to-right scan finds its elements) and
// reports its right-most hop that is malformed or untrusted, or, if there
// is none, its first hop.
func scanLine(line string, trusted *ProxySet, h Header) (first, client netip.Addr, v lineVerdict) {
	for rest, more := line, true; more; {
		var elem string
		elem, rest, more = nextElement(rest, h)
		if trimOWS(elem) == "" {
			continue // RFC 9110 §5.6.1: empty list elements are ignored
		}
		a, err := parseHop(elem, h)
		switch {
		case err != nil:
			client, v = netip.Addr{}, lineBroken
		case !trusted.Contains(a):
			client, v = a, lineClient
		case v == lineEmpty:
			first, v = a, lineTrusted
		}
	}
	return first, client, v
}

func nextElement(s string, h Header) (elem, rest string, more bool) {
	if h == HeaderForwarded {
		return nextForwardedElement(s)
	}
	if i := strings.IndexByte(s, ','); i >= 0 {
		return s[:i], s[i+1:], true
	}
	return s, "", false
}

func parseHop(elem string, h Header) (netip.Addr, error) {
	if h == HeaderForwarded {
		return parseForwardedElement(elem)
	}
	return parseXFFHop(elem)
}

// PathFrom returns the route of a request as r believes it, given the peer's
// address and the request header: the client first (the address
// [Resolver.ClientAddrFrom] returns), then each trusted proxy the header
// names between the client and the peer, nearest to the client first, and
// the peer last. When the peer itself is the client (it is not trusted, no
// header is walked, or the chain is broken), the result is just the peer.
// Hops left of the client, which the client wrote itself, are never part
// of it. A proxy writes its forwarding headers from this path, so that
// what it passes on is only what it believes.
//
// The result is appended to dst, which may be nil, and is empty when peer
// is invalid.
func (r *Resolver) PathFrom(dst []netip.Addr, peer netip.Addr, h http.Header) []netip.Addr {
	if !peer.IsValid() {
		return dst
	}
	client := r.ClientAddrFrom(peer, h)
	if client == peer {
		return append(dst, peer)
	}
	start := len(dst)
	dst = append(dst, peer)
	lines := h[r.Header.canonicalName()]
	// Walk from the right, as ClientAddrFrom did, collecting the trusted
	// hops until the client; then reverse to the client-first order.
walk:
	for i := len(lines) - 1; i >= 0; i-- {
		hops := lineHops(lines[i], r.Header)
		for j := len(hops) - 1; j >= 0; j-- {
			dst = append(dst, hops[j])
			if hops[j] == client && !r.Trusted.Contains(hops[j]) {
				break walk
			}
		}
	}
	slices.Reverse(dst[start:])
	return dst
}

// lineHops returns the well-formed hops of one field line, left to right.
// PathFrom uses it only on a chain ClientAddrFrom found whole up to the
// client, so that no malformed hop is met before the client.
func lineHops(line string, h Header) []netip.Addr {
	var out []netip.Addr
	for rest, more := line, true; more; {
		var elem string
		elem, rest, more = nextElement(rest, h)
		if trimOWS(elem) == "" {
			continue
		}
		if a, err := parseHop(elem, h); err == nil {
			out = append(out, a)
		}
	}
	return out
}
