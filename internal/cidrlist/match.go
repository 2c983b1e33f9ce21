package cidrlist

import (
	"cmp"
	"net/netip"
	"slices"
	"strconv"
)

// Verdict is what a [Matcher] decides about a client address.
type Verdict uint8

const (
	// Accept: no list refuses the address. It matched an allow entry, or
	// nothing when there is no allow list.
	Accept Verdict = iota
	// Denied: the longest entry holding the address is a deny entry.
	Denied
	// NotAllowed: there is an allow list and no entry of either list
	// holds the address.
	NotAllowed
)

func (v Verdict) String() string {
	switch v {
	case Accept:
		return "accept"
	case Denied:
		return "deny_list"
	case NotAllowed:
		return "not_allowed"
	}
	return "Verdict(" + strconv.Itoa(int(v)) + ")"
}

// A Matcher decides on client addresses against a deny list and an allow
// list. It is immutable and safe for concurrent use; a nil *Matcher
// accepts every address.
//
// Each family is held as levels, one per prefix length in use, longest
// first; each level is a sorted slice of the masked addresses of its
// entries with their verdicts. A lookup masks the address to each length
// and binary-searches that level, stopping at the first hit: the longest
// prefix. It costs one search per distinct prefix length in the family
// (at most 33 for IPv4 and 129 for IPv6, a handful in practice), and
// allocates nothing.
type Matcher struct {
	v4, v6    []level
	allowList bool
	n         int
}

// level is the entries of one prefix length.
type level struct {
	bits int
	keys []u128 // masked addresses, sorted, unique
	deny []bool // deny[i] is the verdict of keys[i]
}

// u128 is an address as a 128-bit number: IPv4 in the low 32 bits.
type u128 struct{ hi, lo uint64 }

func (a u128) less(b u128) bool { return a.hi < b.hi || a.hi == b.hi && a.lo < b.lo }

// search reports where k is in the sorted keys. It is slices.BinarySearch
// written out, so that the comparison inlines: a third of the time of a
// lookup went to calling a comparison func.
func search(keys []u128, k u128) (int, bool) {
	lo, hi := 0, len(keys)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if keys[m].less(k) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(keys) && keys[lo] == k
}

func toU128(a netip.Addr) u128 {
	if a.Is4() {
		b := a.As4()
		return u128{lo: uint64(b[0])<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3])}
	}
	b := a.As16()
	var x u128
	for i := range 8 {
		x.hi = x.hi<<8 | uint64(b[i])
		x.lo = x.lo<<8 | uint64(b[8+i])
	}
	return x
}

// mask keeps the first bits bits of a, an address of width bits wide.
func (a u128) mask(bits, width int) u128 {
	drop := width - bits // low bits cleared
	switch {
	case drop <= 0:
		return a
	case drop >= 128:
		return u128{}
	case drop >= 64:
		return u128{hi: a.hi &^ (1<<(drop-64) - 1)}
	}
	return u128{hi: a.hi, lo: a.lo &^ (1<<drop - 1)}
}

// New returns the Matcher of deny and allow. Entries may repeat and
// overlap; an IPv4-mapped entry counts as the IPv4 prefix it maps (see
// [Unmap]), and an entry that is not a valid prefix is ignored. A prefix in
// both lists denies. A non-empty allow makes the Matcher an allow list:
// addresses outside every entry are NotAllowed. With deny and allow both
// empty, New returns nil, which accepts everything.
func New(deny, allow []netip.Prefix) *Matcher {
	if len(deny) == 0 && len(allow) == 0 {
		return nil
	}
	m := &Matcher{allowList: len(allow) > 0}
	type entry struct {
		p    netip.Prefix
		deny bool
	}
	var v4, v6 []entry
	add := func(ps []netip.Prefix, deny bool) {
		for _, p := range ps {
			if !p.IsValid() {
				continue
			}
			p = Unmap(p).Masked()
			if p.Addr().Is4() {
				v4 = append(v4, entry{p, deny})
			} else {
				v6 = append(v6, entry{p, deny})
			}
		}
	}
	add(deny, true)
	add(allow, false)
	build := func(es []entry, width int) []level {
		// Longest prefix first, then by address, deny before allow so that
		// a prefix in both lists keeps its deny.
		slices.SortFunc(es, func(a, b entry) int {
			if c := cmp.Compare(b.p.Bits(), a.p.Bits()); c != 0 {
				return c
			}
			if c := a.p.Addr().Compare(b.p.Addr()); c != 0 {
				return c
			}
			if a.deny == b.deny {
				return 0
			}
			if a.deny {
				return -1
			}
			return 1
		})
		var out []level
		for _, e := range es {
			if len(out) == 0 || out[len(out)-1].bits != e.p.Bits() {
				out = append(out, level{bits: e.p.Bits()})
			}
			lv := &out[len(out)-1]
			k := toU128(e.p.Addr()).mask(e.p.Bits(), width)
			if n := len(lv.keys); n > 0 && lv.keys[n-1] == k {
				continue // a repeat, or an allow after the deny of the same prefix
			}
			lv.keys = append(lv.keys, k)
			lv.deny = append(lv.deny, e.deny)
			m.n++
		}
		return out
	}
	m.v4 = build(v4, 32)
	m.v6 = build(v6, 128)
	return m
}

// Len returns the number of distinct prefixes the Matcher holds, a prefix
// in both lists counted once; 0 for nil.
func (m *Matcher) Len() int {
	if m == nil {
		return 0
	}
	return m.n
}

// AllowList reports whether m has an allow list, so that addresses
// matching no entry are refused.
func (m *Matcher) AllowList() bool { return m != nil && m.allowList }

// Check decides on the client address a. An IPv4-mapped a is unmapped and
// a zone ignored. The longest entry holding a decides (Denied for a deny
// entry, Accept for an allow entry); with no entry holding it, a is
// NotAllowed when m has an allow list and accepted otherwise. An invalid a
// is NotAllowed with an allow list and accepted otherwise. A nil m accepts
// everything. Check does not allocate.
func (m *Matcher) Check(a netip.Addr) Verdict {
	if m == nil {
		return Accept
	}
	if a.IsValid() {
		a = a.Unmap()
		levels, width := m.v6, 128
		if a.Is4() {
			levels, width = m.v4, 32
		}
		x := toU128(a)
		for i := range levels {
			lv := &levels[i]
			k := x.mask(lv.bits, width)
			if j, ok := search(lv.keys, k); ok {
				if lv.deny[j] {
					return Denied
				}
				return Accept
			}
		}
	}
	if m.allowList {
		return NotAllowed
	}
	return Accept
}
