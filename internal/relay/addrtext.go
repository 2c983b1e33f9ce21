package relay

import (
	"hash/maphash"
	"net/netip"
	"sync/atomic"
)

// AddrTexts is a small direct-mapped table from client addresses to their
// text, so that the forwarding fields written for a steady client cost no
// allocation. A miss formats the address and stores it; a collision
// replaces the slot, so memory is fixed. Entries are compared by the whole
// address, so a slot can only ever answer with the text of the address
// asked for: a client that forces collisions only costs itself misses.
type AddrTexts struct {
	slots [addrTextSlots]atomic.Pointer[addrText]
	seed  maphash.Seed
}

func NewAddrTexts() *AddrTexts { return &AddrTexts{seed: maphash.MakeSeed()} }

const addrTextSlots = 512 // a power of two

type addrText struct {
	addr netip.Addr
	Text string
}

// Text returns a.String(). A nil table formats every time.
func (t *AddrTexts) Text(a netip.Addr) string {
	if t == nil {
		return a.String()
	}
	// Hashed by its 16 bytes: maphash.Comparable walks netip.Addr's fields
	// by reflection, several times slower, for a zone that is rare and that
	// the comparison below checks anyway.
	b := a.As16()
	slot := &t.slots[maphash.Bytes(t.seed, b[:])&(addrTextSlots-1)]
	if e := slot.Load(); e != nil && e.addr == a {
		return e.Text
	}
	e := &addrText{addr: a, Text: a.String()}
	slot.Store(e)
	return e.Text
}
