package daemon_test

import (
	"encoding/json"
	"net"
	"net/http"
	"slices"
	"testing"
)

// TestForwardTargetAddr reaches one loopback origin by two names,
// "localhost" (from /etc/hosts) and the literal 127.0.0.1: a target_addr
// limit and rate count them under one key, the address dialled, while a
// target_host limit counts them apart; for CONNECT and absolute-form
// requests alike. Failed dials and refused requests hold no permit.
func TestForwardTargetAddr(t *testing.T) { defaultServer(t, testForwardTargetAddr) }

func testForwardTargetAddr(t *testing.T) {
	if addrs, err := net.LookupHost("localhost"); err != nil || !slices.Contains(addrs, "127.0.0.1") {
		t.Skipf("localhost does not resolve to 127.0.0.1 here (%v, %v)", addrs, err)
	}
	d, _ := startForward(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: byaddr
    protocol: http
    listen: "127.0.0.1:0"
    mode: forward
    forward:
      destinations: {allow: ["127.0.0.0/8"]}
      limits: [{key: target_addr, permits: 1}]
  - name: byhost
    protocol: http
    listen: "127.0.0.1:0"
    mode: forward
    forward:
      destinations: {allow: ["127.0.0.0/8"]}
      limits: [{key: target_host, permits: 1}]
  - name: overridden
    protocol: http
    listen: "127.0.0.1:0"
    mode: forward
    forward:
      destinations: {allow: ["127.0.0.0/8"]}
      limits: [{key: target_addr, permits: 1, overrides: {"127.0.0.0/8": 2}}]
  - name: rated
    protocol: http
    listen: "127.0.0.1:0"
    mode: forward
    rate: {rate: 1r/h, key: target_addr}
    forward:
      destinations: {allow: ["127.0.0.0/8"]}
`)
	echo := tcpEcho(t)
	_, echoPort, _ := net.SplitHostPort(echo)
	idle := func(listener, key string) {
		t.Helper()
		d.waitFor(listener+" permits back to zero", func() bool {
			return d.forwardLimit(listener, key).Totals.InUse == 0
		})
	}

	t.Run("connect", func(t *testing.T) {
		tu, resp := d.openTunnel("byaddr", "127.0.0.2", echo, "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT %s: %d", echo, resp.StatusCode)
		}
		tu.echo(t, "by address")
		lim := d.forwardLimit("byaddr", "target_addr")
		if len(lim.Busy) != 1 || lim.Busy[0].Key != "127.0.0.1:"+echoPort {
			t.Fatalf("target_addr busy keys %+v, want 127.0.0.1:%s", lim.Busy, echoPort)
		}
		_, other := d.openTunnel("byaddr", "127.0.0.2", "localhost:"+echoPort, "")
		if other.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("CONNECT localhost:%s under target_addr while 127.0.0.1 holds the permit: %d, want 429", echoPort, other.StatusCode)
		}
		tu.c.Close()
		idle("byaddr", "target_addr")
		// The permit is free again: the other name gets it, and dials the
		// address it was counted under.
		tu2, resp2 := d.openTunnel("byaddr", "127.0.0.2", "localhost:"+echoPort, "")
		if resp2.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT localhost:%s once free: %d", echoPort, resp2.StatusCode)
		}
		tu2.echo(t, "by name")
		tu2.c.Close()
		idle("byaddr", "target_addr")

		a, r1 := d.openTunnel("byhost", "127.0.0.2", echo, "")
		b, r2 := d.openTunnel("byhost", "127.0.0.2", "localhost:"+echoPort, "")
		if r1.StatusCode != http.StatusOK || r2.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT by both names under target_host: %d, %d; want 200 each (counted apart)", r1.StatusCode, r2.StatusCode)
		}
		a.echo(t, "one")
		b.echo(t, "two")
		if n := d.forwardLimit("byhost", "target_host").Totals.InUse; n != 2 {
			t.Fatalf("target_host in use %d, want 2", n)
		}
		a.c.Close()
		b.c.Close()
		idle("byhost", "target_host")
	})

	t.Run("override", func(t *testing.T) {
		// 127.0.0.0/8 gets 2 permits per address: both names in, a third
		// tunnel to the same address refused.
		a, r1 := d.openTunnel("overridden", "127.0.0.2", echo, "")
		b, r2 := d.openTunnel("overridden", "127.0.0.2", "localhost:"+echoPort, "")
		_, r3 := d.openTunnel("overridden", "127.0.0.2", "localhost:"+echoPort, "")
		if r1.StatusCode != http.StatusOK || r2.StatusCode != http.StatusOK || r3.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("three CONNECTs to one address with an override of 2: %d, %d, %d; want 200, 200, 429", r1.StatusCode, r2.StatusCode, r3.StatusCode)
		}
		a.c.Close()
		b.c.Close()
		idle("overridden", "target_addr")
	})

	t.Run("absolute-form", func(t *testing.T) {
		target := newGatedTarget(t, false)
		_, port, _ := net.SplitHostPort(target.addr)
		byName := "http://localhost:" + port
		for _, tc := range []struct {
			listener, key string
			want          int
		}{
			{"byaddr", "target_addr", http.StatusTooManyRequests},
			{"byhost", "target_host", http.StatusOK},
		} {
			c := d.proxyClient(tc.listener, "", "", "127.0.0.2")
			slow := getAsync(c, target.url("/slow"))
			<-target.entered
			st, body, _ := get(t, c, byName+"/echo")
			if st != tc.want {
				t.Fatalf("%s: GET %s/echo while http://127.0.0.1:%s/slow holds a permit: %d %s, want %d", tc.listener, byName, port, st, body, tc.want)
			}
			if st == http.StatusOK {
				var e echoed
				if err := json.Unmarshal([]byte(body), &e); err != nil || e.Host != "localhost:"+port {
					t.Fatalf("%s: the target saw Host %q (%v), want localhost:%s", tc.listener, e.Host, err, port)
				}
			}
			target.release <- struct{}{}
			if r := <-slow; r.err != nil || r.status != http.StatusOK {
				t.Fatalf("%s: the slow request: %+v", tc.listener, r)
			}
			idle(tc.listener, tc.key)
		}
		// With the permit free, the name is sent to the pinned address with
		// its own Host.
		c := d.proxyClient("byaddr", "", "", "127.0.0.3")
		st, body, _ := get(t, c, byName+"/echo")
		var e echoed
		if st != http.StatusOK || json.Unmarshal([]byte(body), &e) != nil || e.Host != "localhost:"+port {
			t.Fatalf("GET %s/echo through byaddr: %d %s, want 200 with Host localhost:%s", byName, st, body, port)
		}
		idle("byaddr", "target_addr")
	})

	t.Run("rate", func(t *testing.T) {
		target := newGatedTarget(t, false)
		_, port, _ := net.SplitHostPort(target.addr)
		c := d.proxyClient("rated", "", "", "127.0.0.2")
		if st, body, _ := get(t, c, target.url("/echo")); st != http.StatusOK {
			t.Fatalf("first request: %d %s", st, body)
		}
		if st, _, _ := get(t, c, "http://localhost:"+port+"/echo"); st != http.StatusTooManyRequests {
			t.Fatalf("the same address by name under a 1r/h target_addr rate: %d, want 429", st)
		}
	})

	t.Run("dial failure", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := ln.Addr().String()
		ln.Close()
		_, port, _ := net.SplitHostPort(closed)
		for _, authority := range []string{closed, "localhost:" + port} {
			_, resp := d.openTunnel("byaddr", "127.0.0.2", authority, "")
			if resp.StatusCode != http.StatusBadGateway {
				t.Fatalf("CONNECT %s (closed port): %d, want 502", authority, resp.StatusCode)
			}
			c := d.proxyClient("byaddr", "", "", "127.0.0.2")
			if st, _, _ := get(t, c, "http://"+authority+"/"); st != http.StatusBadGateway {
				t.Fatalf("GET http://%s/ (closed port): %d, want 502", authority, st)
			}
		}
		// A port the policy refuses (absolute-form requests may use 80, 443
		// and 1024-65535): answered 403 before any resolution, not counted.
		c := d.proxyClient("byaddr", "", "", "127.0.0.2")
		if st, _, _ := get(t, c, "http://localhost:25/"); st != http.StatusForbidden {
			t.Fatalf("GET http://localhost:25/: %d, want 403", st)
		}
		idle("byaddr", "target_addr")
		if tot := d.forwardLimit("byaddr", "target_addr").Totals; tot.InUse != 0 || tot.Waiting != 0 {
			t.Fatalf("target_addr totals after the failures: %+v", tot)
		}
	})
}
