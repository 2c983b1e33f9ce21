package clientkey_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/clientkey"
)

// testTrusted is the trusted set of the walk tables.
var testTrusted = clientkey.MustParseProxySet("10.0.0.0/8", "2001:db8:ffff::/48", "192.0.2.7")

type walkCase struct {
	name  string
	peer  string   // "" for the zero Addr
	lines []string // field lines of the header, in order; nil: absent
	want  string   // "" for the zero Addr
}

var xffCases = []walkCase{
	{"untrusted peer spoofing", "203.0.113.5", []string{"198.51.100.1"}, "203.0.113.5"},
	{"untrusted peer spoofing trusted hops", "203.0.113.5", []string{"10.0.0.9, 192.0.2.7"}, "203.0.113.5"},
	{"trusted peer one hop", "10.0.0.1", []string{"198.51.100.1"}, "198.51.100.1"},
	{"client spoofs the left part", "10.0.0.1", []string{"6.6.6.6, 198.51.100.1"}, "198.51.100.1"},
	{"several trusted hops", "10.0.0.1", []string{"6.6.6.6, 198.51.100.1, 10.0.0.2, 192.0.2.7"}, "198.51.100.1"},
	{"all trusted gives left-most", "10.0.0.1", []string{"10.0.0.3, 192.0.2.7, 10.0.0.2"}, "10.0.0.3"},
	{"no header gives peer", "10.0.0.1", nil, "10.0.0.1"},
	{"empty header gives peer", "10.0.0.1", []string{""}, "10.0.0.1"},
	{"only empty elements give peer", "10.0.0.1", []string{" , ,"}, "10.0.0.1"},
	{"empty elements skipped", "10.0.0.1", []string{"198.51.100.1, , 10.0.0.2,"}, "198.51.100.1"},
	{"malformed in walked part", "10.0.0.1", []string{"198.51.100.1, garbage, 10.0.0.2"}, "10.0.0.1"},
	{"malformed client hop", "10.0.0.1", []string{"10.0.0.5, garbage"}, "10.0.0.1"},
	{"malformed left of client ignored", "10.0.0.1", []string{"garbage, 198.51.100.1, 10.0.0.2"}, "198.51.100.1"},
	{"unknown in walked part", "10.0.0.1", []string{"198.51.100.1, unknown"}, "10.0.0.1"},
	{"zone in walked part", "10.0.0.1", []string{"fe80::1%eth0"}, "10.0.0.1"},
	{"ipv4 with port", "10.0.0.1", []string{"198.51.100.1:5555, 10.0.0.2:443"}, "198.51.100.1"},
	{"ipv6 hops", "10.0.0.1", []string{"2001:db8:1::9, [2001:db8:ffff::1]:443, 2001:db8:ffff::2"}, "2001:db8:1::9"},
	{"ipv6 bracketed client", "10.0.0.1", []string{"[2001:db8:1::9]:1234"}, "2001:db8:1::9"},
	{"trusted ipv6 peer", "2001:db8:ffff::1", []string{"198.51.100.1"}, "198.51.100.1"},
	{"untrusted ipv6 peer", "2001:db8:1::1", []string{"198.51.100.1"}, "2001:db8:1::1"},
	{"mapped trusted peer", "::ffff:10.0.0.1", []string{"198.51.100.1"}, "198.51.100.1"},
	{"mapped trusted hop skipped", "10.0.0.1", []string{"198.51.100.1, ::ffff:10.0.0.2"}, "198.51.100.1"},
	{"mapped client returned as written", "10.0.0.1", []string{"::ffff:198.51.100.1"}, "::ffff:198.51.100.1"},
	{"zoned trusted peer", "fe80::1%eth0", []string{"198.51.100.1"}, "fe80::1%eth0"},
	{"multiple lines, client in first", "10.0.0.1", []string{"198.51.100.1, 10.0.0.9", "10.0.0.8"}, "198.51.100.1"},
	{"multiple lines, client in last", "10.0.0.1", []string{"6.6.6.6", "198.51.100.1, 10.0.0.8"}, "198.51.100.1"},
	{"multiple lines all trusted", "10.0.0.1", []string{"10.0.0.3", "10.0.0.2"}, "10.0.0.3"},
	{"multiple lines, malformed first line left of client", "10.0.0.1", []string{"garbage", "198.51.100.1"}, "198.51.100.1"},
	{"multiple lines, malformed last line", "10.0.0.1", []string{"198.51.100.1", "garbage"}, "10.0.0.1"},
	{"multiple lines, empty lines", "10.0.0.1", []string{"198.51.100.1", "", "10.0.0.2"}, "198.51.100.1"},
	{"invalid peer", "", []string{"198.51.100.1"}, ""},
}

var forwardedCases = []walkCase{
	{"untrusted peer spoofing", "203.0.113.5", []string{"for=198.51.100.1"}, "203.0.113.5"},
	{"rfc example", "10.0.0.1", []string{"for=192.0.2.43, for=198.51.100.17"}, "198.51.100.17"},
	{"trusted hops with params", "10.0.0.1", []string{"for=198.51.100.17;proto=https, for=10.0.0.2;by=10.0.0.1"}, "198.51.100.17"},
	{"all trusted", "10.0.0.1", []string{"for=10.0.0.3, for=10.0.0.2"}, "10.0.0.3"},
	{"ipv6 quoted with port", "10.0.0.1", []string{`for="[2001:db8:1::1]:4711", for="[2001:db8:ffff::2]"`}, "2001:db8:1::1"},
	{"case-insensitive names", "10.0.0.1", []string{"FOR=198.51.100.1, For=10.0.0.2"}, "198.51.100.1"},
	{"quoted ipv4", "10.0.0.1", []string{`for="198.51.100.1"`}, "198.51.100.1"},
	{"escaped node", "10.0.0.1", []string{`for="198.51.100.\1"`}, "198.51.100.1"},
	{"comma inside quotes is not a separator", "10.0.0.1", []string{`host="a, b";for=203.0.113.1, for=198.51.100.1;host="c,d", for=10.0.0.2`}, "198.51.100.1"},
	{"obfuscated client", "10.0.0.1", []string{"for=_hidden, for=10.0.0.2"}, "10.0.0.1"},
	{"unknown client", "10.0.0.1", []string{"for=unknown"}, "10.0.0.1"},
	{"obfuscated left of client", "10.0.0.1", []string{"for=_hidden, for=198.51.100.1, for=10.0.0.2"}, "198.51.100.1"},
	{"element without for", "10.0.0.1", []string{"for=198.51.100.1, proto=https"}, "10.0.0.1"},
	{"unquoted ipv6 is malformed", "10.0.0.1", []string{"for=[2001:db8:1::1]"}, "10.0.0.1"},
	{"unquoted port is malformed", "10.0.0.1", []string{"for=198.51.100.1:80"}, "10.0.0.1"},
	{"duplicate for", "10.0.0.1", []string{"for=198.51.100.1;for=10.0.0.2"}, "10.0.0.1"},
	{"unterminated quote swallows its line", "10.0.0.1", []string{`for="x, for=198.51.100.1`}, "10.0.0.1"},
	{"unterminated quote on an earlier line", "10.0.0.1", []string{`for="x`, "for=198.51.100.1, for=10.0.0.2"}, "198.51.100.1"},
	{"multiple lines", "10.0.0.1", []string{"for=6.6.6.6, for=198.51.100.1", "for=10.0.0.2", "for=10.0.0.3"}, "198.51.100.1"},
	{"empty elements", "10.0.0.1", []string{",for=198.51.100.1,, for=10.0.0.2 ,"}, "198.51.100.1"},
	{"no header", "10.0.0.1", nil, "10.0.0.1"},
}

func TestResolverXForwardedFor(t *testing.T) {
	runWalkCases(t, clientkey.HeaderXForwardedFor, "X-Forwarded-For", xffCases)
}

func TestResolverForwarded(t *testing.T) {
	runWalkCases(t, clientkey.HeaderForwarded, "Forwarded", forwardedCases)
}

func runWalkCases(t *testing.T, which clientkey.Header, name string, cases []walkCase) {
	r := &clientkey.Resolver{Trusted: testTrusted, Header: which}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			peer, want := optAddr(tt.peer), optAddr(tt.want)
			h := http.Header{}
			for _, line := range tt.lines {
				h.Add(name, line)
			}
			if got := r.ClientAddrFrom(peer, h); got != want {
				t.Errorf("ClientAddrFrom(%v, %q) = %v, want %v", peer, tt.lines, got, want)
			}
			if got := r.ClientAddrFromLines(peer, tt.lines); got != want {
				t.Errorf("ClientAddrFromLines(%v, %q) = %v, want %v", peer, tt.lines, got, want)
			}
			if got := refClientAddr(peer, testTrusted, tt.lines, which); got != want {
				t.Errorf("reference walk = %v, want %v (the table or the reference is wrong)", got, want)
			}
		})
	}
}

func optAddr(s string) netip.Addr {
	if s == "" {
		return netip.Addr{}
	}
	return netip.MustParseAddr(s)
}

func TestResolverIgnoresHeaders(t *testing.T) {
	peer := netip.MustParseAddr("10.0.0.1")
	h := http.Header{"X-Forwarded-For": {"198.51.100.1"}, "Forwarded": {"for=198.51.100.2"}}
	tests := []struct {
		name string
		r    *clientkey.Resolver
		want string
	}{
		{"nil resolver", nil, "10.0.0.1"},
		{"zero resolver", &clientkey.Resolver{}, "10.0.0.1"},
		{"HeaderNone", &clientkey.Resolver{Trusted: testTrusted}, "10.0.0.1"},
		{"unknown Header value", &clientkey.Resolver{Trusted: testTrusted, Header: 9}, "10.0.0.1"},
		{"nil Trusted", &clientkey.Resolver{Header: clientkey.HeaderXForwardedFor}, "10.0.0.1"},
		{"each header reads only its own", &clientkey.Resolver{Trusted: testTrusted, Header: clientkey.HeaderForwarded}, "198.51.100.2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.r.ClientAddrFrom(peer, h); got.String() != tt.want {
				t.Errorf("ClientAddrFrom = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestResolverDoesNotModifyHeader(t *testing.T) {
	r := &clientkey.Resolver{Trusted: testTrusted, Header: clientkey.HeaderForwarded}
	h := http.Header{"Forwarded": {`for="[2001:db8:1::1]:4711", for=10.0.0.2`, "for=10.0.0.3"}}
	before := h.Clone()
	r.ClientAddrFrom(netip.MustParseAddr("10.0.0.1"), h)
	if len(h) != 1 || strings.Join(h["Forwarded"], "|") != strings.Join(before["Forwarded"], "|") {
		t.Errorf("header changed from %v to %v", before, h)
	}
}

func TestResolverClientAddrRemoteAddr(t *testing.T) {
	r := &clientkey.Resolver{Trusted: testTrusted, Header: clientkey.HeaderXForwardedFor}
	tests := []struct {
		name, remote, xff string
		want              string // "" for the zero Addr
	}{
		{"ipv4 trusted", "10.0.0.1:1234", "198.51.100.1", "198.51.100.1"},
		{"ipv4 untrusted", "203.0.113.1:1234", "198.51.100.1", "203.0.113.1"},
		{"ipv6 trusted", "[2001:db8:ffff::1]:443", "198.51.100.1", "198.51.100.1"},
		{"ipv6 untrusted", "[2001:db8:1::1]:443", "198.51.100.1", "2001:db8:1::1"},
		{"ipv6 zone", "[fe80::1%eth0]:443", "198.51.100.1", "fe80::1%eth0"},
		{"bare ipv4", "10.0.0.1", "198.51.100.1", "198.51.100.1"},
		{"bare ipv6", "2001:db8:1::1", "198.51.100.1", "2001:db8:1::1"},
		{"empty", "", "198.51.100.1", ""},
		{"unix socket", "@", "198.51.100.1", ""},
		{"host name", "proxy.example:80", "198.51.100.1", ""},
		{"ipv6 without brackets and port", "2001:db8:ffff::1:443x", "198.51.100.1", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest("GET", "/", nil)
			req.RemoteAddr = tt.remote
			req.Header.Set("X-Forwarded-For", tt.xff)
			want := optAddr(tt.want)
			if got := r.ClientAddr(req); got != want {
				t.Errorf("ClientAddr with RemoteAddr %q = %v, want %v", tt.remote, got, want)
			}
			if got, wantKey := r.Key(req), clientkey.FromAddr(want); got != wantKey {
				t.Errorf("Key = %v, want %v", got, wantKey)
			}
		})
	}
}

// TestRemoteAddrColonSplitTrap shows why RemoteAddr must not be split on
// ':': the first field of an IPv6 RemoteAddr is "[2001", so a trusted IPv6
// proxy would be missed and every client behind it would share its key.
func TestRemoteAddrColonSplitTrap(t *testing.T) {
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "[2001:db8:ffff::1]:443"
	req.Header.Set("X-Forwarded-For", "2001:db8:1:2::9")

	naive, err := netip.ParseAddr(strings.Split(req.RemoteAddr, ":")[0])
	if err == nil {
		t.Fatalf("naive split parsed %v; the trap no longer illustrates anything", naive)
	}
	r := &clientkey.Resolver{Trusted: testTrusted, Header: clientkey.HeaderXForwardedFor}
	if got := r.Key(req).String(); got != "2001:db8:1:2::/64" {
		t.Errorf("Key = %v, want 2001:db8:1:2::/64", got)
	}
}

func TestResolverKeyUsesKeyer(t *testing.T) {
	k := mustKeyer(t, 24, 48)
	r := &clientkey.Resolver{Trusted: testTrusted, Header: clientkey.HeaderXForwardedFor, Keyer: k}
	for xff, want := range map[string]string{
		"198.51.100.77":      "198.51.100.0/24",
		"2001:db8:1:2::9":    "2001:db8:1::/48",
		"::ffff:203.0.113.9": "203.0.113.0/24",
	} {
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = "10.0.0.1:999"
		req.Header.Set("X-Forwarded-For", xff)
		if got := r.Key(req).String(); got != want {
			t.Errorf("Key for %s = %v, want %v", xff, got, want)
		}
	}
	var nilResolver *clientkey.Resolver
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "[2001:db8:1:2::9]:1"
	if got := nilResolver.Key(req).String(); got != "2001:db8:1:2::/64" {
		t.Errorf("nil Resolver Key = %v, want 2001:db8:1:2::/64", got)
	}
}

func TestClientAddrFromAllocatesNothing(t *testing.T) {
	peer := netip.MustParseAddr("10.0.0.1")
	tests := []struct {
		name  string
		which clientkey.Header
		h     http.Header
	}{
		{"x-forwarded-for", clientkey.HeaderXForwardedFor, http.Header{"X-Forwarded-For": {"6.6.6.6, 198.51.100.1, [2001:db8:ffff::1]:443", "10.0.0.2"}}},
		{"forwarded", clientkey.HeaderForwarded, http.Header{"Forwarded": {`for=198.51.100.1;proto=https, for="[2001:db8:ffff::1]:443"`, "for=10.0.0.2"}}},
		{"untrusted peer", clientkey.HeaderXForwardedFor, http.Header{"X-Forwarded-For": {"198.51.100.1"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &clientkey.Resolver{Trusted: testTrusted, Header: tt.which}
			var got netip.Addr
			n := testing.AllocsPerRun(100, func() { got = r.ClientAddrFrom(peer, tt.h) })
			if n != 0 {
				t.Errorf("%v allocations per call, want 0", n)
			}
			if !got.IsValid() {
				t.Error("no client address")
			}
		})
	}
}

// refClientAddr is a slow, obvious version of the walk: split everything,
// then go right to left. The tables and the fuzz targets check the real walk
// against it.
func refClientAddr(peer netip.Addr, trusted *clientkey.ProxySet, lines []string, which clientkey.Header) netip.Addr {
	if !trusted.Contains(peer) {
		return peer
	}
	var hops []string
	for _, line := range lines {
		for _, e := range refSplit(line, which == clientkey.HeaderForwarded) {
			if strings.Trim(e, " \t") != "" {
				hops = append(hops, e)
			}
		}
	}
	for i := len(hops) - 1; i >= 0; i-- {
		var a netip.Addr
		var err error
		if which == clientkey.HeaderForwarded {
			a, err = clientkey.ParseForwardedElement(hops[i])
		} else {
			a, err = clientkey.ParseXForwardedForHop(hops[i])
		}
		switch {
		case err != nil:
			return peer
		case !trusted.Contains(a):
			return a
		case i == 0:
			return a
		}
	}
	return peer
}

// refSplit splits a field line on commas, outside quoted-strings when
// quotes is set.
func refSplit(line string, quotes bool) []string {
	if !quotes {
		return strings.Split(line, ",")
	}
	var out []string
	var cur strings.Builder
	inQuote, escaped := false, false
	for _, c := range []byte(line) {
		switch {
		case escaped:
			escaped = false
		case inQuote && c == '\\':
			escaped = true
		case c == '"':
			inQuote = !inQuote
		case c == ',' && !inQuote:
			out = append(out, cur.String())
			cur.Reset()
			continue
		}
		cur.WriteByte(c)
	}
	return append(out, cur.String())
}

// TestKeyFromPeer checks that KeyFromPeer's key is Key's, and that it
// says the key came from the peer alone exactly when no forwarding header
// was read: never for a trusted proxy whose header the resolver reads.
func TestKeyFromPeer(t *testing.T) {
	xff := &clientkey.Resolver{Trusted: testTrusted, Header: clientkey.HeaderXForwardedFor}
	fwd := &clientkey.Resolver{Trusted: testTrusted, Header: clientkey.HeaderForwarded}
	noHeader := &clientkey.Resolver{Trusted: testTrusted}
	cases := []struct {
		name     string
		res      *clientkey.Resolver
		remote   string
		fromPeer bool
	}{
		{"untrusted peer", xff, "203.0.113.5:80", true},
		{"untrusted IPv6 peer", xff, "[2001:db8:1::5]:80", true},
		{"trusted proxy, X-Forwarded-For read", xff, "10.0.0.1:80", false},
		{"trusted proxy, Forwarded read", fwd, "10.0.0.1:80", false},
		{"trusted IPv4-mapped proxy", xff, "[::ffff:10.0.0.1]:80", false},
		{"trusted proxy, no header read", noHeader, "10.0.0.1:80", true},
		{"nil resolver", nil, "10.0.0.1:80", true},
		{"bare address", xff, "203.0.113.5", true},
		{"unreadable RemoteAddr", xff, "@", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = tc.remote
			r.Header.Set("X-Forwarded-For", "198.51.100.1")
			r.Header.Set("Forwarded", "for=198.51.100.1")
			k, fromPeer := tc.res.KeyFromPeer(r)
			if want := tc.res.Key(r); k != want {
				t.Errorf("key %v, want Key's %v", k, want)
			}
			if fromPeer != tc.fromPeer {
				t.Errorf("fromPeer %v, want %v", fromPeer, tc.fromPeer)
			}
		})
	}
}
