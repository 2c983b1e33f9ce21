package intercept

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/seed-a07d1050/portcullis/internal/forward"
)

// ErrBadRule is matched by the errors of [ParseRules].
var ErrBadRule = errors.New("intercept: bad rule")

// A RuleError says why one entry of a rule list was refused. It matches
// [ErrBadRule].
type RuleError struct {
	Index  int    // position in the list, from 0
	Entry  string // as given, truncated
	Reason string
}

func (e *RuleError) Error() string {
	return fmt.Sprintf("intercept: rule %d %q: %s", e.Index, e.Entry, e.Reason)
}

// Is makes a RuleError match [ErrBadRule].
func (e *RuleError) Is(target error) bool { return target == ErrBadRule }

// Rules is a set of targets, by host name or network, that an interceptor
// intercepts or leaves as plain tunnels. The zero Rules (and a nil *Rules)
// matches nothing. Rules are immutable once parsed and safe for concurrent
// use.
type Rules struct {
	exact    map[string]struct{} // "example.com"
	suffixes map[string]struct{} // "example.com" for "*.example.com"
	networks []netip.Prefix
	n        int
}

// ParseRules parses a list of rules, each one of:
//
//   - a host name, "example.com": that host, any port;
//   - "*.example.com": every name under example.com, at any depth, but not
//     example.com itself (list both for both);
//   - an IP address, "192.0.2.7", "2001:db8::1" or "[2001:db8::1]";
//   - a network, "10.0.0.0/8", "2001:db8::/32".
//
// Names are normalised as proxy targets are (lower case, no trailing dot,
// IDNA to ASCII), so "Bücher.Example." matches the target
// xn--bcher-kva.example. A rule names no port and no scheme. Every entry
// that is not valid is reported, as a [*RuleError] each, joined: an empty
// entry, a port, a wildcard anywhere but as the whole first label, a
// network with host bits set (naming the network meant), an address with a
// zone, an IPv4 network written in IPv6, and a name that is not a valid
// host name.
func ParseRules(entries []string) (*Rules, error) {
	r := &Rules{exact: make(map[string]struct{}), suffixes: make(map[string]struct{})}
	var errs []error
	for i, e := range entries {
		if err := r.add(e); err != "" {
			errs = append(errs, &RuleError{Index: i, Entry: truncate(e, 80), Reason: err})
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	r.n = len(entries)
	return r, nil
}

// MustParseRules is ParseRules for lists known to be valid; it panics on
// error. It is for tests and constant lists.
func MustParseRules(entries ...string) *Rules {
	r, err := ParseRules(entries)
	if err != nil {
		panic(err)
	}
	return r
}

// add parses one entry into r and returns why it is invalid, or "".
func (r *Rules) add(e string) string {
	s := strings.TrimSpace(e)
	switch {
	case s == "":
		return "empty rule"
	case strings.Contains(s, "://"):
		return "a rule names a host or a network, without a scheme"
	case strings.Contains(s, "/"):
		return r.addNetwork(s)
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		a, err := netip.ParseAddr(s[1 : len(s)-1])
		if err != nil || !a.Is6() {
			return "brackets hold an IPv6 address only"
		}
		s = s[1 : len(s)-1]
	}
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Zone() != "" {
			return "an address with a zone (%eth0) cannot be matched"
		}
		a = a.Unmap()
		r.networks = append(r.networks, netip.PrefixFrom(a, a.BitLen()))
		return ""
	}
	if strings.Contains(s, ":") {
		return "a rule names no port (and an IPv6 address is written whole, 2001:db8::1)"
	}
	wild := strings.HasPrefix(s, "*.")
	name := strings.TrimPrefix(s, "*.")
	if strings.Contains(name, "*") {
		return "a wildcard is allowed only as the whole first label, *.example.com"
	}
	t, err := forward.ParseTarget(name, 443)
	if err != nil {
		var te *forward.TargetError
		if errors.As(err, &te) {
			return "not a host name: " + te.Reason
		}
		return "not a host name"
	}
	if t.Addr().IsValid() {
		return "*. goes before a name, not an address"
	}
	if wild {
		r.suffixes[t.Host()] = struct{}{}
	} else {
		r.exact[t.Host()] = struct{}{}
	}
	return ""
}

func (r *Rules) addNetwork(s string) string {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return "not a network (10.0.0.0/8, 2001:db8::/32): " + strings.TrimPrefix(err.Error(), "netip.ParsePrefix(")
	}
	if p.Addr().Is4In6() {
		return fmt.Sprintf("write IPv4 networks as IPv4 (%s is IPv4-mapped)", p)
	}
	if m := p.Masked(); m != p {
		return fmt.Sprintf("host bits set; did you mean %s?", m)
	}
	r.networks = append(r.networks, p)
	return ""
}

// Len returns the number of rules.
func (r *Rules) Len() int {
	if r == nil {
		return 0
	}
	return r.n
}

// HasNetworks reports whether some rule is an address or network, which
// a target named by a host name matches only through its addresses.
func (r *Rules) HasNetworks() bool { return r != nil && len(r.networks) > 0 }

// MatchHost reports whether a host name (normalised: lower case, no
// trailing dot, ASCII) matches a name rule.
func (r *Rules) MatchHost(host string) bool {
	if r == nil {
		return false
	}
	if _, ok := r.exact[host]; ok {
		return true
	}
	if len(r.suffixes) == 0 {
		return false
	}
	for i := 0; i < len(host); i++ {
		if host[i] == '.' {
			if _, ok := r.suffixes[host[i+1:]]; ok {
				return true
			}
		}
	}
	return false
}

// MatchAddr reports whether an address matches an address or network
// rule. An IPv4-mapped IPv6 address is matched as its IPv4 address.
func (r *Rules) MatchAddr(a netip.Addr) bool {
	if r == nil {
		return false
	}
	a = a.Unmap()
	for _, p := range r.networks {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// MatchTarget reports whether t matches: by its address for an IP
// literal, by its host name otherwise, or, with addrs (the addresses the
// name resolves to), by any of them.
func (r *Rules) MatchTarget(t forward.Target, addrs []netip.Addr) bool {
	if a := t.Addr(); a.IsValid() {
		return r.MatchAddr(a)
	}
	if r.MatchHost(t.Host()) {
		return true
	}
	for _, a := range addrs {
		if r.MatchAddr(a) {
			return true
		}
	}
	return false
}
