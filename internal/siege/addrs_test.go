package siege

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestParseAddrList(t *testing.T) {
	mk := func(ss ...string) []netip.Addr {
		out := make([]netip.Addr, len(ss))
		for i, s := range ss {
			out[i] = netip.MustParseAddr(s)
		}
		return out
	}
	tests := []struct {
		name string
		in   string
		want []netip.Addr // nil means an error
	}{
		{name: "one", in: "127.0.0.3", want: mk("127.0.0.3")},
		{name: "list with spaces", in: "127.0.0.3, 127.0.0.9 ,10.0.0.1", want: mk("127.0.0.3", "127.0.0.9", "10.0.0.1")},
		{name: "range", in: "127.0.0.254-127.0.1.1", want: mk("127.0.0.254", "127.0.0.255", "127.0.1.0", "127.0.1.1")},
		{name: "range of one", in: "127.0.0.5-127.0.0.5", want: mk("127.0.0.5")},
		{name: "IPv6 range", in: "::1-::3", want: mk("::1", "::2", "::3")},
		{name: "mapped IPv4 unmapped", in: "::ffff:127.0.0.3", want: mk("127.0.0.3")},
		{name: "empty", in: ""},
		{name: "blank", in: "  "},
		{name: "empty item", in: "127.0.0.3,,127.0.0.4"},
		{name: "not an address", in: "localhost"},
		{name: "backwards range", in: "127.0.0.9-127.0.0.3"},
		{name: "mixed range", in: "127.0.0.1-::1"},
		{name: "open range", in: "127.0.0.1-"},
		{name: "too long", in: "10.0.0.0-10.1.0.0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseAddrList(tc.in)
			if tc.want == nil {
				if !errors.Is(err, ErrInvalidConfig) {
					t.Errorf("ParseAddrList(%q) = %v, %v; want ErrInvalidConfig", tc.in, got, err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("ParseAddrList(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
}

// FuzzParseAddrList checks that any input gives a clear error or a bounded
// list that formats and parses back to itself.
func FuzzParseAddrList(f *testing.F) {
	for _, s := range []string{"127.0.0.3", "127.0.0.3-127.0.0.18,10.0.0.1", "::1-::ff", "1.2.3.4-", "-", ",", "fe80::1%eth0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseAddrList(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("error %v does not wrap ErrInvalidConfig", err)
			}
			return
		}
		if len(got) == 0 || len(got) > MaxLoops {
			t.Fatalf("%d addresses from %q", len(got), s)
		}
		parts := make([]string, len(got))
		for i, a := range got {
			if !a.IsValid() || a.Is4In6() {
				t.Fatalf("address %v from %q is invalid or still mapped", a, s)
			}
			parts[i] = a.String()
		}
		again, err := ParseAddrList(strings.Join(parts, ","))
		if err != nil || !slices.Equal(again, got) {
			t.Fatalf("round trip of %q: %v, %v", s, again, err)
		}
	})
}
