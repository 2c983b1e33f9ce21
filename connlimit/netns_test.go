package connlimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// netnsChildEnv marks the copy of the test binary that runs inside the
// network namespace.
const netnsChildEnv = "CONNLIMIT_NETNS_CHILD"

// IPv6 clients are keyed by /64: two addresses in one /64 share a budget,
// an address in another /64 does not, and a /48 level caps both. The
// listener is dual-stack, so IPv4 clients, seen as ::ffff:a.b.c.d, are
// keyed by their IPv4 address. It runs in a network namespace of its own,
// where the test can give the loopback interface documentation addresses.
func TestIPv6Namespace(t *testing.T) {
	if os.Getenv(netnsChildEnv) == "1" {
		ipv6Scenario(t)
		return
	}
	ns := createNetns(t)
	for _, addr := range []string{"2001:db8:1:1::1/64", "2001:db8:1:1::2/64", "2001:db8:1:2::1/64"} {
		ipCmd(t, "-n", ns, "addr", "add", addr, "dev", "lo", "nodad")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", ns, exe, "-test.run=^TestIPv6Namespace$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), netnsChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestIPv6Namespace") {
		t.Fatalf("the test inside the namespace failed (%v):\n%s", err, out)
	}
}

// createNetns makes a network namespace with its loopback up, deleted when
// the test ends. Failing to make one fails the test when it can be made
// (as root, or in CI); only an unprivileged developer run skips.
func createNetns(t *testing.T) string {
	t.Helper()
	var b [4]byte
	rand.Read(b[:])
	ns := "pc-test-" + hex.EncodeToString(b[:])
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		if os.Getenv("CI") != "true" && os.Geteuid() != 0 {
			t.Skipf("cannot create a network namespace without root: %v: %s", err, out)
		}
		t.Fatalf("ip netns add %s: %v: %s", ns, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", ns, err, out)
		}
	})
	ipCmd(t, "-n", ns, "link", "set", "lo", "up")
	return ns
}

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// ipv6Scenario runs inside the namespace.
func ipv6Scenario(t *testing.T) {
	inner, err := net.Listen("tcp", "[::]:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newTestListener(t, inner, Config{Policy: Policy{Permits: 2}, Levels: []Level{{IPv6Bits: 48, Max: 3}}})
	echoServer(t, l)
	port := l.Addr().(*net.TCPAddr).Port
	v6 := &net.TCPAddr{IP: net.ParseIP("2001:db8:1:1::1"), Port: port}
	v4 := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}

	mustServe(t, dialFrom(t, "2001:db8:1:1::1", v6), "2001:db8:1:1::/64")
	mustServe(t, dialFrom(t, "2001:db8:1:1::2", v6), "2001:db8:1:1::/64")
	mustBeRefused(t, dialFrom(t, "2001:db8:1:1::1", v6)) // the /64 is full, whichever address
	mustServe(t, dialFrom(t, "2001:db8:1:2::1", v6), "2001:db8:1:2::/64")
	mustBeRefused(t, dialFrom(t, "2001:db8:1:2::1", v6)) // its /64 has room, the /48 has not
	if r := l.Stats().Refused; r.ClientCap != 1 || r.Level != 1 {
		t.Fatalf("refusals = %+v; want 1 client cap and 1 level", r)
	}

	mustServe(t, dialFrom(t, "127.0.0.2", v4), "127.0.0.2")
	mustServe(t, dialFrom(t, "127.0.0.2", v4), "127.0.0.2")
	mustBeRefused(t, dialFrom(t, "127.0.0.2", v4))
	mustServe(t, dialFrom(t, "127.0.0.3", v4), "127.0.0.3")
	for _, k := range l.Snapshot(0).Keys {
		if k.Key.Prefix().Addr().Is6() && k.Key.Prefix().Bits() != 64 {
			t.Fatalf("unexpected key %v in the snapshot", k.Key)
		}
	}
}
