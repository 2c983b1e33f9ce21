package grpclimit

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/seed-a07d1050/portcullis/clientkey"
)

// A Call is what a [KeyFunc] may look at: the call's context (with its
// peer, [peer.FromContext]), its full method and its incoming metadata.
type Call struct {
	ctx    context.Context
	method string
	md     metadata.MD // the tap handle's headers; nil: read from ctx
}

// Context returns the call's context; [peer.FromContext] finds its peer.
func (c Call) Context() context.Context { return c.ctx }

// FullMethod returns the call's method, "/pkg.Service/Method".
func (c Call) FullMethod() string { return c.method }

// Metadata returns the values of the incoming metadata entry named key
// (lower case), or nil. The caller must not modify them.
func (c Call) Metadata(key string) []string {
	if c.md != nil {
		return c.md[key]
	}
	return metadata.ValueFromIncomingContext(c.ctx, key)
}

// A KeyFunc names what a call is counted under: its client, its API key,
// its method. An empty result means the call is not limited. It may be
// called from the tap handle, on the transport's reader goroutine: it must
// not block.
type KeyFunc func(c Call) string

// ByPeer keys a call by its client: the peer address of its connection,
// masked by res.Keyer (IPv4 /32, IPv6 /64 by default). When the peer is in
// res.Trusted and res.Header names a forwarding header, the client is read
// from the x-forwarded-for or forwarded metadata entry as
// clientkey.Resolver reads the HTTP header: right to left, trusted hops
// skipped; from any other peer that metadata is ignored, since a client can
// send any metadata. The key is the clientkey.Key String form
// ("192.0.2.7", "2001:db8:1:2::/64"); a call whose peer has no IP address
// (a Unix socket, an in-memory pipe) is counted under the one key
// "invalid" rather than left unlimited. A nil res means the peer address
// with the default Keyer.
//
// Behind connlimit with PROXY protocol, the peer is the client its PROXY
// header named.
func ByPeer(res *clientkey.Resolver) KeyFunc {
	var keyer clientkey.Keyer
	header := ""
	if res != nil {
		keyer = res.Keyer
		switch res.Header {
		case clientkey.HeaderXForwardedFor:
			header = "x-forwarded-for"
		case clientkey.HeaderForwarded:
			header = "forwarded"
		}
	}
	return func(c Call) string {
		p, ok := peer.FromContext(c.ctx)
		if !ok {
			return "invalid"
		}
		addr := addrOf(p.Addr)
		if header != "" && res.Trusted.Contains(addr) {
			addr = res.ClientAddrFromLines(addr, c.Metadata(header))
		}
		k := keyer.FromAddr(addr)
		if !k.IsValid() {
			return "invalid"
		}
		return k.String()
	}
}

// addrOf reads the IP address of a peer's net.Addr without allocating
// for TCP; other kinds are read from their string form.
func addrOf(a net.Addr) netip.Addr {
	switch a := a.(type) {
	case nil:
		return netip.Addr{}
	case *net.TCPAddr:
		if a == nil {
			return netip.Addr{}
		}
		ip, _ := netip.AddrFromSlice(a.IP)
		return ip
	}
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap.Addr()
	}
	ip, _ := netip.ParseAddr(a.String())
	return ip
}

// ByMetadata keys a call by the first value of the incoming metadata entry
// named name (an API key, a tenant), as is. A call without the entry, or
// with an empty value, is not limited. Names are case-insensitive, as gRPC
// metadata keys are. Use it only for an entry that the client cannot
// forge, or that something in front verifies (an API key checked by an
// interceptor or proxy before the limit applies), or a client could spread
// its calls over any number of made-up keys. A name that is not a valid
// metadata key (letters, digits, '-', '_', '.') is an error, and no KeyFunc
// is returned.
func ByMetadata(name string) (KeyFunc, error) {
	lower := strings.ToLower(name)
	if !validMetadataKey(lower) {
		return nil, fmt.Errorf("grpclimit: ByMetadata(%q): not a valid metadata key (letters, digits, '-', '_', '.')", name)
	}
	return func(c Call) string {
		if v := c.Metadata(lower); len(v) > 0 {
			return v[0]
		}
		return ""
	}, nil
}

func validMetadataKey(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		switch c := k[i]; {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_', c == '.':
		default:
			return false
		}
	}
	return true
}

// ByMethod keys a call by its full method, "/pkg.Service/Method": every
// client's calls of one method share its permits. With Config.Overrides
// (method to permits) it caps methods one by one, for example to keep an
// expensive export to 2 at a time over the whole server.
func ByMethod() KeyFunc {
	return func(c Call) string { return c.method }
}
