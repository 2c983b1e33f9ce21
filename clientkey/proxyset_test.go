package clientkey_test

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/clientkey"
)

func TestParseProxySet(t *testing.T) {
	tests := []struct {
		name    string
		entries []string
		want    string // String() of the set
	}{
		{"empty list", nil, ""},
		{"cidr and addresses", []string{"10.0.0.0/8", "2001:db8::/32", "192.0.2.7", "::1"}, "10.0.0.0/8, 192.0.2.7/32, ::1/128, 2001:db8::/32"},
		{"sorted per family", []string{"2001:db8::/32", "::1", "198.51.100.0/24", "10.0.0.0/8"}, "10.0.0.0/8, 198.51.100.0/24, ::1/128, 2001:db8::/32"},
		{"mapped address unmapped", []string{"::ffff:192.0.2.7"}, "192.0.2.7/32"},
		{"mapped prefix unmapped", []string{"::ffff:10.0.0.0/104"}, "10.0.0.0/8"},
		{"covered prefixes dropped", []string{"10.1.0.0/16", "10.0.0.0/8", "10.2.3.4", "11.0.0.0/8", "10.0.0.0/8"}, "10.0.0.0/8, 11.0.0.0/8"},
		{"covered after nested", []string{"8.0.0.0/6", "10.0.0.0/8", "10.1.0.0/16", "12.0.0.1"}, "8.0.0.0/6, 12.0.0.1/32"},
		{"whitespace trimmed", []string{" 10.0.0.0/8\t", "\t::1 "}, "10.0.0.0/8, ::1/128"},
		{"everything", []string{"0.0.0.0/0", "::/0"}, "0.0.0.0/0, ::/0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := clientkey.ParseProxySet(tt.entries)
			if err != nil {
				t.Fatal(err)
			}
			if s == nil {
				t.Fatal("ParseProxySet returned a nil set")
			}
			if got := s.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
			if n := len(s.Prefixes()); s.Len() != n {
				t.Errorf("Len() = %d, but %d prefixes", s.Len(), n)
			}
		})
	}
}

func TestParseProxySetErrors(t *testing.T) {
	tests := []struct {
		name    string
		entries []string
		index   int
		reason  string
	}{
		{"empty entry", []string{"10.0.0.0/8", ""}, 1, "empty entry"},
		{"blank entry", []string{"  "}, 0, "empty entry"},
		{"host bits", []string{"::1", "10.1.2.3/8"}, 1, "did you mean 10.0.0.0/8 or 10.1.2.3/32"},
		{"ipv6 host bits", []string{"2001:db8::1/32"}, 0, "host bits set"},
		{"zone", []string{"fe80::1%eth0"}, 0, "zone"},
		{"zone in prefix", []string{"fe80::%eth0/64"}, 0, "ParsePrefix"},
		{"host name", []string{"10.0.0.1", "10.0.0.2", "proxy.example"}, 2, "ParseAddr"},
		{"bad length", []string{"10.0.0.0/33"}, 0, "prefix length out of range"},
		{"port", []string{"10.0.0.1:80"}, 0, "ParseAddr"},
		{"comma list in one entry", []string{"10.0.0.1,10.0.0.2"}, 0, "ParseAddr"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := clientkey.ParseProxySet(tt.entries)
			if err == nil {
				t.Fatalf("ParseProxySet(%q) = %v, want error", tt.entries, s)
			}
			if s != nil {
				t.Errorf("failed ParseProxySet returned a set %v", s)
			}
			prefix := fmt.Sprintf("clientkey: trusted proxy %d %q: ", tt.index, tt.entries[tt.index])
			if !strings.HasPrefix(err.Error(), prefix) || !strings.Contains(err.Error(), tt.reason) {
				t.Errorf("error %q, want prefix %q and reason %q", err, prefix, tt.reason)
			}
		})
	}
}

func TestMustParseProxySetPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("MustParseProxySet did not panic on a bad entry")
		}
	}()
	clientkey.MustParseProxySet("10.0.0.0/8", "nonsense")
}

func TestProxySetContains(t *testing.T) {
	s := clientkey.MustParseProxySet("10.0.0.0/8", "192.0.2.7", "2001:db8::/32", "::1", "fe80::/10")
	tests := []struct {
		addr string // "" for the zero Addr
		want bool
	}{
		{"10.0.0.1", true},
		{"10.255.255.255", true},
		{"11.0.0.0", false},
		{"192.0.2.7", true},
		{"192.0.2.8", false},
		{"::ffff:10.1.2.3", true},
		{"::ffff:192.0.2.7", true},
		{"::ffff:192.0.2.8", false},
		{"::10.1.2.3", false},
		{"2001:db8:ffff::1", true},
		{"2001:db9::1", false},
		{"::1", true},
		{"::2", false},
		{"fe80::1%eth0", true},
		{"2001:db8::1%eth0", true},
		{"", false},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			var a netip.Addr
			if tt.addr != "" {
				a = netip.MustParseAddr(tt.addr)
			}
			if got := s.Contains(a); got != tt.want {
				t.Errorf("Contains(%v) = %v, want %v", a, got, tt.want)
			}
		})
	}
}

func TestProxySetMappedEntryMatchesBothForms(t *testing.T) {
	s := clientkey.MustParseProxySet("::ffff:192.0.2.0/120")
	for _, a := range []string{"192.0.2.1", "::ffff:192.0.2.1"} {
		if !s.Contains(netip.MustParseAddr(a)) {
			t.Errorf("set %v does not contain %v", s, a)
		}
	}
}

func TestNilAndEmptyProxySet(t *testing.T) {
	empty, err := clientkey.ParseProxySet([]string{})
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*clientkey.ProxySet{"nil": nil, "empty": empty} {
		t.Run(name, func(t *testing.T) {
			if s.Contains(netip.MustParseAddr("127.0.0.1")) {
				t.Error("Contains reported true")
			}
			if s.Len() != 0 || s.Prefixes() != nil || s.String() != "" {
				t.Errorf("Len %d, Prefixes %v, String %q; want 0, nil, \"\"", s.Len(), s.Prefixes(), s.String())
			}
		})
	}
}

func TestProxySetPrefixesIsACopy(t *testing.T) {
	s := clientkey.MustParseProxySet("10.0.0.0/8", "::1")
	ps := s.Prefixes()
	ps[0] = netip.MustParsePrefix("0.0.0.0/0")
	if s.Contains(netip.MustParseAddr("192.0.2.1")) {
		t.Error("changing the slice from Prefixes changed the set")
	}
	if got := s.Prefixes(); !slices.Equal(got, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}) {
		t.Errorf("Prefixes() = %v", got)
	}
}

func TestProxySetContainsAllocatesNothing(t *testing.T) {
	s := clientkey.MustParseProxySet("10.0.0.0/8", "192.0.2.0/24", "2001:db8::/32", "fe80::/10")
	var sink bool
	for _, a := range []string{"192.0.2.9", "::ffff:10.0.0.1", "2001:db8::1", "fe80::1%eth0", "203.0.113.1"} {
		addr := netip.MustParseAddr(a)
		if n := testing.AllocsPerRun(100, func() { sink = s.Contains(addr) }); n != 0 {
			t.Errorf("Contains(%v): %v allocations, want 0", addr, n)
		}
	}
	_ = sink
}
