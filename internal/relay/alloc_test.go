package relay

import (
	"math/rand/v2"
	"net/netip"
	"testing"
)

// TestAddrTextsAnswerOnlyTheirAddress fills the table far past its size,
// so that slots are replaced over and over, and checks that every answer
// is the text of the address asked for: a forwarding field never carries
// another client's address.
func TestAddrTextsAnswerOnlyTheirAddress(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var addrs []netip.Addr
	for range 4000 {
		var b [16]byte
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		v6 := netip.AddrFrom16(b)
		v4 := netip.AddrFrom4([4]byte{b[0], b[1], b[2], b[3]})
		addrs = append(addrs, v6, v4, netip.AddrFrom16(v4.As16())) // and v4's mapped form
	}
	tab := NewAddrTexts()
	for round := range 3 {
		for _, i := range rng.Perm(len(addrs)) {
			a := addrs[i]
			if got, want := tab.Text(a), a.String(); got != want {
				t.Fatalf("round %d: text(%v) = %q, want %q", round, a, got, want)
			}
		}
	}
	var none *AddrTexts
	if got := none.Text(addrs[0]); got != addrs[0].String() {
		t.Fatalf("nil table: %q", got)
	}
}

// TestPerExchangeHelpersAllocateNothing checks that a known client's
// address text and a copy buffer taken and given back cost no allocation.
func TestPerExchangeHelpersAllocateNothing(t *testing.T) {
	tab := NewAddrTexts()
	a := netip.MustParseAddr("192.0.2.7")
	tab.Text(a)
	if n := testing.AllocsPerRun(100, func() { _ = tab.Text(a) }); n != 0 {
		t.Errorf("text of a known address: %v allocations", n)
	}
	bufs := NewBufferPool()
	if n := testing.AllocsPerRun(100, func() { bufs.Put(bufs.Get()) }); n != 0 && !raceEnabled {
		t.Errorf("copy buffer Get and Put: %v allocations", n)
	}
	if b := bufs.Get(); len(b) != CopyBufferSize {
		t.Errorf("copy buffer of %d bytes, want %d", len(b), CopyBufferSize)
	}
	bufs.Put(make([]byte, 10)) // not one of ours: ignored
}
