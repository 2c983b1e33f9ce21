// Package clientkey answers "who is the client?" for admission control.
//
// A [Key] is a small comparable value naming one client: an address prefix.
// Limiters use it as a map key, so computing one never allocates. A [Keyer]
// turns a [netip.Addr] into a Key with these rules, which are also the
// defaults of the zero Keyer:
//
//   - An IPv4 address is keyed as itself: a /32 prefix. [NewKeyer] can widen
//     this to any length from 1 to 32, so that a whole IPv4 network shares a key.
//   - An IPv4-mapped IPv6 address (::ffff:a.b.c.d), as a dual-stack socket
//     reports an IPv4 peer, is unmapped first and keyed as that IPv4 address.
//   - Any other IPv6 address is masked to a /64, the block a site is normally
//     handed, so that one host cannot evade its limit by rotating addresses.
//     [NewKeyer] can choose any length from 1 to 128.
//   - A zone (fe80::1%eth0) is dropped: the key of a link-local address is the
//     key of the address without its zone.
//   - An invalid address gives the zero Key, which [Key.IsValid] reports as
//     "no key". Callers decide what no key means (typically: refuse, or
//     count under one shared bucket).
//
// Behind a reverse proxy every connection comes from the proxy. A [Resolver]
// finds the real client of an HTTP request from a forwarding header, but
// only when the peer is in its [ProxySet] of trusted proxies:
//
//   - The peer is taken from [net/http.Request.RemoteAddr] with
//     [netip.ParseAddrPort], never by splitting on ":", which breaks IPv6.
//     A bare address is accepted too; anything else gives the invalid
//     address and the zero Key.
//   - An untrusted peer is the client, whatever headers it sent: anyone can
//     write X-Forwarded-For.
//   - A trusted peer's header ([HeaderXForwardedFor] or [HeaderForwarded],
//     all field lines concatenated in order) is walked from the right, the
//     hop nearest to us, towards the left. Hops in the trusted set are
//     skipped; the first untrusted hop is the client. Only the right-most
//     hops were written by proxies we trust: everything to the left of the
//     first untrusted hop was written by that client and may be forged.
//   - If every hop is trusted, the left-most hop is the client.
//   - If the header is absent or holds no hop, the peer is the client.
//   - If a hop in the walked part (up to and including the client's) is
//     malformed, or is not an address (RFC 7239 "unknown" or an obfuscated
//     identifier such as "_hidden"), the chain is broken and the peer is the
//     client. A client never gets to choose its own key by sending a header
//     we cannot read. Hops left of the client never change the result.
//   - Empty list elements ("a, , b") are ignored, as RFC 9110 asks. In
//     Forwarded, commas inside quoted-strings do not separate elements, so
//     an unterminated quote makes the rest of its field line one malformed
//     element.
//   - [HeaderNone], the zero value, ignores every header: the peer is the
//     client.
//
// The hop parsers [ParseXForwardedForHop], [ParseForwardedElement] and
// [ParseForwardedNode] are exported so that other code reads these headers
// exactly as the Resolver does.
//
// The operator's view of all this is in docs/clientkey.md in the repository.
package clientkey
