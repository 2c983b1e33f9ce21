package forward

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// A PortRange is an inclusive range of TCP ports, From ≤ To, both in
// 1..65535. A single port has From == To.
type PortRange struct {
	From, To uint16
}

func (r PortRange) String() string {
	if r.From == r.To {
		return strconv.Itoa(int(r.From))
	}
	return fmt.Sprintf("%d-%d", r.From, r.To)
}

// DefaultPorts are the ports targets may use when [PolicyConfig.Ports] is
// nil: HTTP, HTTPS and every unprivileged port. Mail (25, 465, 587), SSH
// (22) and the other privileged services are refused, so that the proxy
// cannot relay spam or reach administrative services.
var DefaultPorts = []PortRange{{80, 80}, {443, 443}, {1024, 65535}}

// DefaultConnectPorts are the ports a CONNECT may open a tunnel to when
// [PolicyConfig.ConnectPorts] is nil: HTTPS only, as Squid's SSL_ports.
// A tunnel carries any protocol, so that a tunnel to 22 or 25 is an SSH
// or SMTP session the proxy cannot see into.
var DefaultConnectPorts = []PortRange{{443, 443}}

// PolicyConfig configures a [Policy]. The zero value refuses the built-in
// special-purpose ranges and every port but [DefaultPorts].
type PolicyConfig struct {
	// Allow lists networks that may be reached even though a built-in rule
	// refuses them, such as a private network the proxy serves. Nil means
	// none. An address matched by both Allow and Deny follows the longer
	// prefix; at equal length Deny wins.
	Allow []netip.Prefix

	// Deny lists networks that must never be reached. Nil means none.
	// Deny 0.0.0.0/0 and ::/0 with a few Allow entries makes an allowlist.
	Deny []netip.Prefix

	// Ports lists the ports the targets of absolute-form requests
	// (GET http://host:port/) may use. Nil means DefaultPorts; an empty
	// non-nil slice refuses every port. Ranges must be valid
	// (1 ≤ From ≤ To).
	Ports []PortRange

	// ConnectPorts lists the ports a CONNECT may open a tunnel to. Nil
	// means DefaultConnectPorts (443); an empty non-nil slice refuses
	// every CONNECT. Ranges must be valid (1 ≤ From ≤ To). A CONNECT is
	// checked against ConnectPorts only, an absolute-form request against
	// Ports only.
	ConnectPorts []PortRange
}

// A Policy decides which destinations the proxy may connect to. It is
// checked on every address actually dialled (see [Dialer]), after name
// resolution, so that a name resolving to a refused address, now or after
// a DNS change, is refused too. A Policy is immutable and safe for
// concurrent use.
//
// The decision for an address, in order:
//
//  1. an IPv4-mapped IPv6 address (::ffff:a.b.c.d) is decided as its IPv4
//     address; a NAT64 address (64:ff9b::/96, RFC 6052) and a 6to4 address
//     (2002::/16, RFC 3056) are refused when the IPv4 address they embed
//     is refused;
//  2. addresses that are never a unicast destination are refused, whatever
//     Allow says: "this network" 0.0.0.0/8 (which Linux routes to the
//     local host), ::/128, multicast, and the limited broadcast address;
//  3. the configured rules: the longest Allow or Deny prefix holding the
//     address decides (Deny on a tie);
//  4. the built-in rules (see [BuiltinRules]): the address space that the
//     IANA special-purpose registries mark as not globally reachable
//     (loopback, private, shared, link-local, documentation, benchmarking,
//     reserved, ...), and cloud metadata services, are refused;
//  5. anything else is allowed.
type Policy struct {
	user     []rule
	ports    []PortRange
	portsS   string // for messages
	connect  []PortRange
	connectS string
}

// A rule is one prefix and what it decides.
type rule struct {
	prefix netip.Prefix
	allow  bool
	name   string
}

// NewPolicy returns the Policy of cfg, or an error naming the first invalid
// entry.
func NewPolicy(cfg PolicyConfig) (*Policy, error) {
	p := &Policy{}
	var err error
	if p.ports, p.portsS, err = portList("Ports", cfg.Ports, DefaultPorts); err != nil {
		return nil, err
	}
	if p.connect, p.connectS, err = portList("ConnectPorts", cfg.ConnectPorts, DefaultConnectPorts); err != nil {
		return nil, err
	}
	for kind, list := range map[bool][]netip.Prefix{true: cfg.Allow, false: cfg.Deny} {
		for i, pfx := range list {
			if !pfx.IsValid() {
				return nil, fmt.Errorf("forward: %s[%d] is not a valid prefix", verb(kind), i)
			}
			pfx = normalisePrefix(pfx)
			p.user = append(p.user, rule{prefix: pfx, allow: kind, name: verb(kind) + " " + pfx.String() + " (configured)"})
		}
	}
	return p, nil
}

// portList checks a list of port ranges and returns a copy (def for nil)
// with its text for messages.
func portList(field string, list, def []PortRange) ([]PortRange, string, error) {
	if list == nil {
		list = def
	}
	names := make([]string, 0, len(list))
	for i, r := range list {
		if r.From == 0 || r.From > r.To {
			return nil, "", fmt.Errorf("forward: %s[%d] %d-%d is not a range within 1..65535", field, i, r.From, r.To)
		}
		names = append(names, r.String())
	}
	if len(names) == 0 {
		return []PortRange{}, "none", nil
	}
	return slices.Clone(list), strings.Join(names, ", "), nil
}

func verb(allow bool) string {
	if allow {
		return "allow"
	}
	return "deny"
}

// normalisePrefix masks a prefix and writes an IPv4-mapped one as IPv4.
func normalisePrefix(p netip.Prefix) netip.Prefix {
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p.Masked()
}

// DeniedError is why a destination was refused: the address or port and
// the rule that refused it.
type DeniedError struct {
	Addr netip.AddrPort // the address being dialled (for a port refused before any dial, only its port is set)
	Rule string         // e.g. `loopback 127.0.0.1/8 (RFC 1122)`

	// Target is the target as the request named it ("example.com:22"),
	// when the port was refused before any address was known; empty
	// otherwise.
	Target string
}

func (e *DeniedError) Error() string {
	return fmt.Sprintf("forward: destination %s refused by rule %q", e.Destination(), e.Rule)
}

// Destination is what was refused, for messages: Target when set, Addr
// otherwise.
func (e *DeniedError) Destination() string {
	if e.Target != "" {
		return e.Target
	}
	return e.Addr.String()
}

// ErrDenied is matched by every [*DeniedError].
var ErrDenied = errors.New("forward: destination refused by policy")

// Is makes a DeniedError match [ErrDenied].
func (e *DeniedError) Is(target error) bool { return target == ErrDenied }

// CheckPort returns a [*DeniedError] when port is not among the ports of
// absolute-form requests ([PolicyConfig.Ports]), nil otherwise.
func (p *Policy) CheckPort(port uint16) error {
	if inPorts(p.ports, port) {
		return nil
	}
	return &DeniedError{
		Addr: netip.AddrPortFrom(netip.IPv4Unspecified(), port),
		Rule: fmt.Sprintf("port %d is not among the allowed ports (%s)", port, p.portsS),
	}
}

// CheckConnectPort returns a [*DeniedError] when port is not among the
// ports a CONNECT may open a tunnel to ([PolicyConfig.ConnectPorts]), nil
// otherwise.
func (p *Policy) CheckConnectPort(port uint16) error {
	if inPorts(p.connect, port) {
		return nil
	}
	return &DeniedError{
		Addr: netip.AddrPortFrom(netip.IPv4Unspecified(), port),
		Rule: fmt.Sprintf("port %d is not among the CONNECT ports (%s)", port, p.connectS),
	}
}

func inPorts(list []PortRange, port uint16) bool {
	for _, r := range list {
		if r.From <= port && port <= r.To {
			return true
		}
	}
	return false
}

// checkDialPort refuses a port that neither an absolute-form request nor
// a CONNECT may use: the Dialer serves both, after the request's own
// check.
func (p *Policy) checkDialPort(port uint16) error {
	if inPorts(p.connect, port) {
		return nil
	}
	return p.CheckPort(port)
}

// Check returns a [*DeniedError] naming the rule that refuses ap, or nil
// when the proxy may connect to it. The port is checked first, against
// the ports of absolute-form requests and of CONNECT together.
func (p *Policy) Check(ap netip.AddrPort) error {
	if err := p.checkDialPort(ap.Port()); err != nil {
		err.(*DeniedError).Addr = ap
		return err
	}
	if name, ok := p.decide(ap.Addr()); !ok {
		return &DeniedError{Addr: ap, Rule: name}
	}
	return nil
}

// decide returns whether a may be reached and, when not, the name of the
// rule that refuses it.
func (p *Policy) decide(a netip.Addr) (string, bool) {
	a = a.WithZone("").Unmap()
	if a.Is6() {
		if v4, via, ok := embeddedIPv4(a); ok {
			if name, ok := p.decide(v4); !ok {
				return fmt.Sprintf("%s, embedded in %s address %s", name, via, a), false
			}
		}
	}
	if name, ok := neverUnicast(a); ok {
		return name, false
	}
	if r, ok := longest(p.user, a, true); ok {
		return r.name, r.allow
	}
	if r, ok := longest(builtin, a, false); ok {
		return r.name, r.allow
	}
	return "", true
}

// longest returns the rule with the longest prefix holding a; on a tie the
// refusing rule when denyWins, the first otherwise.
func longest(rules []rule, a netip.Addr, denyWins bool) (rule, bool) {
	var best rule
	found := false
	for _, r := range rules {
		if !r.prefix.Contains(a) {
			continue
		}
		switch {
		case !found, r.prefix.Bits() > best.prefix.Bits():
			best, found = r, true
		case r.prefix.Bits() == best.prefix.Bits() && denyWins && !r.allow:
			best = r
		}
	}
	return best, found
}

var (
	nat64Prefix = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour   = netip.MustParsePrefix("2002::/16")
)

// embeddedIPv4 returns the IPv4 address a NAT64 (RFC 6052 well-known
// prefix) or 6to4 (RFC 3056) address leads to.
func embeddedIPv4(a netip.Addr) (netip.Addr, string, bool) {
	b := a.As16()
	switch {
	case nat64Prefix.Contains(a):
		return netip.AddrFrom4([4]byte(b[12:16])), "NAT64 64:ff9b::/96", true
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte(b[2:6])), "6to4 2002::/16", true
	}
	return netip.Addr{}, "", false
}

// neverUnicast names the addresses no TCP connection should go to, which
// no Allow entry can open.
func neverUnicast(a netip.Addr) (string, bool) {
	switch {
	case a.Is4() && a.As4()[0] == 0:
		return "this network 0.0.0.0/8 (RFC 791; 0.0.0.0 reaches the local host)", true
	case a == netip.IPv6Unspecified():
		return "unspecified ::/128 (RFC 4291)", true
	case a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "limited broadcast 255.255.255.255/32 (RFC 919)", true
	case a.Is4() && a.IsMulticast():
		return "multicast 224.0.0.0/4 (RFC 5771)", true
	case a.Is6() && a.IsMulticast():
		return "multicast ff00::/8 (RFC 4291)", true
	}
	return "", false
}

// builtin are the built-in rules, from the IANA IPv4 and IPv6
// Special-Purpose Address Registries
// (https://www.iana.org/assignments/iana-ipv4-special-registry,
// https://www.iana.org/assignments/iana-ipv6-special-registry): every
// block whose "Globally Reachable" is False is refused, and the globally
// reachable blocks nested in a refused one are allowed again. Added to
// them: cloud metadata services, deprecated IPv6 forms, and the IPv4
// multicast and reserved space.
var builtin = buildRules([]struct {
	prefix string
	allow  bool
	name   string
}{
	// IPv4
	{"10.0.0.0/8", false, "private-use 10.0.0.0/8 (RFC 1918)"},
	{"100.64.0.0/10", false, "shared address space 100.64.0.0/10 (RFC 6598)"},
	{"127.0.0.0/8", false, "loopback 127.0.0.0/8 (RFC 1122)"},
	{"169.254.0.0/16", false, "link-local 169.254.0.0/16 (RFC 3927)"},
	{"169.254.169.254/32", false, "cloud metadata service 169.254.169.254 (link-local, RFC 3927)"},
	{"172.16.0.0/12", false, "private-use 172.16.0.0/12 (RFC 1918)"},
	{"192.0.0.0/24", false, "IETF protocol assignments 192.0.0.0/24 (RFC 6890)"},
	{"192.0.0.9/32", true, "port control protocol anycast (RFC 7723)"},
	{"192.0.0.10/32", true, "TURN anycast (RFC 8155)"},
	{"192.0.2.0/24", false, "documentation 192.0.2.0/24 (RFC 5737)"},
	{"192.88.99.0/24", false, "deprecated 6to4 relay anycast 192.88.99.0/24 (RFC 7526)"},
	{"192.168.0.0/16", false, "private-use 192.168.0.0/16 (RFC 1918)"},
	{"198.18.0.0/15", false, "benchmarking 198.18.0.0/15 (RFC 2544)"},
	{"198.51.100.0/24", false, "documentation 198.51.100.0/24 (RFC 5737)"},
	{"203.0.113.0/24", false, "documentation 203.0.113.0/24 (RFC 5737)"},
	{"240.0.0.0/4", false, "reserved 240.0.0.0/4 (RFC 1112)"},

	// IPv6 (IPv4-mapped ::ffff:0:0/96 is decided as IPv4; 64:ff9b::/96
	// is globally reachable and decided by the IPv4 address it embeds).
	{"::/96", false, "IPv4-compatible ::/96 (deprecated, RFC 4291)"},
	{"::1/128", false, "loopback ::1/128 (RFC 4291)"},
	{"64:ff9b:1::/48", false, "local-use IPv4/IPv6 translation 64:ff9b:1::/48 (RFC 8215)"},
	{"100::/64", false, "discard-only 100::/64 (RFC 6666)"},
	{"100:0:0:1::/64", false, "dummy IPv6 prefix 100:0:0:1::/64 (RFC 9780)"},
	{"2001::/23", false, "IETF protocol assignments 2001::/23 (RFC 2928)"},
	{"2001::/32", false, "Teredo 2001::/32 (RFC 4380)"},
	{"2001:1::1/128", true, "port control protocol anycast (RFC 7723)"},
	{"2001:1::2/128", true, "TURN anycast (RFC 8155)"},
	{"2001:1::3/128", true, "DNS-SD service registration anycast (RFC 9665)"},
	{"2001:2::/48", false, "benchmarking 2001:2::/48 (RFC 5180)"},
	{"2001:3::/32", true, "AMT (RFC 7450)"},
	{"2001:4:112::/48", true, "AS112-v6 (RFC 7535)"},
	{"2001:10::/28", false, "deprecated ORCHID 2001:10::/28 (RFC 4843)"},
	{"2001:20::/28", true, "ORCHIDv2 (RFC 7343)"},
	{"2001:30::/28", true, "drone remote ID (RFC 9374)"},
	{"2001:db8::/32", false, "documentation 2001:db8::/32 (RFC 3849)"},
	{"3fff::/20", false, "documentation 3fff::/20 (RFC 9637)"},
	{"5f00::/16", false, "segment routing SIDs 5f00::/16 (RFC 9602)"},
	{"fc00::/7", false, "unique-local fc00::/7 (RFC 4193)"},
	{"fd00:ec2::254/128", false, "cloud metadata service fd00:ec2::254 (unique-local, RFC 4193)"},
	{"fe80::/10", false, "link-local fe80::/10 (RFC 4291)"},
	{"fec0::/10", false, "deprecated site-local fec0::/10 (RFC 3879)"},
})

func buildRules(entries []struct {
	prefix string
	allow  bool
	name   string
}) []rule {
	out := make([]rule, len(entries))
	for i, e := range entries {
		out[i] = rule{prefix: netip.MustParsePrefix(e.prefix), allow: e.allow, name: e.name}
	}
	return out
}

// A BuiltinRule is one entry of the built-in policy, for documentation and
// tests.
type BuiltinRule struct {
	Prefix netip.Prefix
	Allow  bool // a globally reachable block nested in a refused one
	Name   string
}

// BuiltinRules returns the built-in rules (step 4 of [Policy]).
func BuiltinRules() []BuiltinRule {
	out := make([]BuiltinRule, len(builtin))
	for i, r := range builtin {
		out[i] = BuiltinRule{Prefix: r.prefix, Allow: r.allow, Name: r.name}
	}
	return out
}
