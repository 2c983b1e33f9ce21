package clientkey_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/clientkey"
)

// Each benchmark has a "baseline" sub-benchmark: the least work that could
// give the same answer, or the common naive code, to compare in one run.

var (
	sinkKey  clientkey.Key
	sinkAddr netip.Addr
	sinkBool bool
	sinkPfx  netip.Prefix
)

func BenchmarkFromAddr(b *testing.B) {
	for _, s := range []string{"192.0.2.1", "::ffff:192.0.2.1", "2001:db8:1:2:3:4:5:6", "fe80::1%eth0"} {
		a := netip.MustParseAddr(s)
		b.Run(s, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sinkKey = clientkey.FromAddr(a)
			}
		})
	}
	b.Run("baseline=Addr.Prefix", func(b *testing.B) {
		a := netip.MustParseAddr("2001:db8:1:2:3:4:5:6")
		b.ReportAllocs()
		for b.Loop() {
			sinkPfx, _ = a.Prefix(64)
		}
	})
}

func BenchmarkFromNetAddr(b *testing.B) {
	addrs := []struct {
		name string
		a    net.Addr
	}{
		{"tcp4", &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 443}},
		{"tcp6", &net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 443}},
		{"udp6-zone", &net.UDPAddr{IP: net.ParseIP("fe80::1"), Port: 443, Zone: "eth0"}},
		{"other-type", otherAddr("[2001:db8::1]:443")},
	}
	for _, tt := range addrs {
		b.Run(tt.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sinkKey = clientkey.FromNetAddr(tt.a)
			}
		})
	}
	b.Run("baseline=TCPAddr.AddrPort", func(b *testing.B) {
		a := &net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 443}
		b.ReportAllocs()
		for b.Loop() {
			sinkPfx, _ = a.AddrPort().Addr().Prefix(64)
		}
	})
}

func BenchmarkContains(b *testing.B) {
	entries := []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "2001:db8::/32", "fc00::/7", "::1"}
	s := clientkey.MustParseProxySet(entries...)
	for _, a := range []string{"192.168.1.1", "203.0.113.1", "::ffff:10.1.1.1", "2001:db8::1", "2001:db9::1"} {
		addr := netip.MustParseAddr(a)
		b.Run(a, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sinkBool = s.Contains(addr)
			}
		})
	}
	b.Run("baseline=scan-all", func(b *testing.B) {
		var ps []netip.Prefix
		for _, e := range entries {
			if !strings.Contains(e, "/") {
				e += "/128"
			}
			ps = append(ps, netip.MustParsePrefix(e))
		}
		addr := netip.MustParseAddr("203.0.113.1")
		b.ReportAllocs()
		for b.Loop() {
			found := false
			for _, p := range ps {
				if p.Contains(addr) {
					found = true
					break
				}
			}
			sinkBool = found
		}
	})
}

func BenchmarkClientAddr(b *testing.B) {
	trusted := clientkey.MustParseProxySet("10.0.0.0/8", "2001:db8:ffff::/48")
	tests := []struct {
		name   string
		which  clientkey.Header
		remote string
		header string
		value  string
	}{
		{"untrusted-peer", clientkey.HeaderXForwardedFor, "203.0.113.9:1234", "X-Forwarded-For", "198.51.100.1"},
		{"xff-3-hops", clientkey.HeaderXForwardedFor, "10.0.0.1:1234", "X-Forwarded-For", "6.6.6.6, 198.51.100.1, 10.0.0.2"},
		{"xff-ipv6", clientkey.HeaderXForwardedFor, "[2001:db8:ffff::1]:443", "X-Forwarded-For", "2001:db8:1::9, [2001:db8:ffff::2]:443"},
		{"forwarded-3-hops", clientkey.HeaderForwarded, "10.0.0.1:1234", "Forwarded", `for=6.6.6.6, for="198.51.100.1:4711";proto=https, for=10.0.0.2`},
	}
	for _, tt := range tests {
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = tt.remote
		req.Header.Set(tt.header, tt.value)
		r := &clientkey.Resolver{Trusted: trusted, Header: tt.which}
		b.Run(tt.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sinkAddr = r.ClientAddr(req)
			}
		})
	}
	b.Run("baseline=naive-xff-3-hops", func(b *testing.B) {
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = "10.0.0.1:1234"
		req.Header.Set("X-Forwarded-For", "6.6.6.6, 198.51.100.1, 10.0.0.2")
		b.ReportAllocs()
		for b.Loop() {
			sinkAddr = naiveClientAddr(req, trusted)
		}
	})
}

// naiveClientAddr is X-Forwarded-For handling as often written by hand:
// SplitHostPort, then strings.Split and net.ParseIP on every hop.
func naiveClientAddr(req *http.Request, trusted *clientkey.ProxySet) netip.Addr {
	host, _, err := net.SplitHostPort(req.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	peer, _ := netip.AddrFromSlice(net.ParseIP(host))
	if !trusted.Contains(peer) {
		return peer
	}
	hops := strings.Split(req.Header.Get("X-Forwarded-For"), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := netip.AddrFromSlice(net.ParseIP(strings.TrimSpace(hops[i])))
		if !ok {
			return peer
		}
		if !trusted.Contains(a) {
			return a
		}
	}
	return peer
}
