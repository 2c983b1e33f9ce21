package relay

import (
	"net/netip"
	"testing"
)

// TestAddrTextsAnswerTheAddressAsked checks that the table answers every
// address with its own text, whatever shares its slot: addresses that hash
// alike (an IPv4 address and its IPv4-mapped form, a zone and none) and
// more addresses than slots, asked twice over.
func TestAddrTextsAnswerTheAddressAsked(t *testing.T) {
	tab := NewAddrTexts()
	addrs := []netip.Addr{
		{},
		netip.MustParseAddr("192.0.2.1"),
		netip.MustParseAddr("::ffff:192.0.2.1"),
		netip.MustParseAddr("fe80::1"),
		netip.MustParseAddr("fe80::1%eth0"),
		netip.MustParseAddr("2001:db8::1"),
	}
	for i := range 3 * addrTextSlots {
		addrs = append(addrs, netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}))
	}
	for range 2 {
		for _, a := range addrs {
			if got, want := tab.Text(a), a.String(); got != want {
				t.Fatalf("text(%#v) = %q, want %q", a, got, want)
			}
		}
	}
	var none *AddrTexts
	if got := none.Text(addrs[1]); got != "192.0.2.1" {
		t.Fatalf("nil table: %q", got)
	}
}
