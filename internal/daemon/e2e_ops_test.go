package daemon_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/daemon"
)

const reloadA = `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - name: main
        upstreams: ["{{backend}}"]
        limit: {permits: 64}
      - name: extra
        path_prefix: /extra
        upstreams: ["{{backend}}"]
        limit: {permits: 1}
`

// reloadB is reloadA with the extra route's limit changed and a route
// added; the main route and the listener are unchanged.
const reloadB = `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - name: main
        upstreams: ["{{backend}}"]
        limit: {permits: 64}
      - name: extra
        path_prefix: /extra
        upstreams: ["{{backend}}"]
        limit: {permits: 2}
      - name: new
        path_prefix: /new
        upstreams: ["{{backend}}"]
`

// sameAddr pins the listener and admin of text to the addresses d runs on,
// as an operator's file names fixed ports.
func (d *testDaemon) sameAddr(text string) *config.Config {
	text = strings.Replace(text, `listen: "127.0.0.1:0"`, `listen: "`+d.srv.AdminAddr().String()+`"`, 1)
	text = strings.Replace(text, `listen: "127.0.0.1:0"`, `listen: "`+d.srv.Addr("web").String()+`"`, 1)
	return parseConfig(d.t, text, d.backend.URL())
}

func TestReloadUnderLoadFailsNothingAndKeepsCounts(t *testing.T) {
	defaultServer(t, testReloadUnderLoadFailsNothingAndKeepsCounts)
}

func testReloadUnderLoadFailsNothingAndKeepsCounts(t *testing.T) {
	d := startDaemon(t, reloadA)
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, ip := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"} {
		c := d.client(ip)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100_000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				r := <-getAsync(c, d.url("web", "/?ms=2"))
				if r.err != nil || r.status != http.StatusOK {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, r)
					continue
				}
				ok.Add(1)
			}
		}()
	}
	d.waitFor("load running", func() bool { return ok.Load() > 20 })
	for i := range 6 {
		next := reloadA
		if i%2 == 0 {
			next = reloadB
		}
		if err := d.srv.Reload(d.sameAddr(next)); err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
		time.Sleep(30 * time.Millisecond)
	}
	// An invalid configuration is refused and changes nothing.
	bad := d.sameAddr(reloadA)
	bad.Listeners[0].MaxConns = -1
	if err := d.srv.Reload(bad); !errors.Is(err, config.ErrInvalid) {
		t.Fatalf("invalid reload: %v, want config.ErrInvalid", err)
	}
	close(stop)
	wg.Wait()

	if n := failed.Load(); n > 0 {
		t.Fatalf("%d requests failed during reloads (first: %+v), %d succeeded", n, firstErr.Load(), ok.Load())
	}
	l := d.listener("web")
	if l.Connections.Accepted != 4 {
		t.Errorf("listener accepted %d connections, want the 4 keep-alive ones kept across reloads", l.Connections.Accepted)
	}
	main := routeFinder{d.snapshot()}.route("web", "main").Limit.Totals
	if main.Granted != uint64(ok.Load()) {
		t.Errorf("main route granted %d, want all %d requests: its limiter kept its counts", main.Granted, ok.Load())
	}
	if st, _, _ := get(t, d.client("127.0.0.6"), d.url("web", "/new/x")); st != http.StatusOK {
		t.Fatalf("route of the last configuration: %d", st)
	}
}

func TestReloadRebindsAChangedListenerOnItsAddress(t *testing.T) {
	defaultServer(t, testReloadRebindsAChangedListenerOnItsAddress)
}

func testReloadRebindsAChangedListenerOnItsAddress(t *testing.T) {
	d := startDaemon(t, reloadA)
	addr := d.srv.Addr("web").String()
	cfg := d.sameAddr(reloadA)
	cfg.Listeners[0].MaxConnsPerClient = 1
	if err := d.srv.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if got := d.srv.Addr("web").String(); got != addr {
		t.Fatalf("address %s, want %s", got, addr)
	}
	if st, _, _ := get(t, d.client("127.0.0.2"), d.url("web", "/")); st != http.StatusOK {
		t.Fatalf("after rebinding: %d", st)
	}
	dialFrom(t, "127.0.0.3", addr)
	d.waitFor("one connection of .3", func() bool { return len(d.listener("web").BusyClients) > 0 })
	if !refusedAtOnce(t, dialFrom(t, "127.0.0.3", addr)) {
		t.Fatal("the new cap of 1 is not applied")
	}
}

func TestGracefulShutdownFinishesExchangesInFlight(t *testing.T) {
	bothServers(t, testGracefulShutdownFinishesExchangesInFlight)
}

func testGracefulShutdownFinishesExchangesInFlight(t *testing.T) {
	d := startDaemon(t, reloadA)
	d.manualStop = true
	var inflight []<-chan result
	for _, ip := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"} {
		inflight = append(inflight, getAsync(d.client(ip), d.url("web", "/?ms=1500")))
	}
	d.waitFor("3 exchanges at the backend", func() bool { return d.backend.inFlight.Load() == 3 })
	admin := d.adminURL("/readyz")
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		done <- d.srv.Shutdown(ctx)
	}()
	d.waitFor("draining", d.srv.Draining)
	if st, _, _ := get(t, http.DefaultClient, admin); st != http.StatusServiceUnavailable {
		t.Errorf("/readyz while draining: %d, want 503", st)
	}
	if c, err := net.DialTimeout("tcp", d.srv.Addr("web").String(), time.Second); err == nil {
		c.Close()
		t.Error("listener still accepts while draining")
	}
	for i, ch := range inflight {
		if r := await(t, ch); r.err != nil || r.status != http.StatusOK {
			t.Errorf("exchange %d in flight at shutdown: %d %v, want 200", i, r.status, r.err)
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Shutdown: %v, want nil (everything finished)", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("Shutdown did not return")
	}
	if n := d.srv.Snapshot().InUse(); n != 0 {
		t.Fatalf("%d still in use after shutdown", n)
	}
}

func TestShutdownTimeoutCutsOffWhatIsLeft(t *testing.T) {
	bothServers(t, testShutdownTimeoutCutsOffWhatIsLeft)
}

func testShutdownTimeoutCutsOffWhatIsLeft(t *testing.T) {
	d := startDaemon(t, reloadA)
	d.manualStop = true
	long := getAsync(d.client("127.0.0.2"), d.url("web", "/?ms=20000"))
	d.waitFor("exchange at the backend", func() bool { return d.backend.inFlight.Load() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := d.srv.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v, want DeadlineExceeded", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Shutdown took %v after a 100ms timeout", took)
	}
	if r := await(t, long); r.err == nil && r.status == http.StatusOK {
		t.Fatal("the long exchange completed; it should have been cut off")
	}
	if n := d.srv.Snapshot().InUse(); n != 0 {
		t.Fatalf("%d still in use after a forced shutdown", n)
	}
	if err := d.srv.Shutdown(context.Background()); !errors.Is(err, daemon.ErrClosed) {
		t.Fatalf("second Shutdown: %v, want ErrClosed", err)
	}
}

func TestUpstreamFailures(t *testing.T) { bothServers(t, testUpstreamFailures) }

func testUpstreamFailures(t *testing.T) {
	deadURL := "http://" + refusingAddr(t)
	silentURL := "http://" + silentAddr(t)
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - name: dead
        path_prefix: /dead
        upstreams: ["`+deadURL+`"]
        limit: {permits: 4}
      - name: silent
        path_prefix: /silent
        upstreams: ["`+silentURL+`"]
        upstream_timeout: 300ms
        limit: {permits: 4}
      - name: half
        upstreams: ["`+deadURL+`", "{{backend}}"]
`)
	c := d.client("127.0.0.2")
	t.Run("refused upstream gives 502 with a short body", func(t *testing.T) {
		start := time.Now()
		st, body, _ := get(t, c, d.url("web", "/dead/x"))
		if st != http.StatusBadGateway || len(body) > 200 || !strings.Contains(body, "bad gateway") {
			t.Fatalf("%d %q, want 502 and a short body", st, body)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("502 took %v", took)
		}
	})
	t.Run("silent upstream gives 504 after upstream_timeout", func(t *testing.T) {
		start := time.Now()
		st, body, _ := get(t, c, d.url("web", "/silent/x"))
		took := time.Since(start)
		if st != http.StatusGatewayTimeout || len(body) > 200 || !strings.Contains(body, "gateway timeout") {
			t.Fatalf("%d %q, want 504 and a short body", st, body)
		}
		if took < 300*time.Millisecond || took > 5*time.Second {
			t.Fatalf("504 after %v, want about the 300ms upstream_timeout", took)
		}
	})
	t.Run("a refusing upstream is skipped", func(t *testing.T) {
		before := d.backend.requests.Load()
		for i := range 10 {
			if st, _, _ := get(t, c, d.url("web", "/x")); st != http.StatusOK {
				t.Fatalf("request %d: %d, want 200 from the live upstream", i, st)
			}
		}
		if n := d.backend.requests.Load() - before; n != 10 {
			t.Fatalf("live upstream served %d of 10", n)
		}
	})
}

func TestReloadAddsAndRemovesListeners(t *testing.T) {
	defaultServer(t, testReloadAddsAndRemovesListeners)
}

func testReloadAddsAndRemovesListeners(t *testing.T) {
	d := startDaemon(t, reloadA)
	// Add a second listener with its own limited route.
	two := d.sameAddr(reloadA + `
  - name: second
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - name: s
        upstreams: ["{{backend}}"]
        limit: {permits: 2}
`)
	if err := d.srv.Reload(two); err != nil {
		t.Fatal(err)
	}
	second := d.srv.Addr("second")
	if second == nil {
		t.Fatal("added listener not bound")
	}
	if st, _, _ := get(t, d.client("127.0.0.2"), "http://"+second.String()+"/"); st != http.StatusOK {
		t.Fatalf("added listener: %d", st)
	}
	d.clients[len(d.clients)-1].CloseIdleConnections()
	// Remove it again.
	if err := d.srv.Reload(d.sameAddr(reloadA)); err != nil {
		t.Fatal(err)
	}
	if d.srv.Addr("second") != nil {
		t.Fatal("removed listener still listed")
	}
	ok := waitUntil(func() bool {
		c, err := net.DialTimeout("tcp", second.String(), time.Second)
		if err != nil {
			return true
		}
		c.Close()
		return false
	})
	if !ok {
		t.Fatal("removed listener still accepts connections")
	}
	if st, _, _ := get(t, d.client("127.0.0.3"), d.url("web", "/")); st != http.StatusOK {
		t.Fatalf("remaining listener: %d", st)
	}
}

// refusingAddr returns a loopback address where connections are refused: a
// socket bound for the test's duration that never listens, so no other
// process can take the port meanwhile.
func refusingAddr(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(sa.(*syscall.SockaddrInet4).Port)
}

// An exchange in flight at a reload finishes on the configuration it
// started with: its upstream and its limiter. New exchanges use the new
// configuration at once.
func TestReloadLetsExchangesFinishOnTheirConfig(t *testing.T) {
	defaultServer(t, testReloadLetsExchangesFinishOnTheirConfig)
}

func testReloadLetsExchangesFinishOnTheirConfig(t *testing.T) {
	d := startDaemon(t, reloadA)
	other := startBackend(t)
	c := d.client("127.0.0.2")
	inflight := getAsync(c, d.url("web", "/extra/a?ms=1000"))
	d.waitFor("extra's one permit held", func() bool { return d.route("web", "extra").Limit.Totals.InUse == 1 })

	next := strings.Replace(reloadA, "limit: {permits: 1}", "limit: {permits: 3}", 1)
	next = strings.Replace(next, `path_prefix: /extra
        upstreams: ["{{backend}}"]`, `path_prefix: /extra
        upstreams: ["`+other.URL()+`"]`, 1)
	if err := d.srv.Reload(d.sameAddr(next)); err != nil {
		t.Fatal(err)
	}
	// The new limiter of extra counts from zero and allows 3.
	var now []<-chan result
	for range 3 {
		now = append(now, getAsync(c, d.url("web", "/extra/b?ms=300")))
	}
	for i, ch := range now {
		if r := await(t, ch); r.status != http.StatusOK {
			t.Fatalf("request %d under the new limit of 3: %d %v", i, r.status, r.err)
		}
	}
	if r := await(t, inflight); r.status != http.StatusOK {
		t.Fatalf("exchange in flight at the reload: %d %v", r.status, r.err)
	}
	if n := other.requests.Load(); n != 3 {
		t.Fatalf("new upstream served %d requests, want the 3 sent after the reload", n)
	}
	if n := d.backend.requests.Load(); n != 1 {
		t.Fatalf("old upstream served %d requests, want the 1 in flight at the reload", n)
	}
	if p := d.route("web", "extra").Limit.Permits; p != 3 {
		t.Fatalf("snapshot shows %d permits, want 3", p)
	}
}

func TestReloadThatCannotBindChangesNothing(t *testing.T) {
	defaultServer(t, testReloadThatCannotBindChangesNothing)
}

func testReloadThatCannotBindChangesNothing(t *testing.T) {
	d := startDaemon(t, reloadA)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg := d.sameAddr(strings.Replace(reloadB, "limit: {permits: 64}", "limit: {permits: 7}", 1) + `
  - name: clash
    protocol: http
    listen: "` + busy.Addr().String() + `"
    routes:
      - upstreams: ["{{backend}}"]
`)
	if err := d.srv.Reload(cfg); err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("reload onto a busy port: %v, want address already in use", err)
	}
	if d.srv.Addr("clash") != nil {
		t.Fatal("listener of the failed reload is listed")
	}
	if p := d.route("web", "main").Limit.Permits; p != 64 {
		t.Fatalf("main route has %d permits after a failed reload, want the old 64", p)
	}
	if st, _, _ := get(t, d.client("127.0.0.2"), d.url("web", "/extra/x")); st != http.StatusOK {
		t.Fatalf("old configuration after a failed reload: %d", st)
	}
}

func TestShutdownCutsTCPConnectionsAfterTheTimeout(t *testing.T) {
	upstream := startEcho(t)
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: db
    protocol: tcp
    listen: "127.0.0.1:0"
    upstream: "`+upstream+`"
`)
	d.manualStop = true
	c := dialFrom(t, "127.0.0.2", d.srv.Addr("db").String())
	_ = c.SetDeadline(time.Now().Add(waitLimit))
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := d.srv.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown with an open TCP connection: %v, want DeadlineExceeded", err)
	}
	if _, err := io.ReadAll(c); isTimeout(err) { // EOF or a reset: cut, as it should be
		t.Fatal("TCP connection still open after the shutdown timeout")
	}
	if n := d.srv.Snapshot().InUse(); n != 0 {
		t.Fatalf("%d still in use", n)
	}
}

// silentAddr returns the address of a listener that accepts connections and
// reads them but never answers, as a hung upstream does.
func silentAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		conns.Wait()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Go(func() {
				defer c.Close()
				_ = c.SetReadDeadline(time.Now().Add(waitLimit))
				_, _ = io.Copy(io.Discard, c)
			})
		}
	}()
	return ln.Addr().String()
}

// Turning syn_filter on by reload rebinds the listener as plain TCP (Go's
// default socket may be MPTCP, which takes no filter) at the same address,
// and the filter then drops a capped client's connection attempts.
func TestReloadTurnsOnSYNFilter(t *testing.T) { defaultServer(t, testReloadTurnsOnSYNFilter) }

func testReloadTurnsOnSYNFilter(t *testing.T) {
	const text = `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    max_conns_per_client: 1
    routes:
      - upstreams: ["{{backend}}"]
`
	d := startDaemon(t, text)
	addr := d.srv.Addr("web").String()
	withFilter := strings.Replace(text, "max_conns_per_client: 1\n", "max_conns_per_client: 1\n    syn_filter: true\n", 1)
	if err := d.srv.Reload(d.sameAddr(withFilter)); err != nil {
		t.Fatalf("reload with syn_filter: %v", err)
	}
	if got := d.srv.Addr("web").String(); got != addr {
		t.Fatalf("listener moved from %s to %s", addr, got)
	}
	dialFrom(t, "127.0.0.2", addr) // 127.0.0.2 now holds its cap
	// Until the filter is in, a second connection is accepted and refused.
	d.waitFor("127.0.0.2 to be filtered", func() bool { return synDropped("127.0.0.2", addr) })
	if status, _, _ := get(t, d.client("127.0.0.3"), d.url("web", "/")); status != http.StatusOK {
		t.Fatalf("another client got %d, want 200", status)
	}
}
