package httplimit

import (
	"errors"
	"fmt"
	"hash/maphash"
	"net/http"
	"net/textproto"
	"strings"
	"sync/atomic"

	"golang.org/x/net/http/httpguts"

	"github.com/seed-a07d1050/portcullis/clientkey"
)

// A KeyFunc names what a request is counted under: its client, its user,
// its target host. It is called once per request, on the request's
// goroutine. An empty result means the request is not limited. It must not
// block and should not allocate more than the key string.
type KeyFunc func(r *http.Request) string

// ByClientIP keys a request by its client, as res finds it: the peer
// address, or behind trusted proxies the address in Forwarded or
// X-Forwarded-For (see clientkey.Resolver), masked to the Resolver's prefix
// (IPv4 /32 and IPv6 /64 by default). The key is the clientkey.Key String
// form ("192.0.2.7", "2001:db8:1:2::/64"); a request whose RemoteAddr
// cannot be read (for example served over a Unix socket) is counted under
// the one key "invalid" rather than left unlimited. A nil res means the
// peer address with the default Keyer.
//
// The key strings of recently seen clients are cached in a small fixed
// table, so that a steady client costs no allocation; and so is the key of
// each recent RemoteAddr whose forwarding header res does not read (an
// untrusted peer), so that the requests of a kept-alive connection are
// keyed by comparing one string.
func ByClientIP(res *clientkey.Resolver) KeyFunc {
	c := &keyCache{seed: maphash.MakeSeed()}
	return func(r *http.Request) string {
		slot := &c.peers[maphash.String(c.seed, r.RemoteAddr)&(keyCacheSize-1)]
		if e := slot.Load(); e != nil && e.remoteAddr == r.RemoteAddr {
			return e.key
		}
		k, fromPeer := res.KeyFromPeer(r)
		key := c.string(k)
		if fromPeer {
			slot.Store(&peerKey{remoteAddr: r.RemoteAddr, key: key})
		}
		return key
	}
}

// ByUser keys a request by user(r), typically the user an authentication
// middleware placed before the limiter stored in the request's context. An
// empty user means not limited, so requests that were not authenticated
// are not counted: place the limiter after the middleware that refuses
// them. A nil user is an error, and no KeyFunc is returned: a limit keyed
// by nothing would silently never apply.
func ByUser(user func(*http.Request) string) (KeyFunc, error) {
	if user == nil {
		return nil, errors.New("httplimit: ByUser(nil): no function gives the user")
	}
	return KeyFunc(user), nil
}

// ByBasicAuthUser keys a request by the user name of its
// Authorization: Basic header, as [http.Request.BasicAuth] reads it.
// The password is not checked here: place the limiter after the
// middleware that verifies it, or a client could spread its requests over
// any number of made-up names. A request without basic credentials is not
// limited.
func ByBasicAuthUser() KeyFunc {
	return func(r *http.Request) string {
		user, _, ok := r.BasicAuth()
		if !ok {
			return ""
		}
		return user
	}
}

// ByHost keys a request by its target host: r.Host without its port, its
// ASCII letters lower-cased (other bytes are kept); an IPv6 literal loses
// its brackets ("[2001:DB8::1]:443" gives "2001:db8::1"). For a CONNECT
// request through a proxy this is the host being connected to. A request
// without a host (HTTP/1.0) is not limited.
func ByHost() KeyFunc {
	return func(r *http.Request) string { return hostKey(r.Host) }
}

// hostKey strips the port and brackets from an authority and lower-cases
// it. It allocates only when the host has upper-case letters.
func hostKey(host string) string {
	if strings.HasPrefix(host, "[") {
		if end := strings.IndexByte(host, ']'); end > 0 {
			host = host[1:end]
		} else {
			host = host[1:]
		}
	} else if i := strings.LastIndexByte(host, ':'); i >= 0 && strings.IndexByte(host[:i], ':') < 0 {
		host = host[:i] // a single colon: host:port; more is a bare IPv6 address
	}
	return lowerASCII(host)
}

// lowerASCII lower-cases the ASCII letters of s only: host names on the
// wire are ASCII (IDNs travel punycoded), and other bytes are kept as sent.
func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if 'A' <= b[j] && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// ByHeader keys a request by the first value of the named request header,
// as is (not trimmed or case-folded). A request without the header, or
// with an empty value, is not limited. Use it only for a header that a
// trusted component in front sets or overwrites: a client can write any
// header. A name that is not a valid header field name is an error, and no
// KeyFunc is returned.
func ByHeader(name string) (KeyFunc, error) {
	if !httpguts.ValidHeaderFieldName(name) {
		return nil, fmt.Errorf("httplimit: ByHeader(%q): not a valid header field name", name)
	}
	canonical := textproto.CanonicalMIMEHeaderKey(name)
	return func(r *http.Request) string {
		if v := r.Header[canonical]; len(v) > 0 {
			return v[0]
		}
		return ""
	}, nil
}

// keyCache is a small direct-mapped table from client keys to their
// strings, and another from RemoteAddrs to the key strings they stand
// for. A miss formats the key (one allocation) and stores it; a collision
// just replaces the slot, so memory is fixed. Entries are compared whole,
// so a slot never answers for another client.
type keyCache struct {
	keyStrings
	peers [keyCacheSize]atomic.Pointer[peerKey]
	seed  maphash.Seed
}

// keyStrings is the table from client keys to their strings.
type keyStrings struct {
	slots [keyCacheSize]atomic.Pointer[cachedKey]
}

type peerKey struct {
	remoteAddr string
	key        string
}

const keyCacheSize = 1024 // a power of two

type cachedKey struct {
	key clientkey.Key
	s   string
}

func (c *keyStrings) string(k clientkey.Key) string {
	if !k.IsValid() {
		return invalidClient
	}
	slot := &c.slots[hashKey(k)&(keyCacheSize-1)]
	if e := slot.Load(); e != nil && e.key == k {
		return e.s
	}
	e := &cachedKey{key: k, s: clientKeyText(k)}
	slot.Store(e)
	return e.s
}

// invalidClient is ByClientIP's key for a request whose RemoteAddr cannot
// be read.
const invalidClient = "invalid"

// clientKeyText is ByClientIP's key string for k.
func clientKeyText(k clientkey.Key) string {
	if !k.IsValid() {
		return invalidClient
	}
	var buf [len("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128")]byte
	b, _ := k.AppendText(buf[:0])
	return string(b)
}

// ClientIPConnKey returns the key ByClientIP(res) gives r, and true when
// every request with r's RemoteAddr gets that key: when res finds it from
// the peer's address alone (see clientkey.Resolver.KeyFromPeer), not from
// a trusted proxy's forwarding header. A server that keeps state per
// connection may then remember the key under its Limiter and admit the
// connection's later requests with TryAdmitKey, sparing each the look-up.
func ClientIPConnKey(res *clientkey.Resolver, r *http.Request) (string, bool) {
	k, fromPeer := res.KeyFromPeer(r)
	if !fromPeer {
		return "", false
	}
	return connKeyStrings.string(k), true
}

// connKeyStrings gives ClientIPConnKey's keys, so that a client's
// connections share one string: the limiter's look-ups then compare
// pointers, not bytes.
var connKeyStrings keyStrings

// hashKey mixes a key's address and prefix length. It needs no secret
// seed: a client that forces collisions only costs itself cache misses.
func hashKey(k clientkey.Key) uint64 {
	p := k.Prefix()
	a := p.Addr().As16()
	var hi, lo uint64
	for i := range 8 {
		hi = hi<<8 | uint64(a[i])
		lo = lo<<8 | uint64(a[8+i])
	}
	h := (hi ^ uint64(p.Bits())) * 0x9E3779B97F4A7C15
	h ^= lo * 0xC2B2AE3D27D4EB4F
	return h ^ h>>29
}
