package clientkey_test

import (
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/clientkey"
)

func mustKeyer(t testing.TB, v4, v6 int) clientkey.Keyer {
	t.Helper()
	k, err := clientkey.NewKeyer(v4, v6)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestKeyerFromAddr(t *testing.T) {
	tests := []struct {
		name   string
		v4, v6 int
		addr   string // "" for the zero Addr
		want   string // key String; "invalid" for the zero Key
	}{
		{"ipv4 default", 0, 0, "192.0.2.1", "192.0.2.1"},
		{"ipv4 /24", 24, 0, "192.0.2.77", "192.0.2.0/24"},
		{"ipv4 /1", 1, 0, "192.0.2.77", "128.0.0.0/1"},
		{"ipv4 /32 explicit", 32, 0, "192.0.2.77", "192.0.2.77"},
		{"mapped default", 0, 0, "::ffff:192.0.2.1", "192.0.2.1"},
		{"mapped uses ipv4 bits", 16, 128, "::ffff:192.0.2.1", "192.0.0.0/16"},
		{"mapped not masked by ipv6 bits", 0, 8, "::ffff:10.1.2.3", "10.1.2.3"},
		{"ipv6 default /64", 0, 0, "2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"},
		{"ipv6 /48", 0, 48, "2001:db8:1:2:3:4:5:6", "2001:db8:1::/48"},
		{"ipv6 /56", 0, 56, "2001:db8:1:2ff:3:4:5:6", "2001:db8:1:200::/56"},
		{"ipv6 /128", 0, 128, "2001:db8:1:2:3:4:5:6", "2001:db8:1:2:3:4:5:6"},
		{"ipv6 /1", 0, 1, "2001:db8::1", "::/1"},
		{"ipv6 unaffected by ipv4 bits", 8, 0, "2001:db8::1", "2001:db8::/64"},
		{"loopback v6", 0, 0, "::1", "::/64"},
		{"zone dropped", 0, 0, "fe80::1%eth0", "fe80::/64"},
		{"zone dropped /128", 0, 128, "fe80::1%eth0", "fe80::1"},
		{"ipv4-compatible is plain ipv6", 0, 0, "::192.0.2.1", "::/64"},
		{"invalid", 0, 0, "", "invalid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := mustKeyer(t, tt.v4, tt.v6)
			var a netip.Addr
			if tt.addr != "" {
				a = netip.MustParseAddr(tt.addr)
			}
			got := k.FromAddr(a)
			if got.String() != tt.want {
				t.Errorf("FromAddr(%v) = %v, want %v", a, got, tt.want)
			}
			if p := got.Prefix(); p.IsValid() && (p.Addr().Is4In6() || p.Addr().Zone() != "" || p.Masked() != p) {
				t.Errorf("key prefix %v is not canonical", p)
			}
			if ap := k.FromAddrPort(netip.AddrPortFrom(a, 443)); ap != got {
				t.Errorf("FromAddrPort = %v, want %v", ap, got)
			}
		})
	}
}

func TestNewKeyer(t *testing.T) {
	tests := []struct {
		name             string
		v4, v6           int
		wantV4, wantV6   int
		wantErrSubstring string
	}{
		{"defaults", 0, 0, 32, 64, ""},
		{"explicit defaults", 32, 64, 32, 64, ""},
		{"minimums", 1, 1, 1, 1, ""},
		{"maximums", 32, 128, 32, 128, ""},
		{"v4 negative", -1, 0, 0, 0, "IPv4 prefix length -1 out of range 1..32"},
		{"v4 too long", 33, 0, 0, 0, "IPv4 prefix length 33 out of range 1..32"},
		{"v6 negative", 0, -64, 0, 0, "IPv6 prefix length -64 out of range 1..128"},
		{"v6 too long", 0, 129, 0, 0, "IPv6 prefix length 129 out of range 1..128"},
		{"v6 way too long", 0, 256, 0, 0, "IPv6 prefix length 256 out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := clientkey.NewKeyer(tt.v4, tt.v6)
			if tt.wantErrSubstring != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErrSubstring) || !strings.HasPrefix(err.Error(), "clientkey: ") {
					t.Fatalf("NewKeyer(%d, %d) error = %v, want one containing %q", tt.v4, tt.v6, err, tt.wantErrSubstring)
				}
				if k != (clientkey.Keyer{}) {
					t.Errorf("failed NewKeyer returned %+v, want the zero Keyer", k)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if k.IPv4Bits() != tt.wantV4 || k.IPv6Bits() != tt.wantV6 {
				t.Errorf("bits = %d, %d; want %d, %d", k.IPv4Bits(), k.IPv6Bits(), tt.wantV4, tt.wantV6)
			}
		})
	}
}

func TestZeroKeyerIsDefault(t *testing.T) {
	var zero clientkey.Keyer
	if zero.IPv4Bits() != 32 || zero.IPv6Bits() != 64 {
		t.Errorf("zero Keyer bits = %d, %d; want 32, 64", zero.IPv4Bits(), zero.IPv6Bits())
	}
	if def := mustKeyer(t, 32, 64); def != zero {
		t.Errorf("NewKeyer(32, 64) = %+v, want it equal to the zero Keyer", def)
	}
	if k := mustKeyer(t, 24, 64); k == zero {
		t.Error("NewKeyer(24, 64) equals the zero Keyer")
	}
}

// otherAddr is a net.Addr of a type FromNetAddr has no fast path for.
type otherAddr string

func (a otherAddr) Network() string { return "other" }
func (a otherAddr) String() string  { return string(a) }

func TestFromNetAddr(t *testing.T) {
	tests := []struct {
		name string
		addr net.Addr
		want string
	}{
		{"tcp ipv4", &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 80}, "192.0.2.1"},
		{"tcp 4-byte ipv4", &net.TCPAddr{IP: net.IP{192, 0, 2, 1}, Port: 80}, "192.0.2.1"},
		{"tcp ipv6 zone", &net.TCPAddr{IP: net.ParseIP("fe80::1"), Zone: "eth0"}, "fe80::/64"},
		{"udp ipv6", &net.UDPAddr{IP: net.ParseIP("2001:db8:0:1::9"), Port: 443}, "2001:db8:0:1::/64"},
		{"ip addr", &net.IPAddr{IP: net.ParseIP("198.51.100.3")}, "198.51.100.3"},
		{"tcp nil IP", &net.TCPAddr{}, "invalid"},
		{"tcp bad IP length", &net.TCPAddr{IP: net.IP{1, 2, 3}}, "invalid"},
		{"nil tcp pointer", (*net.TCPAddr)(nil), "invalid"},
		{"nil udp pointer", (*net.UDPAddr)(nil), "invalid"},
		{"nil ip pointer", (*net.IPAddr)(nil), "invalid"},
		{"nil interface", nil, "invalid"},
		{"unix", &net.UnixAddr{Name: "/run/x.sock", Net: "unix"}, "invalid"},
		{"other ipv4 port", otherAddr("192.0.2.9:1234"), "192.0.2.9"},
		{"other ipv6 port", otherAddr("[2001:db8::9]:1234"), "2001:db8::/64"},
		{"other mapped port", otherAddr("[::ffff:192.0.2.9]:1234"), "192.0.2.9"},
		{"other bare", otherAddr("2001:db8::9"), "2001:db8::/64"},
		{"other zone", otherAddr("[fe80::1%eth0]:1"), "fe80::/64"},
		{"other host name", otherAddr("example.com:80"), "invalid"},
		{"other empty", otherAddr(""), "invalid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := clientkey.FromNetAddr(tt.addr); got.String() != tt.want {
				t.Errorf("FromNetAddr(%v) = %v, want %v", tt.addr, got, tt.want)
			}
		})
	}
}

// TestFromNetAddrLoopbackSockets keys the peers of real connections, each
// client bound to its own loopback source address.
func TestFromNetAddrLoopbackSockets(t *testing.T) {
	t.Run("tcp", func(t *testing.T) {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		for _, src := range []string{"127.0.0.2", "127.0.0.3"} {
			peer := acceptFrom(t, ln, "tcp4", src)
			if got := clientkey.FromNetAddr(peer); got.String() != src {
				t.Errorf("key of %v = %v, want %v", peer, got, src)
			}
		}
	})
	t.Run("tcp ipv6", func(t *testing.T) {
		ln, err := net.Listen("tcp6", "[::1]:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		peer := acceptFrom(t, ln, "tcp6", "::1")
		if got := clientkey.FromNetAddr(peer); got.String() != "::/64" {
			t.Errorf("key of %v = %v, want ::/64", peer, got)
		}
	})
	t.Run("tcp dual-stack reports mapped", func(t *testing.T) {
		// An AF_INET6 socket bound to a mapped address sees IPv4 peers as
		// ::ffff:a.b.c.d, the form the mapping rule exists for.
		ln := listenMappedLoopback(t)
		defer ln.Close()
		peer := acceptFrom(t, ln, "tcp4", "127.0.0.4")
		if a, _ := netip.AddrFromSlice(peer.(*net.TCPAddr).IP); !a.Is4In6() {
			t.Fatalf("peer %v is not IPv4-mapped; the test does not test the mapping", a)
		}
		if got := clientkey.FromNetAddr(peer); got.String() != "127.0.0.4" {
			t.Errorf("key of %v = %v, want 127.0.0.4", peer, got)
		}
	})
	t.Run("udp", func(t *testing.T) {
		server, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		defer server.Close()
		client, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 5)}, server.LocalAddr().(*net.UDPAddr))
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		if _, err := client.Write([]byte("hello")); err != nil {
			t.Fatal(err)
		}
		if err := server.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		_, from, err := server.ReadFromUDP(make([]byte, 16))
		if err != nil {
			t.Fatal(err)
		}
		if got := clientkey.FromNetAddr(from); got.String() != "127.0.0.5" {
			t.Errorf("key of %v = %v, want 127.0.0.5", from, got)
		}
	})
}

// listenMappedLoopback returns a TCP listener on an AF_INET6 socket bound to
// ::ffff:127.0.0.1. The net package would open an AF_INET socket for that
// address, and a dual-stack wildcard would listen beyond loopback.
func listenMappedLoopback(t *testing.T) net.Listener {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET6, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "mapped-listener")
	defer f.Close() // FileListener holds its own duplicate
	if err := syscall.SetsockoptInt(fd, syscall.IPPROTO_IPV6, syscall.IPV6_V6ONLY, 0); err != nil {
		t.Fatal(err)
	}
	sa := &syscall.SockaddrInet6{Addr: netip.MustParseAddr("::ffff:127.0.0.1").As16()}
	if err := syscall.Bind(fd, sa); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 8); err != nil {
		t.Fatal(err)
	}
	ln, err := net.FileListener(f)
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// acceptFrom dials ln from source address src and returns the peer address
// the accepted connection reports.
func acceptFrom(t *testing.T, ln net.Listener, network, src string) net.Addr {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial(network, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := ln.(*net.TCPListener).SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	return s.RemoteAddr()
}

func TestKeyingAllocatesNothing(t *testing.T) {
	k := mustKeyer(t, 24, 56)
	v4 := netip.MustParseAddr("192.0.2.1")
	mapped := netip.MustParseAddr("::ffff:192.0.2.1")
	v6 := netip.MustParseAddr("2001:db8::1")
	zoned := netip.MustParseAddr("fe80::1%eth0")
	tcp := &net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 1, Zone: "eth0"}
	udp := &net.UDPAddr{IP: net.ParseIP("192.0.2.1"), Port: 1}
	var sink clientkey.Key
	tests := []struct {
		name string
		f    func()
	}{
		{"FromAddr v4", func() { sink = k.FromAddr(v4) }},
		{"FromAddr mapped", func() { sink = k.FromAddr(mapped) }},
		{"FromAddr v6", func() { sink = k.FromAddr(v6) }},
		{"FromAddr zoned", func() { sink = k.FromAddr(zoned) }},
		{"FromAddrPort", func() { sink = k.FromAddrPort(netip.AddrPortFrom(zoned, 80)) }},
		{"FromNetAddr tcp", func() { sink = k.FromNetAddr(tcp) }},
		{"FromNetAddr udp", func() { sink = k.FromNetAddr(udp) }},
		{"package FromAddr", func() { sink = clientkey.FromAddr(v6) }},
		{"package FromNetAddr", func() { sink = clientkey.FromNetAddr(tcp) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if n := testing.AllocsPerRun(100, tt.f); n != 0 {
				t.Errorf("%v allocations per call, want 0", n)
			}
		})
	}
	_ = sink
}
