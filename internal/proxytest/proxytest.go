// Package proxytest holds what the tests of the forward proxy
// (internal/forward) and of interception (internal/intercept) both need: a
// resolver that never asks the network, a destination policy that lets
// loopback through, an origin server with known paths, an htpasswd file,
// clients from a chosen loopback address, and a CONNECT on a raw
// connection. It is for tests only.
package proxytest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/seed-a07d1050/portcullis/httplimit"
	"github.com/seed-a07d1050/portcullis/internal/forward"
	"github.com/seed-a07d1050/portcullis/internal/waitfor"
)

// WaitLimit bounds every wait of the tests that use this package.
const WaitLimit = 10 * time.Second

// Resolver resolves the names in Names and, when LoopbackSuffix is set,
// every other name ending in it to 127.0.0.1; any other name does not
// exist. Tests resolve names through it, never through the network.
type Resolver struct {
	Names          map[string][]netip.Addr
	LoopbackSuffix string
}

// LookupNetIP implements the resolver the forward proxy takes.
func (r Resolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r.Names[host]; ok {
		return a, nil
	}
	if r.LoopbackSuffix != "" && strings.HasSuffix(host, r.LoopbackSuffix) {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// AnyPort lets a test's CONNECTs reach loopback targets on the random
// ports they listen on (the proxy's default is 443 only).
var AnyPort = []forward.PortRange{{From: 443, To: 443}, {From: 1024, To: 65535}}

// AllowLoopback is the policy of most tests: the built-in rules, with
// loopback explicitly allowed so that targets on 127.0.0.1 and ::1 are
// reachable, on AnyPort.
func AllowLoopback(t testing.TB) *forward.Policy {
	t.Helper()
	p, err := forward.NewPolicy(forward.PolicyConfig{Allow: []netip.Prefix{
		netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"),
	}, ConnectPorts: AnyPort})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// WriteUsers writes an htpasswd file of the user, password pairs (bcrypt
// at its least cost, to keep the tests fast, in the $2y$ form htpasswd
// writes) and returns its path.
func WriteUsers(t testing.TB, pairs ...string) string {
	t.Helper()
	var b strings.Builder
	for i := 0; i+1 < len(pairs); i += 2 {
		h, err := bcrypt.GenerateFromPassword([]byte(pairs[i+1]), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s:$2y$%s\n", pairs[i], h[4:])
	}
	path := filepath.Join(t.TempDir(), "users.htpasswd")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// DialerFrom returns a dialer whose connections come from ip, so that
// each 127.0.0.X is a client of its own.
func DialerFrom(ip string) *net.Dialer {
	return &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: WaitLimit}
}

// Dial opens a TCP connection to addr from ip, closed when t ends, with
// WaitLimit as its deadline.
func Dial(t testing.TB, ip, addr string) net.Conn {
	t.Helper()
	c, err := DialerFrom(ip).Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(WaitLimit))
	return c
}

// Connect sends CONNECT authority on c with creds as its
// Proxy-Authorization (none when ""), and reads the answer's head. The
// reader returned holds whatever came after the head.
func Connect(t testing.TB, c net.Conn, authority, creds string) (*bufio.Reader, *http.Response) {
	t.Helper()
	head := "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n"
	if creds != "" {
		head += "Proxy-Authorization: " + creds + "\r\n"
	}
	if _, err := io.WriteString(c, head+"\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", authority, err)
	}
	return br, resp
}

// ExpectIdle waits until every limiter holds and awaits nothing and keeps
// no key, and fails t if that does not happen within waitfor's bound.
func ExpectIdle(t testing.TB, limiters ...*httplimit.Limiter) {
	t.Helper()
	for i, l := range limiters {
		waitfor.Cond(t, fmt.Sprintf("limiter %d to be idle", i), func() bool {
			tot := l.Totals()
			return tot.InUse == 0 && tot.Waiting == 0 && tot.Keys == 0
		})
	}
}
