package clientkey_test

import (
	"net/netip"
	"testing"

	"github.com/seed-a07d1050/portcullis/clientkey"
)

func TestHash(t *testing.T) {
	k1 := clientkey.FromAddr(netip.MustParseAddr("2001:db8:1:2::1"))
	k2 := clientkey.FromAddr(netip.MustParseAddr("2001:db8:1:2::ffff"))
	k3 := clientkey.FromAddr(netip.MustParseAddr("2001:db8:1:3::1"))
	k4 := clientkey.FromAddr(netip.MustParseAddr("192.0.2.1"))
	if k1 != k2 || k1.Hash() != k2.Hash() {
		t.Fatal("equal keys must hash equally")
	}
	if k1.Hash() == k3.Hash() || k1.Hash() == k4.Hash() {
		t.Fatal("distinct keys hashed equally (possible, but not for these)")
	}
	_ = clientkey.Key{}.Hash() // the zero Key hashes without panicking
	if n := testing.AllocsPerRun(100, func() { _ = k4.Hash() }); n != 0 {
		t.Fatalf("Hash allocates %v times", n)
	}
}
