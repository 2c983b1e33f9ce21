package daemon_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/daemon"
)

// readyz returns the status and body of /readyz.
func (d *testDaemon) readyz() (int, string) {
	d.t.Helper()
	st, body, _ := get(d.t, d.client("127.0.0.1"), d.adminURL("/readyz"))
	return st, body
}

// keptAlive is a keep-alive connection from a client address that has
// served one request, to show that a listener kept serving it.
type keptAlive struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func keepAlive(t *testing.T, ip, addr string) *keptAlive {
	k := &keptAlive{t: t, c: dialFrom(t, ip, addr)}
	k.br = bufio.NewReader(k.c)
	k.get("/")
	return k
}

// get sends one request on the connection and checks the answer is 200.
func (k *keptAlive) get(path string) {
	k.t.Helper()
	_ = k.c.SetDeadline(time.Now().Add(waitLimit))
	fmt.Fprintf(k.c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
	resp, err := http.ReadResponse(k.br, nil)
	if err != nil {
		k.t.Fatalf("GET %s on the kept-alive connection: %v", path, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		k.t.Fatalf("GET %s on the kept-alive connection: %d", path, resp.StatusCode)
	}
}

// capOf reports how many more connections the client at ip can open on
// addr before one is refused, trying at most max+1; max+1 means none was
// refused. The connections it opened are closed when it returns.
func capOf(t *testing.T, ip, addr string, max int) int {
	t.Helper()
	var opened []net.Conn
	defer func() {
		for _, c := range opened {
			_ = c.Close()
		}
	}()
	for n := range max + 1 {
		c := dialFrom(t, ip, addr)
		opened = append(opened, c)
		if refusedAtOnce(t, c) {
			return n
		}
	}
	return max + 1
}

// TestFailedReloadChangesNothing fails a reload at each of its two failure
// points, after a listener at the same address changed its socket settings
// (the case that used to close the listener for good): the old
// configuration keeps serving on every listener, connections kept alive
// across the failure are still served, /readyz says ready throughout, and a
// later reload, back to the original file or on to the new one, applies.
func TestFailedReloadChangesNothing(t *testing.T) { defaultServer(t, testFailedReloadChangesNothing) }

func testFailedReloadChangesNothing(t *testing.T) {
	for _, point := range []string{"a port is taken", "a route table cannot be built"} {
		t.Run(point, func(t *testing.T) {
			d := startDaemon(t, reloadA)
			addr := d.srv.Addr("web").String()
			kept := keepAlive(t, "127.0.0.2", addr)

			changed := d.sameAddr(reloadB)
			changed.Listeners[0].MaxConnsPerClient = 2
			failing := d.sameAddr(reloadB)
			failing.Listeners[0].MaxConnsPerClient = 2
			switch point {
			case "a port is taken":
				busy, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				defer busy.Close()
				failing.Listeners = append(failing.Listeners, config.Listener{
					Name: "clash", Protocol: config.ProtocolHTTP, Listen: busy.Addr().String(),
					Routes: []config.Route{{Upstreams: []string{d.backend.URL()}}},
				})
			case "a route table cannot be built":
				restore := daemon.SetTestHooks(nil, func(string) error { return errors.New("injected build failure") })
				defer restore()
			}
			if err := d.srv.Reload(failing); err == nil {
				t.Fatal("the reload succeeded, want it to fail")
			}
			daemon.SetTestHooks(nil, nil)

			if st, body := d.readyz(); st != http.StatusOK {
				t.Errorf("/readyz after a failed reload: %d %q", st, body)
			}
			kept.get("/again")
			if n := capOf(t, "127.0.0.3", addr, 3); n != 4 {
				t.Errorf("a new client opened %d connections before a refusal, want more than 3 under the running cap of 64", n)
			}
			if p := d.route("web", "extra").Limit.Permits; p != 1 {
				t.Errorf("extra route has %d permits after the failed reload, want the running 1", p)
			}

			if err := d.srv.Reload(d.sameAddr(reloadA)); err != nil {
				t.Fatalf("reload back to the original file: %v", err)
			}
			kept.get("/after-original")
			if err := d.srv.Reload(changed); err != nil {
				t.Fatalf("reload to the changed file: %v", err)
			}
			if got := d.srv.Addr("web").String(); got != addr {
				t.Fatalf("web moved to %s, want %s", got, addr)
			}
			if n := capOf(t, "127.0.0.4", addr, 3); n != 2 {
				t.Errorf("a new client opened %d connections after the reload, want the new cap of 2", n)
			}
			if st, body := d.readyz(); st != http.StatusOK {
				t.Errorf("/readyz after the reload: %d %q", st, body)
			}
		})
	}
}

// TestReloadKeepsConnectionCounts holds a client's whole cap in slow
// exchanges across reloads that change the listener's socket settings, at
// the same address and then at a new one: the new listener counts the
// draining connections, so the client never holds more than the cap.
func TestReloadKeepsConnectionCounts(t *testing.T) { defaultServer(t, testReloadKeepsConnectionCounts) }

func testReloadKeepsConnectionCounts(t *testing.T) {
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    max_conns_per_client: 2
    routes:
      - upstreams: ["{{backend}}"]
`)
	addr := d.srv.Addr("web").String()
	var slow []<-chan result
	for range 2 {
		slow = append(slow, getAsync(clientFrom("127.0.0.2"), "http://"+addr+"/?ms=3000"))
	}
	d.waitFor("two slow exchanges", func() bool { return d.backend.inFlight.Load() == 2 })

	sameAddr := d.sameAddr(`
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    max_conns_per_client: 3
    read_header_timeout: 5s
    routes:
      - upstreams: ["{{backend}}"]
`)
	if err := d.srv.Reload(sameAddr); err != nil {
		t.Fatal(err)
	}
	if n := capOf(t, "127.0.0.2", addr, 3); n != 1 {
		t.Errorf("after a reload to a cap of 3 at the same address: %d more connections, want 1 (2 still open)", n)
	}
	d.waitFor("the slow exchanges alone to be open", func() bool { return d.listener("web").Connections.Open == 2 })

	moved := parseConfig(t, strings.Replace(`
admin: {listen: "ADMIN"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    max_conns_per_client: 3
    routes:
      - upstreams: ["{{backend}}"]
`, "ADMIN", d.srv.AdminAddr().String(), 1), d.backend.URL())
	if err := d.srv.Reload(moved); err != nil {
		t.Fatal(err)
	}
	newAddr := d.srv.Addr("web").String()
	if newAddr == addr {
		t.Fatal("the listener did not move")
	}
	// The two slow exchanges drain on the old socket; the moved listener
	// counts them.
	if n := capOf(t, "127.0.0.2", newAddr, 3); n != 1 {
		t.Errorf("after moving: %d more connections, want 1 (2 still open on the old address)", n)
	}
	for _, ch := range slow {
		if r := await(t, ch); r.err != nil || r.status != http.StatusOK {
			t.Errorf("slow exchange across the reloads: %+v", r)
		}
	}
	d.waitFor("the drained connections to leave the count", func() bool { return d.listener("web").Connections.Open == 0 })
	if n := capOf(t, "127.0.0.2", newAddr, 3); n != 3 {
		t.Errorf("once drained: %d connections, want the cap of 3", n)
	}
}

// TestReadyzWhenAnHTTP3RebindFails changes an http3 listener at its
// address, whose UDP socket must be bound again, and makes that bind fail:
// the running settings are bound again and /readyz stays ready; when that
// fails too, /readyz says which listener is down until a reload binds it.
func TestReadyzWhenAnHTTP3RebindFails(t *testing.T) {
	certFile, keyFile, _ := selfSigned(t)
	text := `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: h3
    protocol: http3
    listen: "127.0.0.1:0"
    tls: {cert_file: "` + certFile + `", key_file: "` + keyFile + `"}
    routes:
      - upstreams: ["{{backend}}"]
`
	d := startDaemon(t, text)
	pinned := strings.Replace(strings.Replace(text, `listen: "127.0.0.1:0"`, `listen: "`+d.srv.AdminAddr().String()+`"`, 1),
		`listen: "127.0.0.1:0"`, `listen: "`+d.srv.Addr("h3").String()+`"`, 1)
	changed := parseConfig(t, pinned, d.backend.URL())
	changed.Listeners[0].MaxConnsPerClient = 5

	fails := 0
	restore := daemon.SetTestHooks(func(lc config.Listener) error {
		if lc.Name == "h3" && fails > 0 {
			fails--
			return errors.New("injected bind failure")
		}
		return nil
	}, nil)
	defer restore()

	fails = 1 // the new bind fails, binding the running settings again works
	if err := d.srv.Reload(changed); err == nil {
		t.Fatal("the reload succeeded, want the injected failure")
	}
	if st, body := d.readyz(); st != http.StatusOK {
		t.Errorf("/readyz after a rolled back http3 rebind: %d %q", st, body)
	}
	if a := d.srv.Addr("h3"); a == nil || a.String() != changed.Listeners[0].Listen {
		t.Fatalf("the http3 listener is at %v after the rollback, want %s", a, changed.Listeners[0].Listen)
	}

	fails = 2 // both binds fail: the listener is down
	if err := d.srv.Reload(changed); err == nil {
		t.Fatal("the reload succeeded, want the injected failure")
	}
	if st, body := d.readyz(); st != http.StatusServiceUnavailable || !strings.Contains(body, "h3") {
		t.Errorf("/readyz with the http3 listener down: %d %q, want 503 naming h3", st, body)
	}

	if err := d.srv.Reload(changed); err != nil {
		t.Fatalf("reload once binding works again: %v", err)
	}
	if st, body := d.readyz(); st != http.StatusOK {
		t.Errorf("/readyz after the good reload: %d %q", st, body)
	}
}

// TestRetiredLimiterEndsWithItsLastPermit reloads a route's limit while a
// WebSocket holds one of its permits: the retired limiter is waited for
// without polling, and closed as soon as the socket closes.
func TestRetiredLimiterEndsWithItsLastPermit(t *testing.T) {
	defaultServer(t, testRetiredLimiterEndsWithItsLastPermit)
}

func testRetiredLimiterEndsWithItsLastPermit(t *testing.T) {
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - name: ws
        upstreams: ["{{backend}}"]
        limit: {permits: 2}
`)
	c := dialFrom(t, "127.0.0.2", d.srv.Addr("web").String())
	_ = c.SetDeadline(time.Now().Add(waitLimit))
	fmt.Fprint(c, "GET /ws HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nOrigin: http://localhost/\r\n\r\n")
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 101") {
		t.Fatalf("upgrade: %q %v", line, err)
	}
	before := retiring()
	cfg := d.sameAddr(`
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - name: ws
        upstreams: ["{{backend}}"]
        limit: {permits: 3}
`)
	if err := d.srv.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if n := retiring(); n != before+1 {
		t.Fatalf("%d limiters waiting to retire, want %d", n, before+1)
	}
	time.Sleep(200 * time.Millisecond)
	if stacks := retiringStacks(); strings.Contains(stacks, "time.Sleep") || strings.Contains(stacks, "Ticker") {
		t.Errorf("the retiring limiter polls:\n%s", stacks)
	}
	c.Close()
	d.waitFor("the retired limiter to close", func() bool { return retiring() == before })
}

// retiring counts the goroutines waiting to close a retired limiter.
func retiring() int { return len(retiringGoroutines()) }

func retiringStacks() string { return strings.Join(retiringGoroutines(), "\n\n") }

func retiringGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "route.Background.retireLimiter.func") {
			out = append(out, g)
		}
	}
	return out
}

// TestReloadsUnderAConnectionFlood floods one listener from one address
// with slow requests while reloads keep replacing the listener on its
// socket: the backend never sees more of the client's requests at once
// than its connection cap, whichever listener generation admitted them.
func TestReloadsUnderAConnectionFlood(t *testing.T) {
	defaultServer(t, testReloadsUnderAConnectionFlood)
}

func testReloadsUnderAConnectionFlood(t *testing.T) {
	const text = `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    max_conns_per_client: 4
    read_header_timeout: RHT
    routes:
      - upstreams: ["{{backend}}"]
`
	d := startDaemon(t, strings.Replace(text, "RHT", "10s", 1))
	addr := d.srv.Addr("web").String()
	done := make(chan struct{})
	flood := make(chan struct{})
	go func() {
		defer close(flood)
		dialer := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.9")}, Timeout: waitLimit}
		for {
			select {
			case <-done:
				return
			default:
			}
			c, err := dialer.Dial("tcp", addr)
			if err != nil {
				continue
			}
			fmt.Fprint(c, "GET /?ms=400 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(waitLimit))
				_, _ = io.Copy(io.Discard, c)
			}()
			time.Sleep(2 * time.Millisecond)
		}
	}()
	for i := range 20 {
		rht := []string{"5s", "6s"}[i%2]
		if err := d.srv.Reload(d.sameAddr(strings.Replace(text, "RHT", rht, 1))); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(done)
	<-flood
	if m := d.backend.maxInFlight.Load(); m > 4 {
		t.Errorf("the backend saw %d requests of one client at once across reloads, over its connection cap of 4", m)
	}
	d.waitFor("the flood's connections to close", func() bool { return d.listener("web").Connections.Open == 0 })
}

// TestReloadKeepsPortZeroSocketsApart reloads two listeners both written
// "127.0.0.1:0", both changed: each keeps its own port and never takes over
// the other's socket.
func TestReloadKeepsPortZeroSocketsApart(t *testing.T) {
	defaultServer(t, testReloadKeepsPortZeroSocketsApart)
}

func testReloadKeepsPortZeroSocketsApart(t *testing.T) {
	text := `
listeners:
  - name: a
    protocol: http
    listen: "127.0.0.1:0"
    read_header_timeout: RHT
    routes:
      - upstreams: ["{{backend}}"]
  - name: b
    protocol: http
    listen: "127.0.0.1:0"
    read_header_timeout: RHT
    routes:
      - upstreams: ["{{backend}}"]
`
	d := startDaemon(t, "admin: {listen: \"127.0.0.1:0\"}\n"+strings.ReplaceAll(text, "RHT", "5s"))
	a, b := d.srv.Addr("a").String(), d.srv.Addr("b").String()
	cfg := parseConfig(t, "admin: {listen: \""+d.srv.AdminAddr().String()+"\"}\n"+strings.ReplaceAll(text, "RHT", "6s"), d.backend.URL())
	// List b first, so that a lookup by written address alone would find it.
	cfg.Listeners[0], cfg.Listeners[1] = cfg.Listeners[1], cfg.Listeners[0]
	if err := d.srv.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if got := d.srv.Addr("a").String(); got != a {
		t.Errorf("a moved from %s to %s", a, got)
	}
	if got := d.srv.Addr("b").String(); got != b {
		t.Errorf("b moved from %s to %s", b, got)
	}
	for _, name := range []string{"a", "b"} {
		if st, _, _ := get(t, d.client("127.0.0.2"), d.url(name, "/")); st != http.StatusOK {
			t.Errorf("%s after the reload: %d", name, st)
		}
	}
}
