package relay

import (
	"net/http"
	"net/netip"
	"strings"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/internal/exchange"
)

// Forwarding writes the forwarding headers of the requests a listener sends
// upstream. An upstream believes these headers about who the client is and
// how it connected, so the daemon writes them from what it believes itself,
// never from what a client sent:
//
//   - X-Forwarded-For: the path the listener's resolver believes, the client
//     first, then the trusted proxies between it and the daemon, then the
//     peer; anything a client wrote left of itself is dropped;
//   - X-Real-Ip: the client;
//   - X-Forwarded-Proto and X-Forwarded-Host: a trusted peer's, else the
//     scheme and Host of the connection;
//   - Forwarded (RFC 7239), only on listeners that read Forwarded: the same
//     path, with host and proto on the client's element.
//
// Look-alikes of these headers that other software believes are removed:
// from untrusted peers every one of [spoofable]; from every peer the
// spellings with underscores (CGI and PHP read X_Forwarded_For as
// X-Forwarded-For) and the path overrides X-Original-Url and X-Rewrite-Url,
// with which a client could make some backends act on a path the routes
// never saw.
type Forwarding struct {
	res   *clientkey.Resolver // the listener's; never nil
	texts *AddrTexts          // the text of recent clients' addresses; nil: none kept
}

// NewForwarding returns the forwarding rules of a listener whose clients
// res finds (never nil), keeping the text of recent clients' addresses.
func NewForwarding(res *clientkey.Resolver) Forwarding {
	return Forwarding{res: res, texts: NewAddrTexts()}
}

// Header names the daemon writes itself, in canonical form.
const (
	hdrXFF     = "X-Forwarded-For"
	hdrXFHost  = "X-Forwarded-Host"
	hdrXFProto = "X-Forwarded-Proto"
	hdrXRealIP = "X-Real-Ip"
	hdrFwd     = "Forwarded"
)

// stripRule says when a header a client sent is removed before a request
// goes upstream.
type stripRule uint8

const (
	stripUntrusted stripRule = iota + 1 // removed unless the peer is a trusted proxy
	stripAlways                         // removed from every peer
)

// spoofable lists, lower-cased with '-' for '_', the headers an upstream may
// take for the client's address or the request's path. The daemon's own
// headers are rewritten whatever the peer; the others are kept from trusted
// proxies, which set some of them (CDNs send True-Client-Ip and the like).
var spoofable = map[string]stripRule{
	"x-forwarded-for":          stripUntrusted,
	"x-forwarded-host":         stripUntrusted,
	"x-forwarded-proto":        stripUntrusted,
	"x-forwarded-port":         stripUntrusted,
	"x-forwarded-server":       stripUntrusted,
	"x-forwarded-ssl":          stripUntrusted,
	"x-forwarded-scheme":       stripUntrusted,
	"x-forwarded-prefix":       stripUntrusted,
	"x-forwarded-uri":          stripUntrusted,
	"x-forwarded":              stripUntrusted,
	"forwarded":                stripUntrusted,
	"forwarded-for":            stripUntrusted,
	"x-real-ip":                stripUntrusted,
	"x-client-ip":              stripUntrusted,
	"client-ip":                stripUntrusted,
	"x-cluster-client-ip":      stripUntrusted,
	"true-client-ip":           stripUntrusted,
	"cf-connecting-ip":         stripUntrusted,
	"fastly-client-ip":         stripUntrusted,
	"x-original-forwarded-for": stripUntrusted,
	"x-proxyuser-ip":           stripUntrusted,
	"x-host":                   stripUntrusted,
	"x-original-host":          stripUntrusted,
	"x-original-url":           stripAlways,
	"x-rewrite-url":            stripAlways,
}

// maxSpoofableLen is the length of the longest name in spoofable.
const maxSpoofableLen = len("x-original-forwarded-for")

// spoofableShape[c] has bit n set when a name in spoofable begins with c
// and is n bytes long: most of a request's fields (Host, Accept, Cookie...)
// are told apart by that alone, without lower-casing them and looking them
// up.
var spoofableShape = func() (shape [256]uint32) {
	for name := range spoofable {
		shape[name[0]] |= 1 << len(name)
	}
	return shape
}()

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// trusts reports whether the forwarding headers of peer are believed.
func (fw Forwarding) trusts(peer netip.Addr) bool {
	return fw.res.Header != clientkey.HeaderNone && fw.res.Trusted.Contains(peer)
}

// write sets the forwarding headers of out, the header of the request
// going upstream, for the request in.
func (fw Forwarding) write(out http.Header, in *http.Request) {
	peer := exchange.PeerAddr(in)
	trusted := fw.trusts(peer)
	strip(out, trusted)
	fw.set(out, in, peer, trusted, nil)
}

// set writes the daemon's forwarding headers into out for the request in
// from peer, whose forwarding headers are believed when trusted, replacing
// any out holds.
//
// The values are kept in vals when it has room for them (5), so that a
// caller that owns out and vals for the request's lifetime, as the relay's
// pooled outbound requests do, allocates nothing for them.
func (fw Forwarding) set(out http.Header, in *http.Request, peer netip.Addr, trusted bool, vals []string) {
	vals, forwarded, ok := fw.values(in, peer, trusted, vals)
	if !ok {
		return
	}
	out[hdrXFF] = vals[0:1:1]
	out[hdrXRealIP] = vals[1:2:2]
	out[hdrXFProto] = vals[2:3:3]
	out[hdrXFHost] = vals[3:4:4]
	if forwarded {
		out[hdrFwd] = vals[4:5:5]
	}
}

// values returns the values of the forwarding fields of the request going
// upstream for in, in vals when it has room for five: X-Forwarded-For,
// X-Real-Ip, X-Forwarded-Proto, X-Forwarded-Host, and Forwarded when
// forwarded is true. ok is false when there is nothing to vouch for: in
// has no peer address (a Unix socket).
func (fw Forwarding) values(in *http.Request, peer netip.Addr, trusted bool, vals []string) (_ []string, forwarded, ok bool) {
	var buf [4]netip.Addr
	path := fw.res.PathFrom(buf[:0], peer, in.Header)
	if len(path) == 0 {
		return nil, false, false
	}
	proto, host := "http", in.Host
	if in.TLS != nil {
		proto = "https"
	}
	if trusted {
		if v := in.Header.Get(hdrXFProto); v != "" {
			proto = v
		}
		if v := in.Header.Get(hdrXFHost); v != "" {
			host = v
		}
	}
	// At most one allocation for every value, each field its own slice of
	// it.
	if len(vals) < 5 {
		vals = make([]string, 5)
	}
	client := fw.texts.Text(plain(path[0]))
	vals[0], vals[1], vals[2], vals[3] = client, client, proto, host
	if len(path) > 1 {
		vals[0] = joinAddrs(path)
	}
	if fw.res.Header == clientkey.HeaderForwarded {
		vals[4] = forwardedValue(path, host, proto)
		return vals, true, true
	}
	return vals, false, true
}

// strip removes from h the headers spoofable says to remove for a peer
// that is, or is not, trusted, under any spelling of their names.
func strip(h http.Header, trusted bool) {
	for name := range h {
		if stripped(name, trusted) {
			delete(h, name)
		}
	}
}

// stripped reports whether spoofable says to remove the header name from
// the requests of a peer that is, or is not, trusted.
func stripped(name string, trusted bool) bool {
	rule := spoofRule(name)
	return rule == stripAlways || (rule == stripUntrusted && !trusted)
}

// spoofRule returns the rule of a header name, matched case-insensitively
// and with '_' read as '-'; zero when the header is not spoofable.
func spoofRule(name string) stripRule {
	if len(name) > maxSpoofableLen || len(name) == 0 || spoofableShape[lowerASCII(name[0])]&(1<<len(name)) == 0 {
		return 0
	}
	var b [maxSpoofableLen]byte
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '_':
			c = '-'
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		b[i] = c
	}
	rule := spoofable[string(b[:len(name)])]
	if rule == stripUntrusted && strings.IndexByte(name, '_') >= 0 {
		return stripAlways // no proxy writes these with underscores
	}
	return rule
}

// plain returns a without an IPv4-mapped prefix or a zone, as upstreams
// expect an address to be written.
func plain(a netip.Addr) netip.Addr { return a.Unmap().WithZone("") }

func joinAddrs(path []netip.Addr) string {
	var b strings.Builder
	for i, a := range path {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(plain(a).String())
	}
	return b.String()
}

// forwardedValue writes path as an RFC 7239 Forwarded value, one element
// per hop, with host and proto on the client's element: they describe the
// request as the client made it.
func forwardedValue(path []netip.Addr, host, proto string) string {
	var b strings.Builder
	for i, a := range path {
		if i > 0 {
			b.WriteString(", ")
		}
		a = plain(a)
		if a.Is6() {
			b.WriteString(`for="[` + a.String() + `]"`)
		} else {
			b.WriteString("for=" + a.String())
		}
		if i == 0 {
			b.WriteString(`;host="` + quotedStringEscape(host) + `";proto=` + token(proto))
		}
	}
	return b.String()
}

// quotedStringEscape escapes s for an RFC 9110 quoted-string.
func quotedStringEscape(s string) string {
	if !strings.ContainsAny(s, `"\`) {
		return s
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	return r.Replace(s)
}

// token returns proto if it is a plain scheme token, "http" otherwise.
func token(proto string) string {
	for i := 0; i < len(proto); i++ {
		c := proto[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '+' || c == '-' || c == '.') {
			return "http"
		}
	}
	if proto == "" {
		return "http"
	}
	return proto
}
