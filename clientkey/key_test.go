package clientkey_test

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/clientkey"
)

func TestParseKey(t *testing.T) {
	tests := []struct {
		name, in   string
		wantPrefix string // "" when an error is expected
		wantString string
	}{
		{"ipv4 bare", "192.0.2.1", "192.0.2.1/32", "192.0.2.1"},
		{"ipv4 full prefix", "192.0.2.1/32", "192.0.2.1/32", "192.0.2.1"},
		{"ipv4 /24", "192.0.2.0/24", "192.0.2.0/24", "192.0.2.0/24"},
		{"ipv4 /1", "128.0.0.0/1", "128.0.0.0/1", "128.0.0.0/1"},
		{"ipv6 /64", "2001:db8:1:2::/64", "2001:db8:1:2::/64", "2001:db8:1:2::/64"},
		{"ipv6 bare", "2001:db8::1", "2001:db8::1/128", "2001:db8::1"},
		{"ipv6 full prefix", "2001:db8::1/128", "2001:db8::1/128", "2001:db8::1"},
		{"ipv6 non-canonical text", "2001:0DB8:0:0::/64", "2001:db8::/64", "2001:db8::/64"},
		{"empty", "", "", ""},
		{"invalid word", "invalid", "", ""},
		{"host bits set", "192.0.2.1/24", "", ""},
		{"ipv6 host bits set", "2001:db8::1/64", "", ""},
		{"zone", "fe80::1%eth0", "", ""},
		{"zone in prefix", "fe80::%eth0/64", "", ""},
		{"mapped", "::ffff:192.0.2.1", "", ""},
		{"mapped prefix", "::ffff:192.0.2.0/120", "", ""},
		{"zero length v4", "0.0.0.0/0", "", ""},
		{"zero length v6", "::/0", "", ""},
		{"too long", "192.0.2.1/33", "", ""},
		{"port", "192.0.2.1:80", "", ""},
		{"brackets", "[2001:db8::1]", "", ""},
		{"space", " 192.0.2.1", "", ""},
		{"host name", "example.com", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := clientkey.ParseKey(tt.in)
			if tt.wantPrefix == "" {
				if err == nil {
					t.Fatalf("ParseKey(%q) = %v, want error", tt.in, k)
				}
				if !strings.HasPrefix(err.Error(), "clientkey: parse key ") || !strings.Contains(err.Error(), tt.in) {
					t.Errorf("error %q does not name the package and the input", err)
				}
				if k.IsValid() {
					t.Errorf("failed ParseKey returned valid key %v", k)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseKey(%q): %v", tt.in, err)
			}
			if got := k.Prefix(); got != netip.MustParsePrefix(tt.wantPrefix) {
				t.Errorf("Prefix() = %v, want %v", got, tt.wantPrefix)
			}
			if got := k.String(); got != tt.wantString {
				t.Errorf("String() = %q, want %q", got, tt.wantString)
			}
			again, err := clientkey.ParseKey(k.String())
			if err != nil || again != k {
				t.Errorf("ParseKey(String()) = %v, %v; want %v", again, err, k)
			}
		})
	}
}

func TestKeyZero(t *testing.T) {
	var k clientkey.Key
	if k.IsValid() {
		t.Error("zero Key is valid")
	}
	if k.Prefix().IsValid() {
		t.Errorf("zero Key has prefix %v", k.Prefix())
	}
	if got := k.String(); got != "invalid" {
		t.Errorf("String() = %q, want \"invalid\"", got)
	}
	if b, err := k.MarshalText(); err != nil || len(b) != 0 {
		t.Errorf("MarshalText() = %q, %v; want empty", b, err)
	}
	if _, err := clientkey.ParseKey(k.String()); err == nil {
		t.Error("ParseKey accepted the zero Key's String")
	}
}

func TestKeyText(t *testing.T) {
	for _, s := range []string{"", "192.0.2.1", "198.51.100.0/24", "2001:db8:1:2::/64", "2001:db8::1"} {
		t.Run(s, func(t *testing.T) {
			var k clientkey.Key
			if err := k.UnmarshalText([]byte(s)); err != nil {
				t.Fatalf("UnmarshalText(%q): %v", s, err)
			}
			b, err := k.MarshalText()
			if err != nil || string(b) != s {
				t.Errorf("MarshalText() = %q, %v; want %q", b, err, s)
			}
			b, err = k.AppendText([]byte("key="))
			if err != nil || string(b) != "key="+s {
				t.Errorf("AppendText = %q, %v; want %q", b, err, "key="+s)
			}
		})
	}
}

func TestKeyUnmarshalTextErrorLeavesKey(t *testing.T) {
	k := clientkey.FromAddr(netip.MustParseAddr("192.0.2.1"))
	before := k
	if err := k.UnmarshalText([]byte("192.0.2.1/24")); err == nil {
		t.Fatal("UnmarshalText accepted host bits")
	}
	if k != before {
		t.Errorf("failed UnmarshalText changed the key to %v", k)
	}
}

func TestKeyJSON(t *testing.T) {
	in := map[string]clientkey.Key{
		"a": clientkey.FromAddr(netip.MustParseAddr("2001:db8::1")),
		"b": {},
	}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"a":"2001:db8::/64","b":""}`; string(b) != want {
		t.Errorf("json = %s, want %s", b, want)
	}
	var out map[string]clientkey.Key
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out["a"] != in["a"] || out["b"] != in["b"] {
		t.Errorf("json round trip = %v, want %v", out, in)
	}
}

func TestKeyComparable(t *testing.T) {
	counts := map[clientkey.Key]int{}
	for _, s := range []string{"2001:db8::1", "2001:db8::2", "2001:db8:0:1::1", "192.0.2.1", "::ffff:192.0.2.1"} {
		counts[clientkey.FromAddr(netip.MustParseAddr(s))]++
	}
	want := map[string]int{"2001:db8::/64": 2, "2001:db8:0:1::/64": 1, "192.0.2.1": 2}
	if len(counts) != len(want) {
		t.Fatalf("got %d keys %v, want %d", len(counts), counts, len(want))
	}
	for s, n := range want {
		k, err := clientkey.ParseKey(s)
		if err != nil {
			t.Fatal(err)
		}
		if counts[k] != n {
			t.Errorf("count[%v] = %d, want %d", k, counts[k], n)
		}
	}
}
