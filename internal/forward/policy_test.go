package forward

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestPolicyDefaults(t *testing.T) {
	p, err := NewPolicy(PolicyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		addr string
		rule string // "" when allowed
	}{
		{"127.0.0.1:80", "loopback 127.0.0.0/8"},
		{"127.255.0.9:443", "loopback 127.0.0.0/8"},
		{"10.0.0.1:80", "private-use 10.0.0.0/8"},
		{"172.16.5.4:443", "private-use 172.16.0.0/12"},
		{"192.168.1.1:443", "private-use 192.168.0.0/16"},
		{"100.64.0.1:443", "shared address space"},
		{"169.254.169.254:80", "cloud metadata service 169.254.169.254"},
		{"169.254.1.1:80", "link-local 169.254.0.0/16"},
		{"0.0.0.0:80", "this network 0.0.0.0/8"},
		{"224.0.0.1:80", "multicast 224.0.0.0/4"},
		{"255.255.255.255:80", "limited broadcast"},
		{"240.0.0.1:80", "reserved 240.0.0.0/4"},
		{"192.0.2.7:80", "documentation 192.0.2.0/24"},
		{"198.18.0.1:80", "benchmarking"},
		{"192.0.0.170:80", "IETF protocol assignments"},
		{"192.0.0.9:443", ""}, // PCP anycast: globally reachable inside 192.0.0.0/24
		{"8.8.8.8:443", ""},
		{"93.184.216.34:80", ""},
		{"[::1]:80", "loopback ::1/128"},
		{"[::]:80", "unspecified ::/128"},
		{"[::ffff:127.0.0.1]:80", "loopback 127.0.0.0/8"},
		{"[::ffff:10.1.2.3]:80", "private-use 10.0.0.0/8"},
		{"[::10.1.2.3]:80", "IPv4-compatible"},
		{"[64:ff9b::7f00:1]:80", "loopback 127.0.0.0/8 (RFC 1122), embedded in NAT64"},
		{"[64:ff9b::a9fe:a9fe]:80", "cloud metadata service 169.254.169.254 (link-local, RFC 3927), embedded in NAT64"},
		{"[64:ff9b::808:808]:443", ""},
		{"[64:ff9b:1::1]:443", "local-use IPv4/IPv6 translation"},
		{"[2002:7f00:1::1]:80", "loopback 127.0.0.0/8 (RFC 1122), embedded in 6to4"},
		{"[2002:808:808::1]:443", ""},
		{"[fe80::1%eth0]:80", "link-local fe80::/10"},
		{"[fc00::1]:80", "unique-local fc00::/7"},
		{"[fd00:ec2::254]:80", "cloud metadata service fd00:ec2::254"},
		{"[ff02::1]:80", "multicast ff00::/8"},
		{"[2001:db8::1]:80", "documentation 2001:db8::/32"},
		{"[2001::1]:80", "Teredo"},
		{"[2001:2::1]:80", "benchmarking 2001:2::/48"},
		{"[2001:4:112::1]:80", ""},
		{"[2001:1::1]:443", ""},
		{"[100::1]:80", "discard-only"},
		{"[fec0::1]:80", "site-local"},
		{"[3fff::1]:80", "documentation 3fff::/20"},
		{"[5f00::1]:80", "segment routing"},
		{"[2606:4700::1111]:443", ""},
		{"8.8.8.8:25", "port 25 is not among the allowed ports (80, 443, 1024-65535)"},
		{"8.8.8.8:22", "port 22"},
		{"8.8.8.8:8080", ""},
	} {
		ap := netip.MustParseAddrPort(tc.addr)
		err := p.Check(ap)
		if tc.rule == "" {
			if err != nil {
				t.Errorf("%s refused: %v", tc.addr, err)
			}
			continue
		}
		var de *DeniedError
		if !errors.As(err, &de) || !errors.Is(err, ErrDenied) || !strings.Contains(de.Rule, tc.rule) || de.Addr != ap {
			t.Errorf("%s: %v; want refused by %q", tc.addr, err, tc.rule)
		}
	}
}

func TestPolicyConfigured(t *testing.T) {
	p, err := NewPolicy(PolicyConfig{
		Allow: []netip.Prefix{
			netip.MustParsePrefix("127.0.0.0/8"),
			netip.MustParsePrefix("0.0.0.0/0"), // cannot open 0.0.0.0/8, multicast, broadcast
			netip.MustParsePrefix("10.0.0.0/8"),
			netip.MustParsePrefix("::ffff:192.168.0.0/112"), // written IPv4-mapped: 192.168.0.0/16
		},
		Deny: []netip.Prefix{
			netip.MustParsePrefix("10.0.0.0/8"), // a tie with Allow: Deny wins
			netip.MustParsePrefix("127.0.0.128/25"),
		},
		Ports:        []PortRange{{22, 22}, {8000, 8999}},
		ConnectPorts: []PortRange{{22, 22}}, // a dial allows both lists
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		addr string
		rule string
	}{
		{"127.0.0.1:8080", ""},
		{"127.0.0.200:8080", "deny 127.0.0.128/25 (configured)"},
		{"10.1.1.1:8080", "deny 10.0.0.0/8 (configured)"},
		{"192.168.3.4:8080", ""},
		{"169.254.169.254:8080", ""}, // allowed by 0.0.0.0/0: the user said so
		{"0.0.0.0:8080", "this network"},
		{"224.0.0.1:8080", "multicast"},
		{"[::1]:8080", "loopback ::1/128"}, // 0.0.0.0/0 is IPv4 only
		{"8.8.8.8:22", ""},
		{"8.8.8.8:443", "port 443 is not among the allowed ports (22, 8000-8999)"},
	} {
		err := p.Check(netip.MustParseAddrPort(tc.addr))
		switch {
		case tc.rule == "" && err != nil:
			t.Errorf("%s refused: %v", tc.addr, err)
		case tc.rule != "" && (err == nil || !strings.Contains(err.Error(), tc.rule)):
			t.Errorf("%s: %v; want refused by %q", tc.addr, err, tc.rule)
		}
	}

	allowlist, err := NewPolicy(PolicyConfig{
		Deny:  []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")},
		Allow: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := allowlist.Check(netip.MustParseAddrPort("203.0.113.5:443")); err != nil {
		t.Errorf("allowlisted address refused: %v", err)
	}
	if err := allowlist.Check(netip.MustParseAddrPort("8.8.8.8:443")); err == nil || !strings.Contains(err.Error(), "deny 0.0.0.0/0") {
		t.Errorf("address outside the allowlist: %v", err)
	}
}

func TestPolicyConfigErrors(t *testing.T) {
	for _, cfg := range []PolicyConfig{
		{Ports: []PortRange{{0, 80}}},
		{Ports: []PortRange{{90, 80}}},
		{Allow: []netip.Prefix{{}}},
		{Deny: []netip.Prefix{{}}},
	} {
		if _, err := NewPolicy(cfg); err == nil {
			t.Errorf("NewPolicy(%+v) accepted", cfg)
		}
	}
	none, err := NewPolicy(PolicyConfig{Ports: []PortRange{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := none.CheckPort(443); err == nil {
		t.Error("an empty port list allowed 443")
	}
}

func TestBuiltinRulesWellFormed(t *testing.T) {
	seen := map[netip.Prefix]bool{}
	for _, r := range BuiltinRules() {
		if r.Prefix != r.Prefix.Masked() || seen[r.Prefix] || r.Name == "" {
			t.Errorf("rule %+v: not masked, duplicate or unnamed", r)
		}
		seen[r.Prefix] = true
		if r.Allow {
			// An allowed block only makes sense nested in a refused one.
			nested := false
			for _, o := range BuiltinRules() {
				if !o.Allow && o.Prefix.Bits() < r.Prefix.Bits() && o.Prefix.Contains(r.Prefix.Addr()) {
					nested = true
				}
			}
			if !nested {
				t.Errorf("allowed rule %+v is not nested in a refused one", r)
			}
		}
	}
}
