package clientkey_test

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/clientkey"
)

// The checked-in corpus is under testdata/fuzz/<target>/.

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"192.0.2.1", "192.0.2.0/24", "2001:db8::/64", "2001:db8::1", "::ffff:1.2.3.4", "fe80::1%eth0", "1.2.3.4/33", "::/0", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := clientkey.ParseKey(s)
		if err != nil {
			if k.IsValid() || !strings.HasPrefix(err.Error(), "clientkey: ") {
				t.Fatalf("ParseKey(%q) = %v, %v", s, k, err)
			}
			return
		}
		if !k.IsValid() {
			t.Fatalf("ParseKey(%q) succeeded with the zero Key", s)
		}
		again, err := clientkey.ParseKey(k.String())
		if err != nil || again != k {
			t.Fatalf("ParseKey(%q).String() = %q does not round-trip: %v, %v", s, k.String(), again, err)
		}
		var fromText clientkey.Key
		b, _ := k.MarshalText()
		if err := fromText.UnmarshalText(b); err != nil || fromText != k || string(b) != k.String() {
			t.Fatalf("text round trip of %v: %q, %v, %v", k, b, fromText, err)
		}
		// A parsed key is one a Keyer produces from its own address.
		p := k.Prefix()
		v4, v6 := 0, p.Bits()
		if p.Addr().Is4() {
			v4, v6 = p.Bits(), 0
		}
		keyer, err := clientkey.NewKeyer(v4, v6)
		if err != nil {
			t.Fatalf("key %v has a prefix length no Keyer takes: %v", k, err)
		}
		if got := keyer.FromAddr(p.Addr()); got != k {
			t.Fatalf("Keyer(%d, %d).FromAddr(%v) = %v, want %v", v4, v6, p.Addr(), got, k)
		}
	})
}

// ci:fuzztime 100000x: it reads forwarding headers a client sends.
func FuzzXForwardedFor(f *testing.F) {
	addWalkSeeds(f, xffCases)
	f.Fuzz(func(t *testing.T, header, peer string) {
		checkWalk(t, clientkey.HeaderXForwardedFor, "X-Forwarded-For", header, peer)
	})
}

// ci:fuzztime 100000x: it reads forwarding headers a client sends.
func FuzzForwarded(f *testing.F) {
	addWalkSeeds(f, forwardedCases)
	f.Fuzz(func(t *testing.T, header, peer string) {
		checkWalk(t, clientkey.HeaderForwarded, "Forwarded", header, peer)
	})
}

// addWalkSeeds adds the walk tables, their field lines joined by '\n'.
func addWalkSeeds(f *testing.F, cases []walkCase) {
	for _, c := range cases {
		f.Add(strings.Join(c.lines, "\n"), c.peer)
	}
}

// checkWalk resolves the client of a request from peer whose header named
// name has the field lines of header (separated by '\n') and checks the
// invariants of the walk.
func checkWalk(t *testing.T, which clientkey.Header, name, header, peerText string) {
	peer, err := netip.ParseAddr(peerText)
	if err != nil {
		peer = netip.MustParseAddr("10.0.0.1")
	}
	lines := strings.Split(header, "\n")
	h := http.Header{name: lines}
	r := &clientkey.Resolver{Trusted: testTrusted, Header: which}

	got := r.ClientAddrFrom(peer, h)

	if !testTrusted.Contains(peer) && got != peer {
		t.Fatalf("untrusted peer %v, header %q: client %v, want the peer", peer, lines, got)
	}
	if got != peer && !appearsIn(got, lines, which) {
		t.Fatalf("peer %v, header %q: client %v is neither the peer nor a hop of the header", peer, lines, got)
	}
	if want := refClientAddr(peer, testTrusted, lines, which); got != want {
		t.Fatalf("peer %v, header %q: client %v, reference walk says %v", peer, lines, got, want)
	}
	req := &http.Request{RemoteAddr: netip.AddrPortFrom(peer, 1234).String(), Header: h}
	if viaReq := r.ClientAddr(req); viaReq != got {
		t.Fatalf("ClientAddr = %v, ClientAddrFrom = %v", viaReq, got)
	}
}

// appearsIn reports whether a is the address of some element of lines, as
// the reference splitter finds them.
func appearsIn(a netip.Addr, lines []string, which clientkey.Header) bool {
	for _, line := range lines {
		for _, e := range refSplit(line, which == clientkey.HeaderForwarded) {
			var got netip.Addr
			var err error
			if which == clientkey.HeaderForwarded {
				got, err = clientkey.ParseForwardedElement(e)
			} else {
				got, err = clientkey.ParseXForwardedForHop(e)
			}
			if err == nil && got == a {
				return true
			}
		}
	}
	return false
}
