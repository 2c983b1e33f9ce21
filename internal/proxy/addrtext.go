package proxy

import (
	"net/netip"
	"sync/atomic"
)

// addrTexts is a small direct-mapped table from client addresses to their
// text, so that the forwarding fields written for a steady client cost no
// allocation. A miss formats the address and stores it; a collision
// replaces the slot, so memory is fixed. Entries are compared by the whole
// address, so a slot can only ever answer with the text of the address
// asked for: a client that forces collisions only costs itself misses.
type addrTexts struct {
	slots [addrTextSlots]atomic.Pointer[addrText]
}

const addrTextSlots = 512 // a power of two

type addrText struct {
	addr netip.Addr
	text string
}

// text returns a.String(). A nil table formats every time.
func (t *addrTexts) text(a netip.Addr) string {
	if t == nil {
		return a.String()
	}
	slot := &t.slots[hashAddr(a)&(addrTextSlots-1)]
	if e := slot.Load(); e != nil && e.addr == a {
		return e.text
	}
	e := &addrText{addr: a, text: a.String()}
	slot.Store(e)
	return e.text
}

// hashAddr mixes the 16 bytes of a (an IPv4 address in its mapped form;
// the zone, which the daemon's forwarding addresses never have, is left to
// the comparison).
func hashAddr(a netip.Addr) uint64 {
	b := a.As16()
	var hi, lo uint64
	for i := range 8 {
		hi = hi<<8 | uint64(b[i])
		lo = lo<<8 | uint64(b[8+i])
	}
	h := hi*0x9E3779B97F4A7C15 ^ lo*0xC2B2AE3D27D4EB4F
	if a.Is4() {
		h ^= 0x5bd1e995 // an IPv4 address and its mapped IPv6 form print apart
	}
	return h ^ h>>29
}
