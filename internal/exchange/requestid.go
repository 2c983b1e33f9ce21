package exchange

import (
	"math/rand/v2"
	"net/http"
	"net/netip"
	"net/textproto"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/internal/config"
)

// RequestIDs names the requests of a listener (config.RequestID): the id
// a request keeps or gets goes upstream in [RequestIDs.Header] and into
// its access line.
type RequestIDs struct {
	header    string // canonical
	acceptAny bool
	trusted   func(peer netip.Addr) bool // the listener's trusted proxies
}

// NewRequestIDs returns the naming c asks for, for a listener whose
// trusted proxies res names (never nil); nil when c is nil.
func NewRequestIDs(c *config.RequestID, res *clientkey.Resolver) *RequestIDs {
	if c == nil {
		return nil
	}
	return &RequestIDs{
		header:    textproto.CanonicalMIMEHeaderKey(c.HeaderName()),
		acceptAny: c.Accept == config.RequestIDAcceptAny,
		trusted:   res.Trusted.Contains,
	}
}

// Header returns the canonical name of the field the id travels in.
func (ids *RequestIDs) Header() string { return ids.header }

// Of returns the id of r from peer: the one it carries, when ids keeps
// it and it is well formed, or a new one.
func (ids *RequestIDs) Of(r *http.Request, peer netip.Addr) string {
	if v := r.Header[ids.header]; len(v) == 1 && validRequestID(v[0]) && (ids.acceptAny || ids.trusted(peer)) {
		return v[0]
	}
	return newRequestID()
}

// maxRequestIDLen bounds a kept id: what one request can make the access
// log and the upstream carry.
const maxRequestIDLen = 128

// validRequestID reports whether id may be kept: 1 to maxRequestIDLen
// visible ASCII characters without '"' or '\', so that it needs no
// escaping in a log line or a header.
func validRequestID(id string) bool {
	if id == "" || len(id) > maxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// newRequestID returns 128 random bits as 32 lowercase hex digits, the
// form of nginx's $request_id. math/rand/v2's generator is seeded by the
// runtime and unpredictable to clients; the ids need to be unique, not
// secret.
func newRequestID() string {
	const hex = "0123456789abcdef"
	var b [32]byte
	for half, v := range [2]uint64{rand.Uint64(), rand.Uint64()} {
		for i := range 16 {
			b[half*16+i] = hex[v>>(60-4*i)&0xf]
		}
	}
	return string(b[:])
}

// PeerAddr returns the address of the connection's peer (after PROXY
// protocol, the client it names), or the invalid Addr.
func PeerAddr(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr()
}
