package accesslog

import (
	"hash/maphash"
	"net/http"
	"net/netip"
	"sync/atomic"

	"github.com/seed-a07d1050/portcullis/clientkey"
)

// accessClients finds the client field of a listener's access lines, as
// its Resolver finds the client the limits count. The requests of a
// kept-alive connection share one RemoteAddr, so the client of each recent
// RemoteAddr whose client is the peer itself is kept in a small
// direct-mapped table (as addrTexts keeps texts), sparing a parse of
// RemoteAddr per line. The client behind a trusted proxy is never kept:
// it comes from the request's forwarding header, and one proxy's
// connection carries many clients.
type Clients struct {
	res   *clientkey.Resolver // nil: the peer is the client
	seed  maphash.Seed
	slots [ClientSlots]atomic.Pointer[peerClient]
}

const ClientSlots = 1024 // a power of two; httplimit.ByClientIP keeps as many RemoteAddrs

type peerClient struct {
	remoteAddr string
	addr       netip.Addr
}

func NewClients(res *clientkey.Resolver) *Clients {
	return &Clients{res: res, seed: maphash.MakeSeed()}
}

// Client returns res.ClientAddr(r). A nil c reads the peer alone.
func (c *Clients) Client(r *http.Request) netip.Addr {
	if c == nil {
		return (*clientkey.Resolver)(nil).ClientAddr(r)
	}
	slot := &c.slots[maphash.String(c.seed, r.RemoteAddr)&(ClientSlots-1)]
	if e := slot.Load(); e != nil && e.remoteAddr == r.RemoteAddr {
		return e.addr
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return c.res.ClientAddr(r) // a bare address, or none: not kept
	}
	peer := ap.Addr()
	if c.res != nil && c.res.Header != clientkey.HeaderNone && c.res.Trusted.Contains(peer) {
		return c.res.ClientAddrFrom(peer, r.Header)
	}
	slot.Store(&peerClient{remoteAddr: r.RemoteAddr, addr: peer})
	return peer
}

// PeerIsClient reports whether the client of every request on a
// connection from peer is peer itself, as client finds it: true unless
// peer is a proxy whose forwarding header is believed (or invalid).
func (c *Clients) PeerIsClient(peer netip.Addr) bool {
	if !peer.IsValid() {
		return false
	}
	return c == nil || c.res == nil || c.res.Header == clientkey.HeaderNone || !c.res.Trusted.Contains(peer)
}
