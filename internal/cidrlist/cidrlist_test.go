package cidrlist_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/cidrlist"
)

func TestParse(t *testing.T) {
	text := "\ufeff# office and friends\n" +
		"192.0.2.7\n" +
		"  198.51.100.0/24   # a trailing comment\n" +
		"\n" +
		"\t2001:db8::/32\r\n" +
		"::ffff:203.0.113.9\n" +
		"::ffff:203.0.113.0/120\n" +
		"2001:db8::1\n" +
		"192.0.2.7\n" +
		"#\n" +
		"10.0.0.0/8"
	got, err := cidrlist.Parse("list", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{
		netip.MustParsePrefix("192.0.2.7/32"),
		netip.MustParsePrefix("198.51.100.0/24"),
		netip.MustParsePrefix("2001:db8::/32"),
		netip.MustParsePrefix("203.0.113.9/32"),
		netip.MustParsePrefix("203.0.113.0/24"),
		netip.MustParsePrefix("2001:db8::1/128"),
		netip.MustParsePrefix("192.0.2.7/32"),
		netip.MustParsePrefix("10.0.0.0/8"),
	}
	if !slices.Equal(got, want) {
		t.Errorf("Parse:\n got  %v\n want %v", got, want)
	}
}

func TestParseEmpty(t *testing.T) {
	for _, text := range []string{"", "\n\n", "# only a comment\n", "  \t\r\n"} {
		got, err := cidrlist.Parse("list", []byte(text))
		if err != nil || len(got) != 0 {
			t.Errorf("Parse(%q) = %v, %v; want no entry and no error", text, got, err)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, tt := range []struct {
		name, text, want string
	}{
		{"garbage", "10.0.0.0/8\nnot-an-address\n", `deny.txt:2: not an IP address or CIDR (got "not-an-address")`},
		{"octet out of range", "10.0.0.300", `deny.txt:1: not an IP address or CIDR (got "10.0.0.300")`},
		{"bad length", "\n\n10.0.0.0/33 # comment", `deny.txt:3: not an IP address or CIDR (got "10.0.0.0/33")`},
		{"host bits", "10.1.2.3/8", `deny.txt:1: host bits set: write 10.0.0.0/8 for the network or 10.1.2.3/32 for the address (got "10.1.2.3/8")`},
		{"two entries", "10.0.0.1 10.0.0.2", `deny.txt:1: one address or CIDR a line (got "10.0.0.1 10.0.0.2")`},
		{"zone", "fe80::1%eth0", `deny.txt:1: zones are not allowed (got "fe80::1%eth0")`},
		{"hostname", "example.com", `deny.txt:1: not an IP address or CIDR (got "example.com")`},
		{"range", "10.0.0.1-10.0.0.9", `deny.txt:1: not an IP address or CIDR (got "10.0.0.1-10.0.0.9")`},
		{"semicolon comment", "10.0.0.0/8 ; SBL1", `deny.txt:1: not an IP address or CIDR (got "10.0.0.0/8 ; SBL1")`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := cidrlist.Parse("deny.txt", []byte(tt.text))
			if got != nil {
				t.Errorf("Parse returned entries %v with its error", got)
			}
			var pe *cidrlist.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a *ParseError", err)
			}
			if err.Error() != tt.want {
				t.Errorf("error:\n got  %s\n want %s", err, tt.want)
			}
		})
	}
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	if err := os.WriteFile(good, []byte("10.0.0.0/8\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := cidrlist.ReadFile(good); err != nil || len(got) != 1 {
		t.Errorf("ReadFile(good) = %v, %v", got, err)
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("# x\nnope\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := cidrlist.ReadFile(bad); err == nil || err.Error() != bad+`:2: not an IP address or CIDR (got "nope")` {
		t.Errorf("ReadFile(bad) error = %v", err)
	}
	if _, err := cidrlist.ReadFile(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadFile(missing) error = %v, want ErrNotExist", err)
	}
}

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

func TestCheck(t *testing.T) {
	deny := prefixes("127.0.0.0/24", "192.0.2.0/24", "2001:db8::/32", "198.51.100.7/32", "203.0.113.0/24")
	allow := prefixes("127.0.0.3/32", "2001:db8:1::/48", "198.51.100.0/24", "203.0.113.0/24")
	denyOnly := cidrlist.New(deny, nil)
	both := cidrlist.New(deny, allow)
	allowOnly := cidrlist.New(nil, allow)
	for _, tt := range []struct {
		name string
		m    *cidrlist.Matcher
		addr string
		want cidrlist.Verdict
	}{
		{"deny list: inside", denyOnly, "127.0.0.2", cidrlist.Denied},
		{"deny list: outside", denyOnly, "10.0.0.1", cidrlist.Accept},
		{"deny list: mapped", denyOnly, "::ffff:192.0.2.200", cidrlist.Denied},
		{"deny list: v6", denyOnly, "2001:db8:ffff::1", cidrlist.Denied},
		{"deny list: v6 outside", denyOnly, "2001:db9::1", cidrlist.Accept},
		{"deny list: zone ignored", denyOnly, "2001:db8::1%eth0", cidrlist.Denied},
		{"specific allow in denied /24", both, "127.0.0.3", cidrlist.Accept},
		{"rest of denied /24", both, "127.0.0.4", cidrlist.Denied},
		{"specific deny in allowed /24", both, "198.51.100.7", cidrlist.Denied},
		{"rest of allowed /24", both, "198.51.100.8", cidrlist.Accept},
		{"tie goes to deny", both, "203.0.113.1", cidrlist.Denied},
		{"v6 allow /48 inside deny /32", both, "2001:db8:1::5", cidrlist.Accept},
		{"matches neither with allow list", both, "10.0.0.1", cidrlist.NotAllowed},
		{"allow only: inside", allowOnly, "127.0.0.3", cidrlist.Accept},
		{"allow only: outside", allowOnly, "127.0.0.2", cidrlist.NotAllowed},
		{"allow only: v6 outside", allowOnly, "::1", cidrlist.NotAllowed},
		{"nil matcher", nil, "127.0.0.2", cidrlist.Accept},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.m.Check(netip.MustParseAddr(tt.addr)); got != tt.want {
				t.Errorf("Check(%s) = %v, want %v", tt.addr, got, tt.want)
			}
		})
	}
	if got := allowOnly.Check(netip.Addr{}); got != cidrlist.NotAllowed {
		t.Errorf("allow list: Check(invalid) = %v, want not_allowed", got)
	}
	if got := denyOnly.Check(netip.Addr{}); got != cidrlist.Accept {
		t.Errorf("deny list: Check(invalid) = %v, want accept", got)
	}
	if cidrlist.New(nil, nil) != nil {
		t.Errorf("New(nil, nil) is not nil")
	}
	if got := both.Len(); got != 8 {
		t.Errorf("Len = %d, want 8 (203.0.113.0/24 in both lists counted once)", got)
	}
}

func TestCheckMappedEntries(t *testing.T) {
	m := cidrlist.New(prefixes("::ffff:10.0.0.0/104", "::/0"), nil)
	if got := m.Check(netip.MustParseAddr("10.9.9.9")); got != cidrlist.Denied {
		t.Errorf("mapped entry: Check(10.9.9.9) = %v, want deny_list", got)
	}
	if got := m.Check(netip.MustParseAddr("11.0.0.1")); got != cidrlist.Accept {
		t.Errorf("::/0 holds IPv6 only: Check(11.0.0.1) = %v, want accept", got)
	}
	if got := m.Check(netip.MustParseAddr("2001:db8::1")); got != cidrlist.Denied {
		t.Errorf("Check(2001:db8::1) = %v, want deny_list", got)
	}
}

// oracle is the obvious implementation: every entry scanned, the longest
// holding a decides, deny on a tie.
func oracle(deny, allow []netip.Prefix, a netip.Addr) cidrlist.Verdict {
	a = a.Unmap()
	best, verdict := -1, cidrlist.Accept
	scan := func(ps []netip.Prefix, v cidrlist.Verdict) {
		for _, p := range ps {
			p = cidrlist.Unmap(p)
			if p.Contains(a) && (p.Bits() > best || p.Bits() == best && v == cidrlist.Denied) {
				best, verdict = p.Bits(), v
			}
		}
	}
	scan(deny, cidrlist.Denied)
	scan(allow, cidrlist.Accept)
	if best < 0 && len(allow) > 0 {
		return cidrlist.NotAllowed
	}
	return verdict
}

// randomPrefix draws prefixes from a small address space, so that they
// nest, repeat and collide often.
func randomPrefix(r *rand.Rand) netip.Prefix {
	if r.IntN(2) == 0 {
		a := netip.AddrFrom4([4]byte{10, byte(r.IntN(4)), byte(r.IntN(4)), byte(r.IntN(8))})
		return netip.PrefixFrom(a, 8+r.IntN(25)).Masked()
	}
	var b [16]byte
	b[0], b[1], b[7], b[15] = 0x20, 0x01, byte(r.IntN(4)), byte(r.IntN(4))
	if r.IntN(8) == 0 { // now and then a mapped entry
		b = [16]byte{10: 0xff, 11: 0xff, 12: 10, 13: byte(r.IntN(4)), 14: byte(r.IntN(4)), 15: byte(r.IntN(8))}
		return netip.PrefixFrom(netip.AddrFrom16(b), 96+r.IntN(33)).Masked()
	}
	return netip.PrefixFrom(netip.AddrFrom16(b), 16+r.IntN(113)).Masked()
}

func TestCheckAgainstOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 300 {
		var deny, allow []netip.Prefix
		for range r.IntN(12) {
			deny = append(deny, randomPrefix(r))
		}
		for range r.IntN(12) {
			allow = append(allow, randomPrefix(r))
		}
		m := cidrlist.New(deny, allow)
		for range 50 {
			a := randomPrefix(r).Addr()
			if got, want := m.Check(a), oracle(deny, allow, a); got != want {
				t.Fatalf("round %d: deny %v allow %v: Check(%s) = %v, oracle says %v", round, deny, allow, a, got, want)
			}
		}
	}
}

func TestCheckDoesNotAllocate(t *testing.T) {
	m := bigMatcher(10000)
	a4, a6 := netip.MustParseAddr("203.0.113.77"), netip.MustParseAddr("2001:db8:77::1")
	if n := testing.AllocsPerRun(100, func() { m.Check(a4); m.Check(a6) }); n != 0 {
		t.Errorf("Check allocates %v times per call", n)
	}
}

// bigMatcher builds a deny list of n entries like a threat feed: mostly
// IPv4 /32 and /24, some IPv6 /48 and /64.
func bigMatcher(n int) *cidrlist.Matcher {
	r := rand.New(rand.NewPCG(3, 4))
	deny := make([]netip.Prefix, 0, n)
	for range n {
		switch r.IntN(4) {
		case 0, 1:
			deny = append(deny, netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(1 + r.IntN(223)), byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32())}), 32))
		case 2:
			deny = append(deny, netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(1 + r.IntN(223)), byte(r.Uint32()), byte(r.Uint32()), 0}), 24))
		default:
			var b [16]byte
			b[0], b[1] = 0x2a, byte(r.Uint32())
			for i := 2; i < 8; i++ {
				b[i] = byte(r.Uint32())
			}
			deny = append(deny, netip.PrefixFrom(netip.AddrFrom16(b), 48+16*r.IntN(2)).Masked())
		}
	}
	return cidrlist.New(deny, nil)
}

// BenchmarkCheck measures a lookup in a 10k-entry deny list against no
// list (a nil Matcher), for an IPv4 and an IPv6 client that match nothing:
// the common case at accept, and the one that searches every level.
func BenchmarkCheck(b *testing.B) {
	clients := map[string]netip.Addr{"v4": netip.MustParseAddr("203.0.113.77"), "v6": netip.MustParseAddr("2001:db8:77::1")}
	for _, size := range []int{0, 10000} {
		var m *cidrlist.Matcher
		if size > 0 {
			m = bigMatcher(size)
		}
		for _, fam := range []string{"v4", "v6"} {
			a := clients[fam]
			b.Run(fmt.Sprintf("entries=%d/%s", size, fam), func(b *testing.B) {
				b.ReportAllocs()
				var v cidrlist.Verdict
				for b.Loop() {
					v = m.Check(a)
				}
				if v != cidrlist.Accept {
					b.Fatalf("Check = %v", v)
				}
			})
		}
	}
}
