package forward_test

import (
	"bufio"
	"fmt"
	"github.com/seed-a07d1050/portcullis/internal/proxytest"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/httplimit"
	"github.com/seed-a07d1050/portcullis/internal/forward"
	"github.com/seed-a07d1050/portcullis/internal/proxyauth"
	"github.com/seed-a07d1050/portcullis/internal/waitfor"
)

// byUser is what httplimit.ByUser(proxyauth.UserOf) returns: the function
// itself, as a KeyFunc (ByUser fails only on nil).
var byUser = httplimit.KeyFunc(proxyauth.UserOf)

// A client sending wrong credentials in a loop is answered 407 before any
// limiter: the limiters never count it, and an authenticated user behind
// the same address, limited to one exchange at a time by client address
// and by user, is never refused or queued.
func TestAuthRefusalsNeverCounted(t *testing.T) {
	tg := proxytest.NewTarget(t, proxytest.TargetOptions{})
	failures, err := proxyauth.NewFailureLimiter(proxyauth.FailureConfig{Burst: 10000})
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, stackOptions{
		users:    []string{"alice", "alice-pw"},
		failures: failures,
		limits: []httplimit.Config{
			{Key: httplimit.ByClientIP(nil), Policy: httplimit.Policy{Permits: 1}},
			{Key: byUser, Policy: httplimit.Policy{Permits: 1}},
		},
	})
	const attackers, attempts, legit = 4, 50, 40
	var wg sync.WaitGroup
	for range attackers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := proxyClient(t, s, "alice", "guess", "127.0.0.2")
			for range attempts {
				a, err := try(t.Context(), c, http.MethodGet, "http://"+tg.Addr+"/echo", nil)
				if err != nil || a.status != http.StatusProxyAuthRequired {
					t.Errorf("wrong credentials: %d %v", a.status, err)
					return
				}
			}
		}()
	}
	alice := proxyClient(t, s, "alice", "alice-pw", "127.0.0.2") // the same address
	for i := range legit {
		if got := do(t, alice, http.MethodGet, "http://"+tg.Addr+"/echo", nil); got.status != http.StatusOK {
			t.Fatalf("authenticated request %d: %d %s", i, got.status, got.body)
		}
	}
	wg.Wait()
	for i, l := range s.limits {
		tot := l.Totals()
		if tot.Granted != legit || tot.Refused != 0 || tot.QueueFull != 0 || tot.Keys != 0 {
			t.Errorf("limiter %d counted more than the authenticated requests: %+v", i, tot)
		}
	}
	if st := s.auth.Stats(); st.Failed != attackers*attempts {
		t.Errorf("auth stats %+v, want %d failures", st, attackers*attempts)
	}
}

// proxy_user limit of 2 with a queue of 2: five concurrent slow requests
// by one user give two served at once, two after waiting, one refused with
// 429; another user is unaffected; a user claimed in Authorization changes
// nothing.
func TestProxyUserLimitQueue(t *testing.T) {
	tg := proxytest.NewTarget(t, proxytest.TargetOptions{})
	s := newStack(t, stackOptions{
		users:  []string{"alice", "alice-pw", "bob", "bob-pw"},
		limits: []httplimit.Config{{Key: byUser, Policy: httplimit.Policy{Permits: 2, QueueSize: 2}}},
	})
	lim := s.limits[0]
	alice := proxyClient(t, s, "alice", "alice-pw", "127.0.0.2")
	results := make(chan answer, 5)
	for i := range 5 {
		go func() {
			a, err := try(t.Context(), alice, http.MethodGet, fmt.Sprintf("http://%s/slow?id=%d", tg.Addr, i), nil)
			if err != nil {
				t.Errorf("request %d: %v", i, err)
			}
			results <- a
		}()
	}
	before := map[string]bool{tg.Next(t): true, tg.Next(t): true}
	refused := <-results
	if refused.status != http.StatusTooManyRequests || refused.header.Get("Retry-After") != "1" ||
		refused.header.Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Fatalf("fifth request: %d %v %q", refused.status, refused.header, refused.body)
	}
	waitfor.Cond(t, "two waiting", func() bool { return lim.Totals().Waiting == 2 })
	snap := lim.Snapshot(0).Exchanges
	if len(snap.Keys) != 1 || snap.Keys[0].Key != "alice" || snap.Keys[0].InUse != 2 || snap.Keys[0].Waiting != 2 {
		t.Fatalf("snapshot %+v", snap.Keys)
	}

	// Bob is not held up by alice's queue.
	bob := proxyClient(t, s, "bob", "bob-pw", "127.0.0.3")
	if got := do(t, bob, http.MethodGet, "http://"+tg.Addr+"/echo", nil); got.status != http.StatusOK {
		t.Fatalf("bob while alice is at her limit: %d", got.status)
	}
	// Bob claiming to be alice in Authorization is still bob...
	claim := http.Header{"Authorization": {basic("alice", "x")}}
	if got := do(t, bob, http.MethodGet, "http://"+tg.Addr+"/echo", claim); got.status != http.StatusOK {
		t.Fatalf("bob claiming alice: %d", got.status)
	}
	// ...and the claim alone authenticates no one.
	if got := do(t, proxyClient(t, s, "", "", "127.0.0.4"), http.MethodGet, "http://"+tg.Addr+"/echo", claim); got.status != http.StatusProxyAuthRequired {
		t.Fatalf("a claim without proxy credentials: %d", got.status)
	}

	tg.Open()
	after := map[string]bool{tg.Next(t): true, tg.Next(t): true}
	for id := range after {
		if before[id] {
			t.Fatalf("request %s entered twice", id)
		}
	}
	for range 4 {
		if a := <-results; a.status != http.StatusOK {
			t.Fatalf("served request: %d", a.status)
		}
	}
	tot := lim.Totals()
	if tot.Granted != 4+2 || tot.Refused+tot.QueueFull != 1 {
		t.Fatalf("totals %+v", tot)
	}
	proxytest.ExpectIdle(t, s.limits...)
}

// A target_host limit, outside the user limit, keeps one slow target from
// taking all of a user's permits for other targets.
func TestTargetHostLimit(t *testing.T) {
	tg := proxytest.NewTarget(t, proxytest.TargetOptions{})
	slow := "http://slow.test:" + tg.Port() + "/slow"
	fast := "http://fast.test:" + tg.Port() + "/echo"
	run := func(t *testing.T, limits []httplimit.Config, wantAdmitted int, wantFast int) {
		s := newStack(t, stackOptions{users: []string{"alice", "alice-pw"}, limits: limits})
		c := proxyClient(t, s, "alice", "alice-pw", "127.0.0.2")
		var wg sync.WaitGroup
		statuses := make(chan int, 4)
		for i := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a, err := try(t.Context(), c, http.MethodGet, fmt.Sprintf("%s?id=%d", slow, i), nil)
				if err == nil {
					statuses <- a.status
				}
			}()
		}
		for range wantAdmitted {
			tg.Next(t)
		}
		for range 4 - wantAdmitted {
			if st := <-statuses; st != http.StatusTooManyRequests {
				t.Fatalf("slow request over the limit: %d", st)
			}
		}
		if got := do(t, c, http.MethodGet, fast, nil); got.status != wantFast {
			t.Fatalf("fast target while the slow one is busy: %d, want %d", got.status, wantFast)
		}
		tg.Release <- struct{}{}
		for range wantAdmitted - 1 {
			tg.Release <- struct{}{}
		}
		wg.Wait()
		proxytest.ExpectIdle(t, s.limits...)
	}
	t.Run("with target_host", func(t *testing.T) {
		run(t, []httplimit.Config{
			{Key: forward.ByTargetHost(), Policy: httplimit.Policy{Permits: 2}},
			{Key: byUser, Policy: httplimit.Policy{Permits: 3}},
		}, 2, http.StatusOK)
	})
	t.Run("without", func(t *testing.T) {
		run(t, []httplimit.Config{{Key: byUser, Policy: httplimit.Policy{Permits: 3}}}, 3, http.StatusTooManyRequests)
	})
}

// A CONNECT tunnel holds its permit until it closes.
func TestConnectHoldsPermitUntilClosed(t *testing.T) {
	echo := proxytest.TCPEcho(t)
	tg := proxytest.NewTarget(t, proxytest.TargetOptions{})
	s := newStack(t, stackOptions{
		users:  []string{"alice", "alice-pw"},
		limits: []httplimit.Config{{Key: byUser, Policy: httplimit.Policy{Permits: 1}}},
	})
	lim := s.limits[0]
	creds := basic("alice", "alice-pw")
	c1 := rawConn(t, s, "127.0.0.2")
	br, resp := proxytest.Connect(t, c1, echo, creds)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("first CONNECT: %d", resp.StatusCode)
	}
	io.WriteString(c1, "hi\n")
	if line, _ := br.ReadString('\n'); line != "hi\n" {
		t.Fatalf("echo %q", line)
	}
	if n := lim.Totals().InUse; n != 1 {
		t.Fatalf("%d permits in use with the tunnel open, want 1", n)
	}
	_, resp = proxytest.Connect(t, rawConn(t, s, "127.0.0.3"), echo, creds)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second CONNECT while the first is open: %d", resp.StatusCode)
	}
	if got := do(t, proxyClient(t, s, "alice", "alice-pw", "127.0.0.4"), http.MethodGet, "http://"+tg.Addr+"/echo", nil); got.status != http.StatusTooManyRequests {
		t.Fatalf("a request while the tunnel is open: %d", got.status)
	}
	c1.Close()
	proxytest.ExpectIdle(t, s.limits...)
	_, resp = proxytest.Connect(t, rawConn(t, s, "127.0.0.5"), echo, creds)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT after the first closed: %d", resp.StatusCode)
	}
}

// count_tunnels: false is ExceptConnect around the key plus ReleaseTunnels:
// CONNECTs are not counted at all, and an upgrade holds its permit only
// until its 101. With the default, both hold their permit until they close.
func TestCountTunnelsFalse(t *testing.T) {
	echo := proxytest.TCPEcho(t)
	tg := proxytest.NewTarget(t, proxytest.TargetOptions{})
	creds := basic("alice", "alice-pw")
	upgrade := func(t *testing.T, s *stack) (net.Conn, *bufio.Reader) {
		c := rawConn(t, s, "127.0.0.2")
		fmt.Fprintf(c, "GET http://%s/upgrade HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: echo\r\nProxy-Authorization: %s\r\n\r\n", tg.Addr, tg.Addr, creds)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade: %v %v", resp, err)
		}
		io.WriteString(c, "up\n")
		if line, err := br.ReadString('\n'); err != nil || line != "up\n" {
			t.Fatalf("upgraded echo %q %v", line, err)
		}
		return c, br
	}

	t.Run("false", func(t *testing.T) {
		s := newStack(t, stackOptions{
			users:  []string{"alice", "alice-pw"},
			limits: []httplimit.Config{{Key: forward.ExceptConnect(byUser), Policy: httplimit.Policy{Permits: 1}, ReleaseTunnels: true}},
		})
		lim := s.limits[0]
		for _, ip := range []string{"127.0.0.2", "127.0.0.3"} {
			if _, resp := proxytest.Connect(t, rawConn(t, s, ip), echo, creds); resp.StatusCode != http.StatusOK {
				t.Fatalf("CONNECT: %d", resp.StatusCode)
			}
		}
		waitfor.Cond(t, "two tunnels", func() bool { return s.proxy.Tunnels() == 2 })
		if tot := lim.Totals(); tot.Granted != 0 || tot.InUse != 0 {
			t.Fatalf("CONNECTs were counted: %+v", tot)
		}
		c, _ := upgrade(t, s)
		if tot := lim.Totals(); tot.Granted != 1 || tot.InUse != 0 {
			t.Fatalf("the upgrade kept its permit after the 101: %+v", tot)
		}
		// Ordinary requests are still limited.
		alice := proxyClient(t, s, "alice", "alice-pw", "127.0.0.4")
		go try(t.Context(), alice, http.MethodGet, "http://"+tg.Addr+"/slow?id=held", nil)
		tg.Next(t)
		if got := do(t, alice, http.MethodGet, "http://"+tg.Addr+"/echo", nil); got.status != http.StatusTooManyRequests {
			t.Fatalf("second request at the limit: %d", got.status)
		}
		tg.Release <- struct{}{}
		c.Close()
		proxytest.ExpectIdle(t, s.limits...)
	})
	t.Run("true (default)", func(t *testing.T) {
		s := newStack(t, stackOptions{
			users:  []string{"alice", "alice-pw"},
			limits: []httplimit.Config{{Key: byUser, Policy: httplimit.Policy{Permits: 1}}},
		})
		lim := s.limits[0]
		c, _ := upgrade(t, s)
		if tot := lim.Totals(); tot.InUse != 1 {
			t.Fatalf("the open upgrade holds no permit: %+v", tot)
		}
		if _, resp := proxytest.Connect(t, rawConn(t, s, "127.0.0.3"), echo, creds); resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("CONNECT while the upgrade is open: %d", resp.StatusCode)
		}
		c.Close()
		proxytest.ExpectIdle(t, s.limits...)
	})
}

// Permits come back to zero however an exchange ends.
func TestPermitsBackToZero(t *testing.T) {
	echo := proxytest.TCPEcho(t)
	tg := proxytest.NewTarget(t, proxytest.TargetOptions{})
	limits := func() []httplimit.Config {
		return []httplimit.Config{{Key: httplimit.ByClientIP(nil), Policy: httplimit.Policy{Permits: 8}}, {Key: forward.ByTargetHost(), Policy: httplimit.Policy{Permits: 8}}}
	}

	t.Run("client reset during an exchange", func(t *testing.T) {
		s := newStack(t, stackOptions{limits: limits()})
		c := rawConn(t, s, "127.0.0.2")
		fmt.Fprintf(c, "GET http://%s/slow?id=reset HTTP/1.1\r\nHost: %s\r\n\r\n", tg.Addr, tg.Addr)
		tg.Next(t)
		c.(*net.TCPConn).SetLinger(0)
		c.Close() // RST
		proxytest.ExpectIdle(t, s.limits...)
	})
	t.Run("client reset in a tunnel", func(t *testing.T) {
		s := newStack(t, stackOptions{limits: limits()})
		c := rawConn(t, s, "127.0.0.2")
		if _, resp := proxytest.Connect(t, c, echo, ""); resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT: %d", resp.StatusCode)
		}
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
		proxytest.ExpectIdle(t, s.limits...)
		waitfor.Cond(t, "the tunnel to close", func() bool { return s.proxy.Tunnels() == 0 })
	})
	t.Run("target failure", func(t *testing.T) {
		s := newStack(t, stackOptions{limits: limits()})
		c := proxyClient(t, s, "", "", "127.0.0.2")
		closed := closedPort(t)
		if got := do(t, c, http.MethodGet, "http://"+closed+"/", nil); got.status != http.StatusBadGateway {
			t.Fatalf("status %d", got.status)
		}
		if _, resp := proxytest.Connect(t, rawConn(t, s, "127.0.0.3"), closed, ""); resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("CONNECT status %d", resp.StatusCode)
		}
		proxytest.ExpectIdle(t, s.limits...)
	})
	t.Run("target reset in a tunnel", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err == nil {
				time.Sleep(20 * time.Millisecond)
				c.(*net.TCPConn).SetLinger(0)
				c.Close()
			}
		}()
		s := newStack(t, stackOptions{limits: limits()})
		c := rawConn(t, s, "127.0.0.2")
		br, resp := proxytest.Connect(t, c, ln.Addr().String(), "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT: %d", resp.StatusCode)
		}
		io.Copy(io.Discard, br) // ends when the proxy closes the client side
		proxytest.ExpectIdle(t, s.limits...)
	})
	t.Run("panic", func(t *testing.T) {
		s := newStack(t, stackOptions{limits: limits(), proxy: forward.Config{Transport: panicking{}}})
		c := proxyClient(t, s, "", "", "127.0.0.2")
		if _, err := try(t.Context(), c, http.MethodGet, "http://"+tg.Addr+"/echo", nil); err == nil {
			t.Fatal("a request whose transport panicked got an answer")
		}
		proxytest.ExpectIdle(t, s.limits...)
	})
	t.Run("shutdown", func(t *testing.T) {
		s := newStack(t, stackOptions{limits: limits()})
		c := rawConn(t, s, "127.0.0.2")
		if _, resp := proxytest.Connect(t, c, echo, ""); resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT: %d", resp.StatusCode)
		}
		go try(t.Context(), proxyClient(t, s, "", "", "127.0.0.3"), http.MethodGet, "http://"+tg.Addr+"/slow?id=shutdown", nil)
		tg.Next(t)
		waitfor.Cond(t, "two permits in use", func() bool { return s.limits[0].Totals().InUse == 2 })
		// What the daemon does when its drain time is up: close the server
		// (which cuts exchanges, not hijacked connections) and the Proxy
		// (which cuts tunnels).
		s.srv.Config.Close()
		s.proxy.Close()
		proxytest.ExpectIdle(t, s.limits...)
	})
}

// panicking is a Transport that panics, as a bug in it would.
type panicking struct{}

func (panicking) RoundTrip(*http.Request) (*http.Response, error) {
	panic(strings.Repeat("boom", 1))
}
