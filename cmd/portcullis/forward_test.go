package main

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/seed-a07d1050/portcullis/internal/backend"
)

// writeUsers writes an htpasswd file of bcrypt hashes (least cost).
func writeUsers(t *testing.T, path string, pairs ...string) {
	t.Helper()
	var b strings.Builder
	for i := 0; i+1 < len(pairs); i += 2 {
		h, err := bcrypt.GenerateFromPassword([]byte(pairs[i+1]), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s:%s\n", pairs[i], h)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// viaProxy returns a client sending its requests through the forward
// listener at addr as user (none when "").
func viaProxy(addr, user, pass string) *http.Client {
	u := &url.URL{Scheme: "http", Host: addr}
	if user != "" {
		u.User = url.UserPassword(user, pass)
	}
	return &http.Client{Timeout: waitLimit, Transport: &http.Transport{Proxy: http.ProxyURL(u)}}
}

func status(t *testing.T, c *http.Client, target string) int {
	t.Helper()
	resp, err := c.Get(target)
	if err != nil {
		t.Fatalf("GET %s: %v", target, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestRunForwardFromFlags runs the forward proxy from the command line
// alone: --forward --listen with a per-client limit, an htpasswd file read
// again on SIGHUP, and loopback let through the destination policy.
func TestRunForwardFromFlags(t *testing.T) {
	b, err := backend.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	users := filepath.Join(t.TempDir(), "users.htpasswd")
	writeUsers(t, users, "alice", "alice-pw")
	sig := &signals{}
	logs := &syncBuffer{}
	srv, code := startRun(t, []string{"run", "--forward", "--listen", "127.0.0.1:0", "--max-concurrent-per-client", "1",
		"--htpasswd", users, "--forward-allow", "127.0.0.0/8", "--admin", "127.0.0.1:0"}, sig, io.Discard, logs)
	addr := srv.Addr("forward").String()
	alice := viaProxy(addr, "alice", "alice-pw")

	if st := status(t, alice, b.URL()+"/"); st != http.StatusOK {
		t.Fatalf("through the proxy: %d", st)
	}
	if st := status(t, viaProxy(addr, "", ""), b.URL()+"/"); st != http.StatusProxyAuthRequired {
		t.Fatalf("without credentials: %d, want 407", st)
	}
	if st := status(t, alice, "http://10.0.0.1:8080/"); st != http.StatusForbidden {
		t.Fatalf("a private target not let through: %d, want 403", st)
	}
	slow := make(chan int, 1)
	go func() { slow <- status(t, alice, b.URL()+"/slow?ms=1000") }()
	if !waitFor(func() bool { return b.Handler().InFlight() == 1 }) {
		t.Fatal("the slow request did not reach the backend")
	}
	if st := status(t, viaProxy(addr, "alice", "alice-pw"), b.URL()+"/"); st != http.StatusTooManyRequests {
		t.Fatalf("a second request at once from one client: %d, want 429 (--max-concurrent-per-client 1)", st)
	}
	if st := <-slow; st != http.StatusOK {
		t.Fatalf("the slow request: %d", st)
	}

	// SIGHUP reads the htpasswd file again.
	writeUsers(t, users, "alice", "alice-pw", "bob", "bob-pw")
	sig.send(syscall.SIGHUP)
	if !waitFor(func() bool { return status(t, viaProxy(addr, "bob", "bob-pw"), b.URL()+"/") == http.StatusOK }) {
		t.Fatalf("bob, added to the file, not let in after SIGHUP:\n%s", logs.String())
	}
	sig.send(syscall.SIGTERM)
	if c := waitCode(t, code); c != exitOK {
		t.Fatalf("exit code %d", c)
	}
}

// TestRunConfigWithMaxConcurrent checks what --max-concurrent-per-client
// does with --config: every HTTP listener without a client_limit of its
// own, forward and reverse, gets one of N; a listener whose file sets one
// keeps it; and so again after a reload.
func TestRunConfigWithMaxConcurrent(t *testing.T) {
	b, err := backend.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	file := writeFile(t, `
listeners:
  - name: egress
    protocol: http
    listen: 127.0.0.1:0
    mode: forward
    forward: {destinations: {allow: [127.0.0.0/8]}}
  - name: web
    protocol: http
    listen: 127.0.0.1:0
    routes: [{upstreams: ["`+b.URL()+`"]}]
  - name: own
    protocol: http
    listen: 127.0.0.1:0
    client_limit: {permits: 7}
    routes: [{upstreams: ["`+b.URL()+`"]}]
  - name: db
    protocol: tcp
    listen: 127.0.0.1:0
    upstream: 127.0.0.1:1
`)
	sig := &signals{}
	logs := &syncBuffer{}
	srv, code := startRun(t, []string{"run", "--config", file, "--max-concurrent-per-client", "2"}, sig, io.Discard, logs)
	check := func(when string) {
		t.Helper()
		want := map[string]int{"egress": 2, "web": 2, "own": 7}
		for _, l := range srv.Snapshot().Listeners {
			n, ok := want[l.Name]
			switch {
			case !ok && l.ClientLimit != nil:
				t.Errorf("%s: listener %s got a client limit", when, l.Name)
			case ok && (l.ClientLimit == nil || l.ClientLimit.Permits != n):
				t.Errorf("%s: listener %s client limit %+v, want %d permits", when, l.Name, l.ClientLimit, n)
			}
		}
	}
	check("at start")
	for _, want := range []string{"a client_limit of 2 per client on listeners [egress web]", "listeners [own] keep the client_limit of the file"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, logs.String())
		}
	}
	// The limit works on the forward listener.
	c := viaProxy(srv.Addr("egress").String(), "", "")
	if st := status(t, c, b.URL()+"/"); st != http.StatusOK {
		t.Fatalf("through the forward listener: %d", st)
	}
	sig.send(syscall.SIGHUP)
	if !waitFor(func() bool { return strings.Count(logs.String(), "a client_limit of 2") == 2 }) {
		t.Fatalf("no reload:\n%s", logs.String())
	}
	check("after a reload")
	sig.send(syscall.SIGTERM)
	if c := waitCode(t, code); c != exitOK {
		t.Fatalf("exit code %d", c)
	}
}
