package forward

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// mapResolver resolves the names it holds; any other name does not exist.
type mapResolver map[string][]netip.Addr

func (m mapResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := m[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// listen returns a loopback listener that accepts and holds connections.
func listen(t *testing.T, addr string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s: %v", addr, err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	return ln
}

func TestDialerRefusesByRule(t *testing.T) {
	ln := listen(t, "127.0.0.1:0")
	port := ln.Addr().(*net.TCPAddr).Port
	d, err := NewDialer(DialerConfig{Resolver: mapResolver{
		"loop.test":     {netip.MustParseAddr("127.0.0.1")},
		"private.test":  {netip.MustParseAddr("10.0.0.1")},
		"metadata.test": {netip.MustParseAddr("169.254.169.254")},
		"v6loop.test":   {netip.MustParseAddr("::1")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ addr, rule string }{
		{"127.0.0.1", "loopback 127.0.0.0/8"},
		{"loop.test", "loopback 127.0.0.0/8"},
		{"10.0.0.1", "private-use 10.0.0.0/8"},
		{"private.test", "private-use 10.0.0.0/8"},
		{"169.254.169.254", "cloud metadata service"},
		{"metadata.test", "cloud metadata service"},
		{"::1", "loopback ::1/128"},
		{"v6loop.test", "loopback ::1/128"},
	} {
		c, err := d.DialContext(t.Context(), "tcp", net.JoinHostPort(tc.addr, itoa(port)))
		if err == nil {
			c.Close()
			t.Errorf("%s: connected", tc.addr)
			continue
		}
		var de *DeniedError
		if !errors.As(err, &de) || !strings.Contains(de.Rule, tc.rule) {
			t.Errorf("%s: %v; want refused by %q", tc.addr, err, tc.rule)
		}
	}
}

// The address checked is the address connected to: each dial resolves the
// name and the Control hook checks every socket before it connects, so a
// name that resolved to an allowed address once and to a refused one next
// (DNS rebinding) is refused the second time.
func TestDialerChecksEveryResolution(t *testing.T) {
	ln := listen(t, "127.0.0.2:0")
	port := ln.Addr().(*net.TCPAddr).Port
	policy, err := NewPolicy(PolicyConfig{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	rebinding := resolverFunc(func(context.Context, string, string) ([]netip.Addr, error) {
		if calls.Add(1) == 1 {
			return []netip.Addr{netip.MustParseAddr("127.0.0.2")}, nil
		}
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	})
	d, err := NewDialer(DialerConfig{Policy: policy, Resolver: rebinding})
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("rebind.test", itoa(port))
	c, err := d.DialContext(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatalf("first dial (allowed address): %v", err)
	}
	c.Close()
	if _, err := d.DialContext(t.Context(), "tcp", addr); !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("second dial (rebound to 127.0.0.1): %v", err)
	}
}

// A name with a refused and an allowed address connects to the allowed one.
func TestDialerSkipsRefusedAddresses(t *testing.T) {
	ln := listen(t, "127.0.0.3:0")
	port := ln.Addr().(*net.TCPAddr).Port
	policy, _ := NewPolicy(PolicyConfig{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.3/32")}})
	d, _ := NewDialer(DialerConfig{Policy: policy, Resolver: mapResolver{
		"mixed.test": {netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("127.0.0.3")},
	}})
	c, err := d.DialContext(t.Context(), "tcp", net.JoinHostPort("mixed.test", itoa(port)))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer c.Close()
	if got := c.RemoteAddr().String(); got != ln.Addr().String() {
		t.Fatalf("connected to %s, want %s", got, ln.Addr())
	}
}

// The Control hook alone refuses: it is what stands between any socket of
// the Dialer and a refused address.
func TestDialerControlHook(t *testing.T) {
	d, _ := NewDialer(DialerConfig{})
	for addr, want := range map[string]bool{"10.0.0.1:80": false, "[::1]:443": false, "8.8.8.8:443": true, "8.8.8.8:25": false} {
		err := d.control("tcp", addr, nil)
		if (err == nil) != want {
			t.Errorf("control(%s) = %v, want allowed %v", addr, err, want)
		}
	}
	if err := d.control("tcp", "not an address", nil); err == nil {
		t.Error("control accepted a malformed address")
	}
}

func TestDialerErrors(t *testing.T) {
	policy, _ := NewPolicy(PolicyConfig{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	d, _ := NewDialer(DialerConfig{Policy: policy, Resolver: mapResolver{}, Timeout: time.Second})
	if _, err := d.DialContext(t.Context(), "tcp", "nowhere.test:443"); !isNotFound(err) {
		t.Errorf("unknown name: %v", err)
	}
	if _, err := d.DialContext(t.Context(), "udp", "127.0.0.1:443"); err == nil {
		t.Error("dialled UDP")
	}
	if _, err := d.DialContext(t.Context(), "tcp", "127.0.0.1:25"); !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), "port 25") {
		t.Errorf("port 25: %v", err)
	}
	// A closed port on loopback refuses the connection.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if _, err := d.DialContext(t.Context(), "tcp", addr); err == nil || errors.Is(err, ErrDenied) {
		t.Errorf("closed port: %v", err)
	}
}

func isNotFound(err error) bool {
	var de *net.DNSError
	return errors.As(err, &de) && de.IsNotFound
}

type resolverFunc func(ctx context.Context, network, host string) ([]netip.Addr, error)

func (f resolverFunc) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	return f(ctx, network, host)
}

func itoa(n int) string { return strconv.Itoa(n) }
