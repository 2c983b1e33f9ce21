package clientkey

import (
	"encoding"
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Key identifies one client: an address prefix with its host bits cleared,
// such as 192.0.2.1/32 or 2001:db8:1:2::/64. Keys are comparable and may be
// used as map keys; two keys are equal exactly when they name the same
// prefix.
//
// The zero Key means "no key": [Key.IsValid] reports false, its String is
// "invalid" and its text form is empty. Keys are made by a [Keyer] or by
// [ParseKey].
type Key struct {
	prefix netip.Prefix // always masked, never IPv4-mapped, never zoned
}

var (
	_ fmt.Stringer             = Key{}
	_ encoding.TextAppender    = Key{}
	_ encoding.TextMarshaler   = Key{}
	_ encoding.TextUnmarshaler = (*Key)(nil)
)

// IsValid reports whether k is a key, that is, whether it is not the zero Key.
func (k Key) IsValid() bool { return k.prefix.IsValid() }

// Prefix returns the masked prefix of k, such as 192.0.2.1/32 or
// 2001:db8:1:2::/64. The Addr of the prefix is IPv4 (never IPv4-mapped IPv6)
// for an IPv4 client and carries no zone. The zero Key returns the zero
// Prefix.
func (k Key) Prefix() netip.Prefix { return k.prefix }

// String returns k in the form [ParseKey] reads back: the bare address for a
// full-length prefix ("192.0.2.1", "2001:db8::1") and the prefix otherwise
// ("192.0.2.0/24", "2001:db8::/64"). The zero Key returns "invalid", which
// ParseKey rejects.
func (k Key) String() string {
	switch {
	case !k.prefix.IsValid():
		return "invalid"
	case k.prefix.IsSingleIP():
		return k.prefix.Addr().String()
	default:
		return k.prefix.String()
	}
}

// AppendText implements [encoding.TextAppender]: it appends the String form
// of k to b, or nothing for the zero Key. It never fails.
func (k Key) AppendText(b []byte) ([]byte, error) {
	switch {
	case !k.prefix.IsValid():
		return b, nil
	case k.prefix.IsSingleIP():
		return k.prefix.Addr().AppendText(b)
	default:
		return k.prefix.AppendText(b)
	}
}

// MarshalText implements [encoding.TextMarshaler]: the String form of k, or
// an empty slice for the zero Key. It never fails.
func (k Key) MarshalText() ([]byte, error) {
	return k.AppendText(make([]byte, 0, len("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128")))
}

// UnmarshalText implements [encoding.TextUnmarshaler]. Empty text sets the
// zero Key, so that MarshalText and UnmarshalText round-trip every Key;
// other text is read by [ParseKey]. On error *k is left unchanged.
func (k *Key) UnmarshalText(text []byte) error {
	if len(text) == 0 {
		*k = Key{}
		return nil
	}
	parsed, err := ParseKey(string(text))
	if err != nil {
		return err
	}
	*k = parsed
	return nil
}

// ParseKey parses a key in the form [Key.String] writes: an address
// ("192.0.2.1", "2001:db8::1", meaning a full-length prefix) or a prefix
// ("192.0.2.0/24", "2001:db8::/64", "192.0.2.1/32").
//
// It accepts exactly the keys a [Keyer] can produce, so ParseKey(k.String())
// == k for every valid k. It rejects, with an error saying why: a prefix
// with host bits set ("192.0.2.1/24"), a zone, an IPv4-mapped IPv6 address
// (write the IPv4 address), a zero-length prefix, and anything that is not
// an address or prefix.
func ParseKey(s string) (Key, error) {
	p, err := parseKeyPrefix(s)
	if err != nil {
		return Key{}, fmt.Errorf("clientkey: parse key %q: %w", s, err)
	}
	return Key{prefix: p}, nil
}

func parseKeyPrefix(s string) (netip.Prefix, error) {
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		if p, err = netip.ParsePrefix(s); err != nil {
			return netip.Prefix{}, err
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		if a.Zone() != "" {
			return netip.Prefix{}, errors.New("a key has no zone")
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	switch {
	case p.Bits() == 0:
		return netip.Prefix{}, errors.New("prefix length must be at least 1")
	case p.Masked() != p:
		return netip.Prefix{}, fmt.Errorf("host bits set; the key is %s", p.Masked())
	case p.Addr().Is4In6():
		return netip.Prefix{}, errors.New("IPv4-mapped IPv6 is keyed as its IPv4 address")
	}
	return p, nil
}
