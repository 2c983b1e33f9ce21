package connlimit

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/bpf"

	"github.com/seed-a07d1050/portcullis/clientkey"
)

// listenPlainTCP listens on addr without MPTCP, as SYNFilter needs.
func listenPlainTCP(t testing.TB, addr string) net.Listener {
	t.Helper()
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// filteredWithin waits until the listener's SYN filter holds n keys.
func filteredWithin(t testing.TB, l *Listener, n int64) {
	t.Helper()
	waitFor(t, "the SYN filter to hold "+itoa(int(n))+" keys", func() bool { return l.Stats().SYNFiltered == n })
}

// mustHang checks that a connection from src to addr is not established
// within 300 ms: its SYN is dropped, neither answered nor refused.
func mustHang(t testing.TB, src string, addr net.Addr) {
	t.Helper()
	d := net.Dialer{Timeout: 300 * time.Millisecond, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", addr.String())
	if err == nil {
		c.Close()
		t.Fatalf("connection from %s established; want its SYN dropped", src)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("dial from %s: %v; want a timeout (SYN dropped)", src, err)
	}
}

// A client at its cap cannot even complete a handshake; other clients
// can; once it closes a connection it gets in again, on its SYN's retry.
func TestSYNFilterDropsAtCap(t *testing.T) {
	l := newTestListener(t, listenPlainTCP(t, "127.0.0.1:0"), Config{Policy: Policy{Permits: 2}, SYNFilter: true})
	echoServer(t, l)
	first := dialFrom(t, "127.0.0.2", l.Addr())
	mustServe(t, first, "127.0.0.2")
	mustServe(t, dialFrom(t, "127.0.0.2", l.Addr()), "127.0.0.2")
	filteredWithin(t, l, 1)

	mustHang(t, "127.0.0.2", l.Addr())
	mustServe(t, dialFrom(t, "127.0.0.3", l.Addr()), "127.0.0.3")
	if r := l.Stats().Refused.ClientCap; r != 0 {
		t.Fatalf("%d client-cap refusals; want 0, the filter keeping the attempt from Accept", r)
	}

	first.Close()
	filteredWithin(t, l, 0)
	mustServe(t, dialFrom(t, "127.0.0.2", l.Addr()), "127.0.0.2")
}

// Keys are filtered by their prefix, for IPv4 on a dual-stack socket and
// for IPv6, and overrides give their own cap.
func TestSYNFilterFamilies(t *testing.T) {
	keyer, err := clientkey.NewKeyer(24, 128)
	if err != nil {
		t.Fatal(err)
	}
	l := newTestListener(t, listenPlainTCP(t, "[::]:0"), Config{
		Policy: Policy{Permits: 1}, SYNFilter: true, Keyer: keyer,
		PrefixOverrides: []Override{{Prefix: netip.MustParsePrefix("127.0.9.0/24"), Max: 2}},
	})
	echoServer(t, l)
	port := l.Addr().(*net.TCPAddr).Port
	v4 := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}
	v6 := &net.TCPAddr{IP: net.IPv6loopback, Port: port}

	mustServe(t, dialFrom(t, "127.0.0.2", v4), "127.0.0.0/24")
	filteredWithin(t, l, 1)
	mustHang(t, "127.0.0.77", v4) // the same /24
	mustServe(t, dialFrom(t, "127.0.1.2", v4), "127.0.1.0/24")
	filteredWithin(t, l, 2)

	mustServe(t, dialFrom(t, "127.0.9.1", v4), "127.0.9.0/24")
	mustServe(t, dialFrom(t, "127.0.9.2", v4), "127.0.9.0/24") // its override is 2
	filteredWithin(t, l, 3)
	mustHang(t, "127.0.9.3", v4)

	mustServe(t, dialFrom(t, "::1", v6), "::1")
	filteredWithin(t, l, 4)
	mustHang(t, "::1", v6)
}

// The filter follows the counts under churn: when every connection has
// closed, no key is filtered and nothing is held.
func TestSYNFilterChurn(t *testing.T) {
	l := newTestListener(t, listenPlainTCP(t, "127.0.0.1:0"), Config{Policy: Policy{Permits: 3}, SYNFilter: true})
	echoServer(t, l)
	var wg sync.WaitGroup
	for i := range 8 {
		src := "127.0.2." + itoa(1+i)
		wg.Go(func() {
			for range 5 {
				d := net.Dialer{Timeout: 3 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
				var held []net.Conn
				for range 3 {
					if c, err := d.Dial("tcp", l.Addr().String()); err == nil {
						held = append(held, c)
					}
				}
				for _, c := range held {
					c.Close()
				}
			}
		})
	}
	wg.Wait()
	checkDrained(t, l)
	filteredWithin(t, l, 0)
}

// Go listens with MPTCP by default where the kernel has it, and an MPTCP
// socket takes no filter: NewListener says so instead of running without.
func TestSYNFilterNeedsPlainTCP(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	mptcp := false
	rc, _ := inner.(*net.TCPListener).SyscallConn()
	rc.Control(func(fd uintptr) {
		proto, _ := syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_PROTOCOL)
		mptcp = proto == 262 // IPPROTO_MPTCP
	})
	l, err := NewListener(inner, Config{SYNFilter: true})
	switch {
	case mptcp && (err == nil || !strings.Contains(err.Error(), "MPTCP")):
		t.Fatalf("NewListener on an MPTCP socket: %v; want an error naming MPTCP", err)
	case !mptcp && err != nil:
		t.Fatalf("NewListener on a plain TCP socket: %v", err)
	}
	if l != nil {
		l.Close()
	}
}

// A program never exceeds the kernel's size limit: keys that do not fit
// are left to the accept-time check, and the kernel takes the program.
func TestSYNFilterProgramBounded(t *testing.T) {
	var keys []clientkey.Key
	for i := range 3000 {
		a := netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 1})
		keys = append(keys, clientkey.Keyer{}.FromAddr(a))
	}
	for i := range 300 {
		a := netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, byte(i >> 8), byte(i), 15: 1})
		keys = append(keys, clientkey.Keyer{}.FromAddr(a))
	}
	prog, n := synFilterProgram(keys)
	if len(prog) > maxFilterInsns || n == 0 || n >= len(keys) {
		t.Fatalf("program of %d instructions holding %d of %d keys; want at most %d instructions, some but not all keys",
			len(prog), n, len(keys), maxFilterInsns)
	}
	if _, err := bpf.Assemble(prog); err != nil {
		t.Fatal(err)
	}
	install, err := newSYNInstaller(listenPlainTCP(t, "127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := install(keys); err != nil || got != n {
		t.Fatalf("install = %d, %v; want %d keys installed", got, err, n)
	}
}
