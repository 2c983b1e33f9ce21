package clientkey

import (
	"fmt"
	"net"
	"net/netip"
)

// Default prefix lengths of the zero [Keyer].
const (
	DefaultIPv4Bits = 32 // each IPv4 address is its own client
	DefaultIPv6Bits = 64 // each IPv6 /64, the usual allocation to one site, is one client
)

// Keyer computes client keys from addresses. The zero Keyer is ready to use
// and keys IPv4 by /32 and IPv6 by /64. Keyers are small values, safe to copy
// and to use from many goroutines. Keyers that compute the same keys compare
// equal: NewKeyer(32, 64) == Keyer{}.
type Keyer struct {
	// 0 stands for the default, so that the zero Keyer is the default Keyer.
	v4Bits, v6Bits uint8
}

// NewKeyer returns a Keyer that masks IPv4 addresses to ipv4Bits and IPv6
// addresses to ipv6Bits. Zero selects the default ([DefaultIPv4Bits],
// [DefaultIPv6Bits]). Other values must be in 1..32 for IPv4 and 1..128 for
// IPv6; otherwise NewKeyer returns the zero Keyer and an error naming the
// offending value.
func NewKeyer(ipv4Bits, ipv6Bits int) (Keyer, error) {
	if ipv4Bits < 0 || ipv4Bits > 32 {
		return Keyer{}, fmt.Errorf("clientkey: IPv4 prefix length %d out of range 1..32 (0 means %d)", ipv4Bits, DefaultIPv4Bits)
	}
	if ipv6Bits < 0 || ipv6Bits > 128 {
		return Keyer{}, fmt.Errorf("clientkey: IPv6 prefix length %d out of range 1..128 (0 means %d)", ipv6Bits, DefaultIPv6Bits)
	}
	return Keyer{v4Bits: storedBits(ipv4Bits, DefaultIPv4Bits), v6Bits: storedBits(ipv6Bits, DefaultIPv6Bits)}, nil
}

func storedBits(bits, def int) uint8 {
	if bits == def {
		return 0
	}
	return uint8(bits)
}

// IPv4Bits returns the prefix length k applies to IPv4 addresses, in 1..32.
func (k Keyer) IPv4Bits() int {
	if k.v4Bits == 0 {
		return DefaultIPv4Bits
	}
	return int(k.v4Bits)
}

// IPv6Bits returns the prefix length k applies to IPv6 addresses, in 1..128.
func (k Keyer) IPv6Bits() int {
	if k.v6Bits == 0 {
		return DefaultIPv6Bits
	}
	return int(k.v6Bits)
}

// FromAddr returns the key of a. An IPv4 address is masked to
// [Keyer.IPv4Bits]. An IPv4-mapped IPv6 address (::ffff:a.b.c.d) is unmapped
// and keyed as that IPv4 address. Any other IPv6 address is masked to
// [Keyer.IPv6Bits]. A zone is dropped. An invalid a returns the zero Key.
// FromAddr does not allocate.
func (k Keyer) FromAddr(a netip.Addr) Key {
	if !a.IsValid() {
		return Key{}
	}
	a = a.Unmap()
	bits := k.IPv6Bits()
	if a.Is4() {
		bits = k.IPv4Bits()
	}
	// Addr.Prefix drops the zone and fails only for out-of-range bits,
	// which a Keyer never holds.
	p, _ := a.Prefix(bits)
	return Key{prefix: p}
}

// FromAddrPort returns the key of ap's address, as [Keyer.FromAddr]; the
// port is ignored. It does not allocate.
func (k Keyer) FromAddrPort(ap netip.AddrPort) Key { return k.FromAddr(ap.Addr()) }

// FromNetAddr returns the key of a's IP address, as [Keyer.FromAddr].
// *net.TCPAddr, *net.UDPAddr and *net.IPAddr are read directly, without
// allocating. Any other non-nil a is read from its String as "ip:port"
// ([netip.ParseAddrPort]) or, failing that, as a bare address. A nil a, a
// nil pointer, or an address with no IP (a *net.UnixAddr, say) returns the
// zero Key.
func (k Keyer) FromNetAddr(a net.Addr) Key {
	switch a := a.(type) {
	case nil:
		return Key{}
	case *net.TCPAddr:
		if a == nil {
			return Key{}
		}
		return k.fromIP(a.IP)
	case *net.UDPAddr:
		if a == nil {
			return Key{}
		}
		return k.fromIP(a.IP)
	case *net.IPAddr:
		if a == nil {
			return Key{}
		}
		return k.fromIP(a.IP)
	default:
		addr, _ := parseHostAddr(a.String())
		return k.FromAddr(addr)
	}
}

// fromIP keys a net.IP. It skips the Addr conversions of the net types,
// which would intern the zone we are about to drop.
func (k Keyer) fromIP(ip net.IP) Key {
	a, _ := netip.AddrFromSlice(ip)
	return k.FromAddr(a)
}

// parseHostAddr reads "ip:port" (with IPv6 in brackets) or a bare "ip".
// The bare form is accepted because [net/http.Request.RemoteAddr] has no
// defined format and some middleware leaves only the address there.
func parseHostAddr(s string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr(), true
	}
	a, err := netip.ParseAddr(s)
	return a, err == nil
}

var defaultKeyer Keyer

// FromAddr returns the key of a under the zero [Keyer]: IPv4 /32, IPv6 /64.
func FromAddr(a netip.Addr) Key { return defaultKeyer.FromAddr(a) }

// FromAddrPort returns the key of ap's address under the zero [Keyer].
func FromAddrPort(ap netip.AddrPort) Key { return defaultKeyer.FromAddrPort(ap) }

// FromNetAddr returns the key of a under the zero [Keyer], as
// [Keyer.FromNetAddr].
func FromNetAddr(a net.Addr) Key { return defaultKeyer.FromNetAddr(a) }
