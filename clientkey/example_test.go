package clientkey_test

import (
	"fmt"
	"net/http/httptest"
	"net/netip"

	"github.com/seed-a07d1050/portcullis/clientkey"
)

func Example() {
	// Keys with the defaults: IPv4 /32, IPv4-mapped as IPv4, IPv6 /64.
	for _, s := range []string{"192.0.2.1", "::ffff:192.0.2.1", "2001:db8:1:2:aaaa::1", "2001:db8:1:2:bbbb::2"} {
		fmt.Println(s, "->", clientkey.FromAddr(netip.MustParseAddr(s)))
	}

	// Behind a load balancer at 10.0.0.5 that appends to X-Forwarded-For.
	r := &clientkey.Resolver{
		Trusted: clientkey.MustParseProxySet("10.0.0.0/8"),
		Header:  clientkey.HeaderXForwardedFor,
	}
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "10.0.0.5:53211"
	// The client wrote "6.6.6.6" itself; the balancer appended the real peer.
	req.Header.Set("X-Forwarded-For", "6.6.6.6, 198.51.100.23")
	fmt.Println("behind proxy:", r.Key(req))

	// The same header from a peer that is not trusted is ignored.
	req.RemoteAddr = "203.0.113.9:40000"
	fmt.Println("direct:", r.Key(req))

	// Output:
	// 192.0.2.1 -> 192.0.2.1
	// ::ffff:192.0.2.1 -> 192.0.2.1
	// 2001:db8:1:2:aaaa::1 -> 2001:db8:1:2::/64
	// 2001:db8:1:2:bbbb::2 -> 2001:db8:1:2::/64
	// behind proxy: 198.51.100.23
	// direct: 203.0.113.9
}

func ExampleNewKeyer() {
	k, err := clientkey.NewKeyer(24, 48)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(k.FromAddr(netip.MustParseAddr("192.0.2.77")))
	fmt.Println(k.FromAddr(netip.MustParseAddr("2001:db8:1:2::9")))

	_, err = clientkey.NewKeyer(0, 129)
	fmt.Println(err)
	// Output:
	// 192.0.2.0/24
	// 2001:db8:1::/48
	// clientkey: IPv6 prefix length 129 out of range 1..128 (0 means 64)
}

func ExampleResolver_ClientAddrFrom() {
	// After reading a PROXY protocol header, the daemon knows the peer
	// without an http.Request.
	r := &clientkey.Resolver{
		Trusted: clientkey.MustParseProxySet("2001:db8:ffff::/48"),
		Header:  clientkey.HeaderForwarded,
	}
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Add("Forwarded", `for="[2001:db8:1::17]:4711";proto=https, for="[2001:db8:ffff::2]"`)
	peer := netip.MustParseAddr("2001:db8:ffff::1")
	fmt.Println(r.ClientAddrFrom(peer, req.Header))

	// An obfuscated hop breaks the chain: the peer is the client.
	req.Header.Set("Forwarded", "for=_hidden")
	fmt.Println(r.ClientAddrFrom(peer, req.Header))
	// Output:
	// 2001:db8:1::17
	// 2001:db8:ffff::1
}

func ExampleParseProxySet() {
	_, err := clientkey.ParseProxySet([]string{"10.0.0.0/8", "192.168.1.1/24"})
	fmt.Println(err)
	s, _ := clientkey.ParseProxySet([]string{"10.0.0.0/8", "10.1.0.0/16", "::ffff:192.0.2.7", "::1"})
	fmt.Println(s, s.Len())
	// Output:
	// clientkey: trusted proxy 1 "192.168.1.1/24": host bits set (did you mean 192.168.1.0/24 or 192.168.1.1/32?)
	// 10.0.0.0/8, 192.0.2.7/32, ::1/128 3
}
