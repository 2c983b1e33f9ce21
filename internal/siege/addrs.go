package siege

import (
	"net/netip"
	"strings"
)

// ParseAddrList parses a comma-separated list of IP addresses and inclusive
// ranges "first-last" of one family, such as "127.0.0.3-127.0.0.18,127.0.1.1",
// into the addresses in order. The list may not be empty nor hold more than
// MaxLoops addresses; errors wrap [ErrInvalidConfig] and name the bad item.
func ParseAddrList(s string) ([]netip.Addr, error) {
	if strings.TrimSpace(s) == "" {
		return nil, invalid("empty address list")
	}
	var out []netip.Addr
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		first, last, isRange := strings.Cut(item, "-")
		a, err := netip.ParseAddr(first)
		if err != nil {
			return nil, invalid("address %q: %v", item, err)
		}
		b := a
		if isRange {
			if b, err = netip.ParseAddr(last); err != nil {
				return nil, invalid("range %q: %v", item, err)
			}
		}
		if out, err = appendRange(out, a.Unmap(), b.Unmap()); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func appendRange(out []netip.Addr, first, last netip.Addr) ([]netip.Addr, error) {
	if first.Is4() != last.Is4() || first.Compare(last) > 0 {
		return nil, invalid("range %v-%v is empty or mixes families", first, last)
	}
	for a := first; ; a = a.Next() {
		if len(out) == MaxLoops {
			return nil, invalid("address list longer than %d", MaxLoops)
		}
		out = append(out, a)
		if a == last {
			return out, nil
		}
	}
}
