package clientkey

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// ProxySet is an immutable set of trusted proxy addresses, made by
// [ParseProxySet]. It is safe for concurrent use. A nil *ProxySet is the
// empty set: it contains nothing.
type ProxySet struct {
	// Kept apart by family so that Contains scans only the prefixes that
	// can match; sorted, and with no prefix covered by another.
	v4, v6 []netip.Prefix
}

// ParseProxySet parses a list of trusted proxies. Each entry is a prefix in
// CIDR notation ("10.0.0.0/8", "2001:db8::/32") or a single address
// ("192.0.2.7", "::1"); spaces and tabs around an entry are ignored. An
// IPv4-mapped entry ("::ffff:192.0.2.7", "::ffff:10.0.0.0/104") is stored as
// the IPv4 address or prefix it maps.
//
// An entry that is empty, has host bits set ("10.1.2.3/8": write
// "10.0.0.0/8" or "10.1.2.3/32"), has a zone, or is not an address or prefix
// makes ParseProxySet return a nil set and an error naming the entry and its
// index. An empty list gives an empty, non-nil set.
func ParseProxySet(entries []string) (*ProxySet, error) {
	s := &ProxySet{}
	for i, entry := range entries {
		p, err := parseProxyEntry(strings.Trim(entry, " \t"))
		if err != nil {
			return nil, fmt.Errorf("clientkey: trusted proxy %d %q: %w", i, entry, err)
		}
		if p.Addr().Is4() {
			s.v4 = append(s.v4, p)
		} else {
			s.v6 = append(s.v6, p)
		}
	}
	s.v4 = minimalCover(s.v4)
	s.v6 = minimalCover(s.v6)
	return s, nil
}

// MustParseProxySet is like [ParseProxySet] with its arguments as the list,
// but panics on error. It is meant for tests and for fixed lists in code.
func MustParseProxySet(entries ...string) *ProxySet {
	s, err := ParseProxySet(entries)
	if err != nil {
		panic(err)
	}
	return s
}

func parseProxyEntry(entry string) (netip.Prefix, error) {
	if entry == "" {
		return netip.Prefix{}, errors.New("empty entry")
	}
	var p netip.Prefix
	if strings.Contains(entry, "/") {
		var err error
		if p, err = netip.ParsePrefix(entry); err != nil {
			return netip.Prefix{}, err
		}
		if p.Masked() != p {
			return netip.Prefix{}, fmt.Errorf("host bits set (did you mean %s or %s?)", p.Masked(), netip.PrefixFrom(p.Addr(), p.Addr().BitLen()))
		}
	} else {
		a, err := netip.ParseAddr(entry)
		if err != nil {
			return netip.Prefix{}, err
		}
		if a.Zone() != "" {
			return netip.Prefix{}, errors.New("zones are not supported")
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	return unmapPrefix(p), nil
}

// unmapPrefix rewrites a prefix inside ::ffff:0:0/96 as the IPv4 prefix it
// covers, because Contains unmaps the addresses it is asked about.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	if !p.Addr().Is4In6() || p.Bits() < 96 {
		return p
	}
	return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
}

// minimalCover sorts ps and drops every prefix contained in another.
func minimalCover(ps []netip.Prefix) []netip.Prefix {
	// Sorted by address then length, a prefix comes before every prefix it
	// covers, and prefixes are nested or disjoint, so comparing each one
	// with the last kept prefix suffices.
	slices.SortFunc(ps, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	out := ps[:0]
	for _, p := range ps {
		if n := len(out); n > 0 && out[n-1].Bits() <= p.Bits() && out[n-1].Contains(p.Addr()) {
			continue
		}
		out = append(out, p)
	}
	return slices.Clip(out)
}

// Contains reports whether a is in the set. An IPv4-mapped a is unmapped
// first and a zone is ignored, so ::ffff:10.1.2.3 is in a set holding
// 10.0.0.0/8 and fe80::1%eth0 is in one holding fe80::/10. An invalid a and
// a nil set report false. Contains does not allocate.
func (s *ProxySet) Contains(a netip.Addr) bool {
	if s == nil || !a.IsValid() {
		return false
	}
	a = a.Unmap().WithZone("")
	ps := s.v6
	if a.Is4() {
		ps = s.v4
	}
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Len returns the number of prefixes in the set after prefixes covered by
// others have been dropped; 0 for a nil set.
func (s *ProxySet) Len() int {
	if s == nil {
		return 0
	}
	return len(s.v4) + len(s.v6)
}

// Prefixes returns a new slice of the prefixes in the set, IPv4 first, each
// family sorted, with no prefix covered by another; nil for an empty or nil
// set. A single address appears as a full-length prefix (192.0.2.7/32).
func (s *ProxySet) Prefixes() []netip.Prefix {
	if s.Len() == 0 {
		return nil
	}
	return slices.Concat(s.v4, s.v6)
}

// String returns the prefixes of [ProxySet.Prefixes] separated by ", ", for
// logs; "" for an empty or nil set.
func (s *ProxySet) String() string {
	var b strings.Builder
	for i, p := range s.Prefixes() {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(p.String())
	}
	return b.String()
}
