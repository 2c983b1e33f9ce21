package daemon_test

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestForward407NeverCounted has a client send wrong credentials in a loop
// while an authenticated user works: no refused request ever reaches a
// limiter (their totals count the user's requests and nothing else), and
// the user, whose credentials are cached, never waits for the bcrypt check
// slot the attacker keeps busy.
func TestForward407NeverCounted(t *testing.T) { defaultServer(t, testForward407NeverCounted) }

func testForward407NeverCounted(t *testing.T) {
	d, _ := startForward(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: egress
    protocol: http
    listen: "127.0.0.1:0"
    mode: forward
    client_limit: {permits: 4}
    auth: {htpasswd: "{{htpasswd}}", max_concurrent_checks: 1, failures: {burst: 1000}}
    forward:
      destinations: {allow: ["127.0.0.0/8"]}
      limits:
        - {key: target_host, permits: 4}
        - {key: proxy_user, permits: 2}
`)
	target := newGatedTarget(t, false)
	attacker := d.proxyClient("egress", "alice", "guess", "127.0.0.2")
	alice := d.proxyClient("egress", "alice", "alice-pw", "127.0.0.3")

	var attempts, unexpected atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ { // bounded: stops at 2000 or when told
				select {
				case <-stop:
					return
				default:
				}
				resp, err := attacker.Get(target.url("/echo"))
				if err != nil {
					unexpected.Add(1)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				attempts.Add(1)
				if resp.StatusCode != http.StatusProxyAuthRequired {
					unexpected.Add(1)
				}
			}
		}()
	}
	d.waitFor("the attacker's first failures", func() bool { return attempts.Load() >= 5 })
	const requests = 40
	for i := range requests {
		resp, err := alice.Get(target.url("/echo"))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("alice's request %d during the attack: %d", i, resp.StatusCode)
		}
		for _, l := range append(d.forwardOf("egress").Limits, *d.listener("egress").ClientLimit) {
			for _, k := range l.Busy {
				if k.Key == "127.0.0.2" {
					t.Fatalf("the attacker holds a permit of the %s limit: %+v", l.Key, k)
				}
			}
		}
	}
	close(stop)
	wg.Wait()
	if unexpected.Load() != 0 {
		t.Fatalf("%d of the attacker's requests were not answered 407", unexpected.Load())
	}
	l := d.listener("egress")
	for _, lim := range append(l.Forward.Limits, *l.ClientLimit) {
		if lim.Totals.Granted != requests || lim.Totals.Refused != 0 || lim.Totals.QueueFull != 0 {
			t.Errorf("%s limit totals %+v: want exactly alice's %d requests granted, nothing refused", lim.Key, lim.Totals, requests)
		}
	}
	if a := l.Auth; a.CacheHits != requests-1 || a.Verified != 1 || a.Failed != uint64(attempts.Load()) {
		t.Errorf("auth %+v: want alice checked once then cached, and every one of the %d attempts failed", a, attempts.Load())
	}
	t.Logf("%d wrong attempts during alice's %d requests", attempts.Load(), requests)
}

// TestForwardProxyUserQueue limits each user to 2 requests at once with 2
// more waiting: of 5 slow requests by one user, 2 are served at once, 2
// after waiting, and 1 is refused with 429; another user is not affected,
// and naming another user in Authorization changes nothing.
func TestForwardProxyUserQueue(t *testing.T) { defaultServer(t, testForwardProxyUserQueue) }

func testForwardProxyUserQueue(t *testing.T) {
	d, _ := startForward(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: egress
    protocol: http
    listen: "127.0.0.1:0"
    mode: forward
    auth: {htpasswd: "{{htpasswd}}"}
    forward:
      destinations: {allow: ["127.0.0.0/8"]}
      limits:
        - {key: proxy_user, permits: 2, queue: {size: 2, timeout: 20s}}
`)
	target := newGatedTarget(t, false)
	alice := d.proxyClient("egress", "alice", "alice-pw", "127.0.0.2")
	results := make(chan int, 5)
	for range 5 {
		go func() {
			resp, err := alice.Get(target.url("/slow"))
			if err != nil {
				results <- -1
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			results <- resp.StatusCode
		}()
	}
	d.waitFor("2 of alice's requests at the target and 2 waiting", func() bool {
		lim := d.forwardLimit("egress", "proxy_user")
		return target.inFlight.Load() == 2 && lim.Totals.InUse == 2 && lim.Totals.Waiting == 2
	})
	select {
	case st := <-results:
		if st != http.StatusTooManyRequests {
			t.Fatalf("the fifth request: %d, want 429", st)
		}
	case <-time.After(waitLimit):
		t.Fatal("the fifth request was not refused at once")
	}
	lim := d.forwardLimit("egress", "proxy_user")
	if len(lim.Busy) != 1 || lim.Busy[0].Key != "alice" || lim.Busy[0].InUse != 2 || lim.Busy[0].Waiting != 2 {
		t.Fatalf("busy keys %+v, want alice with 2 in use and 2 waiting", lim.Busy)
	}

	// Bob is not affected.
	bob := d.proxyClient("egress", "bob", "bob-pw", "127.0.0.3")
	if st, body, _ := get(t, bob, target.url("/echo")); st != http.StatusOK {
		t.Fatalf("bob while alice is full: %d %s", st, body)
	}
	// Alice's credentials with another name in Authorization still count
	// as alice, whose queue is full.
	req, _ := http.NewRequest("GET", target.url("/echo"), nil)
	req.Header.Set("Authorization", basicAuth("bob", "x"))
	resp, err := d.proxyClient("egress", "alice", "alice-pw", "127.0.0.4").Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("alice naming bob in Authorization: %d Retry-After %q, want 429 and 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	// A name in Authorization without proxy credentials is no user at all.
	req, _ = http.NewRequest("GET", target.url("/echo"), nil)
	req.Header.Set("Authorization", basicAuth("carol", "x"))
	resp, err = d.proxyClient("egress", "", "", "127.0.0.5").Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusProxyAuthRequired {
		t.Fatalf("a user named only in Authorization: %d, want 407", resp.StatusCode)
	}

	target.open()
	for i := range 4 {
		select {
		case st := <-results:
			if st != http.StatusOK {
				t.Fatalf("request %d of the four admitted: %d", i, st)
			}
		case <-time.After(waitLimit):
			t.Fatal("the admitted requests did not finish")
		}
	}
	if n := target.maxInFlight.Load(); n != 2 {
		t.Fatalf("alice had %d requests at the target at once, want 2", n)
	}
	if tot := d.forwardLimit("egress", "proxy_user").Totals; tot.Granted != 5 || tot.QueueFull != 2 {
		t.Fatalf("totals %+v: want 5 granted (4 of alice's, 1 of bob's) and 2 refused with a full queue", tot)
	}
}

// TestForwardTargetHostIsolation puts a target_host limit outside a
// proxy_user limit: requests waiting for a slow target hold none of the
// user's permits, so the user still reaches other targets.
func TestForwardTargetHostIsolation(t *testing.T) { defaultServer(t, testForwardTargetHostIsolation) }

func testForwardTargetHostIsolation(t *testing.T) {
	d, _ := startForward(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: egress
    protocol: http
    listen: "127.0.0.1:0"
    mode: forward
    auth: {htpasswd: "{{htpasswd}}"}
    forward:
      destinations: {allow: ["127.0.0.0/8"]}
      limits:
        - {key: target_host, permits: 2, queue: {size: 8, timeout: 20s}}
        - {key: proxy_user, permits: 3}
`)
	slow, fast := newGatedTarget(t, false), newGatedTarget(t, false)
	alice := d.proxyClient("egress", "alice", "alice-pw", "127.0.0.2")
	var done sync.WaitGroup
	for range 5 {
		done.Add(1)
		go func() {
			defer done.Done()
			if resp, err := alice.Get(slow.url("/slow")); err == nil {
				resp.Body.Close()
			}
		}()
	}
	d.waitFor("2 at the slow target and 3 waiting for it", func() bool {
		lim := d.forwardLimit("egress", "target_host")
		return slow.inFlight.Load() == 2 && lim.Totals.Waiting == 3
	})
	lim := d.forwardLimit("egress", "target_host")
	if len(lim.Busy) != 1 || lim.Busy[0].Key != slow.addr {
		t.Fatalf("target_host busy keys %+v, want %s", lim.Busy, slow.addr)
	}
	if users := d.forwardLimit("egress", "proxy_user"); users.Totals.InUse != 2 {
		t.Fatalf("alice holds %d user permits, want 2: the waiting requests must hold none", users.Totals.InUse)
	}
	for range 3 { // one user permit left: three requests one after the other
		if st, body, _ := get(t, alice, fast.url("/echo")); st != http.StatusOK {
			t.Fatalf("alice to another target while the slow one is full: %d %s", st, body)
		}
	}
	slow.open()
	done.Wait()
}

// TestForwardTunnelsHoldPermits checks that a CONNECT tunnel and an
// upgraded connection hold their permit until they close, and that with
// count_tunnels: false a CONNECT is not counted and an upgrade gives its
// permit back after its 101.
func TestForwardTunnelsHoldPermits(t *testing.T) { defaultServer(t, testForwardTunnelsHoldPermits) }

func testForwardTunnelsHoldPermits(t *testing.T) {
	d, _ := startForward(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: counting
    protocol: http
    listen: "127.0.0.1:0"
    mode: forward
    forward:
      destinations: {allow: ["127.0.0.0/8"]}
      limits: [{key: client_ip, permits: 1}]
  - name: notcounting
    protocol: http
    listen: "127.0.0.1:0"
    mode: forward
    forward:
      destinations: {allow: ["127.0.0.0/8"]}
      limits: [{key: client_ip, permits: 1, count_tunnels: false}]
`)
	echo := tcpEcho(t)
	target := newGatedTarget(t, false)

	t.Run("counted", func(t *testing.T) {
		tu, resp := d.openTunnel("counting", "127.0.0.2", echo, "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT: %d", resp.StatusCode)
		}
		tu.echo(t, "hello")
		if n := d.forwardLimit("counting", "client_ip").Totals.InUse; n != 1 {
			t.Fatalf("%d permits in use with a tunnel open, want 1", n)
		}
		_, second := d.openTunnel("counting", "127.0.0.2", echo, "")
		if second.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("a second CONNECT: %d, want 429", second.StatusCode)
		}
		c := d.proxyClient("counting", "", "", "127.0.0.2")
		if st, _, _ := get(t, c, target.url("/echo")); st != http.StatusTooManyRequests {
			t.Fatalf("a request while the tunnel holds the permit: %d, want 429", st)
		}
		tu.echo(t, "still open")
		tu.c.Close()
		d.waitFor("the permit back once the tunnel closed", func() bool {
			return d.forwardLimit("counting", "client_ip").Totals.InUse == 0
		})
		if st, _, _ := get(t, c, target.url("/echo")); st != http.StatusOK {
			t.Fatalf("a request after the tunnel closed: %d", st)
		}
	})

	t.Run("not counted", func(t *testing.T) {
		var tunnels []*tunnel
		for range 2 {
			tu, resp := d.openTunnel("notcounting", "127.0.0.3", echo, "")
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("CONNECT: %d", resp.StatusCode)
			}
			tu.echo(t, "hello")
			tunnels = append(tunnels, tu)
		}
		if n := d.forwardLimit("notcounting", "client_ip").Totals.InUse; n != 0 {
			t.Fatalf("%d permits in use by tunnels not counted", n)
		}
		if n := d.forwardOf("notcounting").TunnelsOpen; n != 2 {
			t.Fatalf("%d tunnels open, want 2", n)
		}
		c := d.proxyClient("notcounting", "", "", "127.0.0.3")
		if st, _, _ := get(t, c, target.url("/echo")); st != http.StatusOK {
			t.Fatalf("a request beside two tunnels: %d, want 200", st)
		}
		for _, tu := range tunnels {
			tu.c.Close()
		}
		d.waitFor("the tunnels closed", func() bool { return d.forwardOf("notcounting").TunnelsOpen == 0 })
	})

	t.Run("upgrade", func(t *testing.T) {
		for _, tc := range []struct {
			listener, ip string
			held         int
		}{{"counting", "127.0.0.4", 1}, {"notcounting", "127.0.0.5", 0}} {
			c := dialFrom(t, tc.ip, d.srv.Addr(tc.listener).String())
			ws := d.backend.URL() + "/ws"
			_, _ = io.WriteString(c, "GET "+ws+" HTTP/1.1\r\nHost: "+strings.TrimPrefix(d.backend.URL(), "http://")+
				"\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
			head := make([]byte, 12)
			if _, err := io.ReadFull(c, head); err != nil || string(head) != "HTTP/1.1 101" {
				t.Fatalf("%s: upgrade answered %q, %v", tc.listener, head, err)
			}
			d.waitFor(tc.listener+" permits with the upgraded connection open", func() bool {
				return d.forwardLimit(tc.listener, "client_ip").Totals.InUse == tc.held
			})
			c.Close()
			d.waitFor(tc.listener+" permits back after the upgraded connection closed", func() bool {
				return d.forwardLimit(tc.listener, "client_ip").Totals.InUse == 0
			})
		}
	})
}

// TestForwardResponseOverride answers a refusal with the limit's own
// body and headers, and its status and Retry-After.
func TestForwardResponseOverride(t *testing.T) { defaultServer(t, testForwardResponseOverride) }

func testForwardResponseOverride(t *testing.T) {
	d, _ := startForward(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: egress
    protocol: http
    listen: "127.0.0.1:0"
    mode: forward
    forward:
      destinations: {allow: ["127.0.0.0/8"]}
      limits:
        - key: client_ip
          permits: 1
          status: 503
          retry_after: 7s
          response:
            body: '{"error": "one request at a time"}'
            headers: {Content-Type: application/json, X-Limit: client_ip}
`)
	target := newGatedTarget(t, false)
	c := d.proxyClient("egress", "", "", "127.0.0.2")
	slow := getAsync(c, target.url("/slow"))
	d.waitFor("the permit held", func() bool { return target.inFlight.Load() == 1 })
	st, body, h := get(t, c, target.url("/echo"))
	if st != http.StatusServiceUnavailable || body != `{"error": "one request at a time"}` ||
		h.Get("Content-Type") != "application/json" || h.Get("X-Limit") != "client_ip" || h.Get("Retry-After") != "7" {
		t.Fatalf("refusal: %d %q %v", st, body, h)
	}
	target.open()
	await(t, slow)
}
