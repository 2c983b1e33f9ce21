package siege_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/connlimit"
	"github.com/seed-a07d1050/portcullis/internal/backend"
	"github.com/seed-a07d1050/portcullis/internal/siege"
	"github.com/seed-a07d1050/portcullis/internal/waitfor"
)

func TestThroughput(t *testing.T) {
	b := startBackend(t, backend.Config{})
	rep := runChecked(t, t.Context(), siege.Config{
		Target:         b.URL() + "/",
		Scenario:       siege.ScenarioThroughput,
		Duration:       time.Second,
		Clients:        4,
		ConnsPerClient: 4,
	})
	l := rep.Legit
	if l.Requests < 100 {
		t.Errorf("Requests = %d in 1s of 16 keep-alive loops, want ≥ 100", l.Requests)
	}
	if l.Successes != l.Requests {
		t.Errorf("Successes = %d of %d; errors %+v", l.Successes, l.Requests, l.Errors)
	}
	if !l.KeepAlive || l.Clients != 4 || l.ConnsPerClient != 4 {
		t.Errorf("shape = %d×%d keep-alive %v, want 4×4 keep-alive", l.Clients, l.ConnsPerClient, l.KeepAlive)
	}
	if l.ConnsOpened != 16 {
		t.Errorf("ConnsOpened = %d, want 16: keep-alive connections must be reused", l.ConnsOpened)
	}
	if rep.Attack != nil {
		t.Errorf("throughput has an attacker: %+v", rep.Attack)
	}
	if served := b.Handler().Requests(); served < l.Successes {
		t.Errorf("backend served %d requests, fewer than the %d successes reported", served, l.Successes)
	}
}

// TestAttackerCappedAtAccept runs each attack against a server that admits 4
// connections from the attacker's address at once and closes the rest at
// accept: the report must show exactly 4 held at the peak, the refusals, and
// every legitimate client served.
func TestAttackerCappedAtAccept(t *testing.T) {
	tests := []struct {
		name                    string
		scenario                siege.Scenario
		slowloris, slowRequests int
	}{
		{name: "slowloris", scenario: siege.ScenarioSlowloris, slowloris: 50},
		{name: "slow requests", scenario: siege.ScenarioSlowRequests, slowRequests: 50},
		{name: "flood", scenario: siege.ScenarioFlood, slowloris: 25, slowRequests: 25},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ln := newCappedListener(t, attackerIP, 4)
			srv, err := backend.Serve(ln, backend.Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			rep := runChecked(t, t.Context(), siege.Config{
				Target:         srv.URL() + "/",
				Scenario:       tc.scenario,
				Duration:       1200 * time.Millisecond,
				Warmup:         200 * time.Millisecond,
				Clients:        4,
				Timeout:        time.Second,
				AttackConns:    50,
				Grace:          200 * time.Millisecond,
				HeaderInterval: 100 * time.Millisecond,
				MaxConnectRate: 400,
			})
			a := rep.Attack
			if a == nil {
				t.Fatal("no attacker section")
			}
			if a.Slowloris != tc.slowloris || a.SlowRequests != tc.slowRequests {
				t.Errorf("split %d slowloris + %d slow requests, want %d + %d", a.Slowloris, a.SlowRequests, tc.slowloris, tc.slowRequests)
			}
			if a.PeakHeld != 4 {
				t.Errorf("PeakHeld = %d, want the server's cap of 4", a.PeakHeld)
			}
			_, maxOpen, refused := ln.stats()
			if maxOpen != 4 {
				t.Errorf("test server had %d attacker connections open at most, want 4", maxOpen)
			}
			if a.Refused == 0 || a.Refused > uint64(refused) {
				t.Errorf("attacker counted %d refused, server refused %d", a.Refused, refused)
			}
			if a.Admitted < 4 || a.Answered != 0 {
				t.Errorf("Admitted = %d, Answered = %d; want ≥ 4 and 0 (nothing finishes in time)", a.Admitted, a.Answered)
			}
			if a.DialErrors != 0 {
				t.Errorf("DialErrors = %d, want 0", a.DialErrors)
			}
			if a.Reconnects == 0 || a.ReconnectsPerSec <= 0 {
				t.Errorf("Reconnects = %d (%.1f/s), want refusals to cause reconnects", a.Reconnects, a.ReconnectsPerSec)
			}
			if l := rep.Legit; l.Requests == 0 || l.Successes != l.Requests {
				t.Errorf("legitimate clients: %d of %d served; errors %+v", l.Successes, l.Requests, l.Errors)
			}
			if tc.slowloris > 0 {
				// 4 heads plus header lines every 100 ms over ~1.4 s.
				if got, least := ln.read.Load(), int64(4*len("GET / HTTP/1.1\r\n")+20*len("X-Siege-Wait: 1\r\n")); got < least {
					t.Errorf("server read %d bytes from held slowloris connections, want ≥ %d: header lines are not trickling", got, least)
				}
			}
		})
	}
}

func TestSlowRequestsReplaced(t *testing.T) {
	b := startBackend(t, backend.Config{})
	rep := runChecked(t, t.Context(), siege.Config{
		Target:      b.URL() + "/",
		Scenario:    siege.ScenarioSlowRequests,
		Duration:    1500 * time.Millisecond,
		Clients:     2,
		AttackConns: 10,
		SlowPath:    "/slow?ms=300",
		Grace:       100 * time.Millisecond,
	})
	a := rep.Attack
	// Each connection is answered after 300 ms and replaced: 5 rounds of 10
	// in 1.5 s, the last possibly cut off, fewer when a loaded machine is
	// slow to connect. More than 10 answers means ended requests were
	// replaced at least once; 15 leaves room for a machine three times
	// slower than it should be.
	if a.Answered < 15 || a.Answered > 60 {
		t.Errorf("Answered = %d, want 15..60 (10 connections, 300 ms each, 1.5 s)", a.Answered)
	}
	if a.Refused != 0 || a.PeakHeld != 10 {
		t.Errorf("Refused = %d, PeakHeld = %d; want 0 and 10 against an uncapped backend", a.Refused, a.PeakHeld)
	}
	if a.Reconnects < a.Answered-10 {
		t.Errorf("Reconnects = %d after %d answers: ended requests are not replaced", a.Reconnects, a.Answered)
	}
}

func TestTimeoutsReported(t *testing.T) {
	silent := startRaw(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	rep := runChecked(t, t.Context(), siege.Config{
		Target:   silent.URL(),
		Duration: time.Second,
		Clients:  2,
		Timeout:  200 * time.Millisecond,
	})
	l := rep.Legit
	if l.Successes != 0 || l.Errors.Timeout != l.Requests {
		t.Errorf("Successes %d, timeouts %d of %d requests; want every request timed out", l.Successes, l.Errors.Timeout, l.Requests)
	}
	// Two loops, 200 ms per request, 1 s: about 10, fewer when the machine is slow.
	if l.Requests < 4 || l.Requests > 10 {
		t.Errorf("Requests = %d, want 4..10", l.Requests)
	}
	if l.P50 != 0 || l.P99 != 0 {
		t.Errorf("latency of failed requests leaked into quantiles: p50 %v p99 %v", l.P50, l.P99)
	}
}

// TestErrorKinds checks that each kind of failure is counted under its name.
func TestErrorKinds(t *testing.T) {
	respond := func(status int) func(net.Conn) {
		return func(c net.Conn) {
			br := bufio.NewReader(c)
			for readHead(br) {
				fmt.Fprintf(c, "HTTP/1.1 %d X\r\nContent-Length: 2\r\n\r\nok", status)
			}
		}
	}
	closeAfterHead := func(reset bool) func(net.Conn) {
		return func(c net.Conn) {
			if readHead(bufio.NewReader(c)) && reset {
				_ = c.(*net.TCPConn).SetLinger(0)
			}
		}
	}
	tests := []struct {
		name  string
		serve func(net.Conn)
		want  func(siege.LegitStats) uint64
	}{
		{name: "429", serve: respond(429), want: func(l siege.LegitStats) uint64 { return l.Errors.Status429 }},
		{name: "503", serve: respond(503), want: func(l siege.LegitStats) uint64 { return l.Errors.Status5xx }},
		{name: "404 is other", serve: respond(404), want: func(l siege.LegitStats) uint64 { return l.Errors.Other }},
		{name: "302 is a success", serve: respond(302), want: func(l siege.LegitStats) uint64 { return l.Successes }},
		{name: "closed before answering", serve: closeAfterHead(false), want: func(l siege.LegitStats) uint64 { return l.Errors.EOF }},
		{name: "reset", serve: closeAfterHead(true), want: func(l siege.LegitStats) uint64 { return l.Errors.Reset }},
		{name: "malformed", serve: func(c net.Conn) {
			if readHead(bufio.NewReader(c)) {
				_, _ = io.WriteString(c, "HTTP/1.1 2OO OK\r\n\r\n")
			}
		}, want: func(l siege.LegitStats) uint64 { return l.Errors.Other }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := startRaw(t, tc.serve)
			rep := runChecked(t, t.Context(), siege.Config{Target: srv.URL(), Duration: 300 * time.Millisecond, Clients: 2})
			if l := rep.Legit; l.Requests == 0 || tc.want(l) != l.Requests {
				t.Errorf("%d requests, %d counted under the expected kind; successes %d, errors %+v",
					l.Requests, tc.want(l), l.Successes, l.Errors)
			}
		})
	}
}

// TestRefusedMidRun closes the target's listener during a run: the fresh
// connections after that are refused by the kernel.
func TestRefusedMidRun(t *testing.T) {
	b := startBackend(t, backend.Config{})
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = b.Close()
	}()
	rep := runChecked(t, t.Context(), siege.Config{Target: b.URL() + "/", Duration: 800 * time.Millisecond, Clients: 2})
	l := rep.Legit
	if l.Successes == 0 || l.Errors.Refused == 0 {
		t.Errorf("Successes %d, refused %d; want both before and after the listener closed (errors %+v)", l.Successes, l.Errors.Refused, l.Errors)
	}
}

// TestKeepAliveRetry uses a server that silently closes each connection
// shortly after answering on it; the next request on the kept connection
// fails before any byte and must be retried on a new one, not counted.
func TestKeepAliveRetry(t *testing.T) {
	srv := startRaw(t, func(c net.Conn) {
		if readHead(bufio.NewReader(c)) {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			time.Sleep(10 * time.Millisecond)
		}
	})
	rep := runChecked(t, t.Context(), siege.Config{
		Target:      srv.URL(),
		Duration:    time.Second,
		Clients:     2,
		Connections: siege.ConnKeepAlive,
		Rate:        20, // 50 ms between requests: the server has closed by then
	})
	l := rep.Legit
	if l.Requests < 10 || l.Successes != l.Requests {
		t.Errorf("%d of %d succeeded; errors %+v", l.Successes, l.Requests, l.Errors)
	}
	if l.ConnsOpened < l.Requests {
		t.Errorf("ConnsOpened = %d < Requests %d: every request needed a new connection", l.ConnsOpened, l.Requests)
	}
	// Paced at 20/s per loop for 1 s: at most 21 per loop.
	if l.Requests > 42 {
		t.Errorf("Requests = %d, want ≤ 42 at 20/s for 2 loops", l.Requests)
	}
}

func TestHTTPS(t *testing.T) {
	h, err := backend.New(backend.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // preflight connects without a handshake
	srv.StartTLS()
	defer srv.Close()
	roots := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	rep := runChecked(t, t.Context(), siege.Config{
		Target:      srv.URL + "/",
		Scenario:    siege.ScenarioFlood,
		Duration:    time.Second,
		Clients:     2,
		AttackConns: 6,
		Grace:       100 * time.Millisecond,
		SlowPath:    "/slow?ms=200",
		TLSConfig:   &tls.Config{RootCAs: roots},
	})
	if l := rep.Legit; l.Requests == 0 || l.Successes != l.Requests {
		t.Errorf("legitimate over TLS: %d of %d; errors %+v", l.Successes, l.Requests, l.Errors)
	}
	if a := rep.Attack; a.PeakHeld != 6 || a.Answered == 0 {
		t.Errorf("attacker over TLS: peak %d, answered %d; want 6 held and slow requests answered", a.PeakHeld, a.Answered)
	}
}

// TestRunEndsOnTime leaves legitimate requests, slow requests and slowloris
// connections all in flight when the duration ends, with every timeout in the
// run at 10 s or more: Run must cut them off rather than wait for any.
func TestRunEndsOnTime(t *testing.T) {
	b := startBackend(t, backend.Config{})
	rep := runChecked(t, t.Context(), siege.Config{
		Target:         b.URL() + "/slow?ms=20000",
		Scenario:       siege.ScenarioFlood,
		Duration:       time.Second,
		Warmup:         200 * time.Millisecond,
		Clients:        3,
		Timeout:        10 * time.Second,
		AttackConns:    20,
		SlowPath:       "/slow?ms=20000",
		HeaderInterval: 10 * time.Second,
		Grace:          10 * time.Second,
	})
	if l := rep.Legit; l.Requests != 0 {
		t.Errorf("%d requests counted, want none: all were cut off", l.Requests)
	}
	if a := rep.Attack; a.Attempts != 20 || a.Unsettled != 20 {
		t.Errorf("attacker: %d attempts, %d unsettled; want 20 of each", a.Attempts, a.Unsettled)
	}
	waitfor.Within(t, 5*time.Second, "the backend idle", func() bool { return b.Handler().InFlight() == 0 })
}

func TestRunStopsWhenContextEnds(t *testing.T) {
	b := startBackend(t, backend.Config{})
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	rep, err := siege.Run(ctx, siege.Config{Target: b.URL() + "/", Scenario: siege.ScenarioSlowloris, Duration: time.Minute, AttackConns: 20, Clients: 2})
	if took := time.Since(start); took > 300*time.Millisecond+runMargin {
		t.Errorf("Run took %v after its context ended at 300ms", took)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Run error = %v, want the context's", err)
	}
	if rep == nil || rep.Duration > time.Second || rep.Legit.Requests == 0 {
		t.Fatalf("partial report %+v, want one covering the 300 ms", rep)
	}
	if g := siegeGoroutines(); len(g) > 0 {
		t.Errorf("goroutines left: %v", g)
	}
}

func TestUnreachable(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "http://" + closed.Addr().String() + "/"
	closed.Close()
	b := startBackend(t, backend.Config{})
	tests := []struct {
		name string
		cfg  siege.Config
	}{
		{name: "nothing listening", cfg: siege.Config{Target: deadURL, Clients: 1}},
		// 192.0.2.0/24 is TEST-NET-1: no host owns it, so binding fails.
		{name: "client address not owned", cfg: siege.Config{Target: b.URL(), ClientAddrs: []netip.Addr{netip.MustParseAddr("192.0.2.7")}}},
		{name: "attacker address not owned", cfg: siege.Config{Target: b.URL(), Scenario: siege.ScenarioSlowloris, AttackerAddr: netip.MustParseAddr("192.0.2.8")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Duration = time.Second
			rep, err := siege.Run(t.Context(), tc.cfg)
			if !errors.Is(err, siege.ErrUnreachable) || rep != nil {
				t.Errorf("Run = %v, %v; want a nil report and ErrUnreachable", rep, err)
			}
		})
	}
	if n := b.Handler().Requests(); n != 0 {
		t.Errorf("backend got %d requests from runs that failed their preflight", n)
	}
}

func TestInvalidConfig(t *testing.T) {
	const u = "http://127.0.0.1:1/"
	v6 := netip.MustParseAddr("::1")
	tests := []struct {
		name string
		cfg  siege.Config
	}{
		{name: "no target", cfg: siege.Config{}},
		{name: "bad scheme", cfg: siege.Config{Target: "ftp://127.0.0.1/"}},
		{name: "no host", cfg: siege.Config{Target: "http:///x"}},
		{name: "unparsable target", cfg: siege.Config{Target: "http://[::1"}},
		{name: "unknown scenario", cfg: siege.Config{Target: u, Scenario: "ddos"}},
		{name: "negative duration", cfg: siege.Config{Target: u, Duration: -time.Second}},
		{name: "too long", cfg: siege.Config{Target: u, Duration: 10 * time.Minute, Warmup: time.Second}},
		{name: "negative timeout", cfg: siege.Config{Target: u, Timeout: -1}},
		{name: "negative grace", cfg: siege.Config{Target: u, Grace: -1}},
		{name: "negative clients", cfg: siege.Config{Target: u, Clients: -1}},
		{name: "negative conns per client", cfg: siege.Config{Target: u, ConnsPerClient: -1}},
		{name: "too many loops", cfg: siege.Config{Target: u, Clients: 101, ConnsPerClient: 100}},
		{name: "more clients than addresses", cfg: siege.Config{Target: u, Clients: 3, ClientAddrs: []netip.Addr{firstIP}}},
		{name: "zero client address", cfg: siege.Config{Target: u, ClientAddrs: []netip.Addr{{}}}},
		{name: "bad connection mode", cfg: siege.Config{Target: u, Connections: "pipelined"}},
		{name: "negative rate", cfg: siege.Config{Target: u, Rate: -1}},
		{name: "too many attack conns", cfg: siege.Config{Target: u, AttackConns: siege.MaxAttackConns + 1}},
		{name: "negative connect rate", cfg: siege.Config{Target: u, MaxConnectRate: -5}},
		{name: "slow path without slash", cfg: siege.Config{Target: u, SlowPath: "slow"}},
		{name: "slow path with space", cfg: siege.Config{Target: u, SlowPath: "/slow x"}},
		{name: "IPv6 clients, IPv4 target", cfg: siege.Config{Target: u, ClientAddrs: []netip.Addr{v6}}},
		{name: "IPv4 attacker, IPv6 target", cfg: siege.Config{Target: "http://[::1]:1/", Scenario: siege.ScenarioSlowloris, ClientAddrs: []netip.Addr{v6}}},
		{name: "first client address at the end of the space", cfg: siege.Config{Target: u, FirstClientAddr: netip.MustParseAddr("255.255.255.255"), Clients: 2}},
		{name: "negative cpu pid", cfg: siege.Config{Target: u, CPUPID: -1}},
		{name: "cpu pid of no process", cfg: siege.Config{Target: u, CPUPID: 1 << 30}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.cfg
			before.ClientAddrs = append([]netip.Addr(nil), tc.cfg.ClientAddrs...)
			rep, err := siege.Run(t.Context(), tc.cfg)
			if !errors.Is(err, siege.ErrInvalidConfig) || rep != nil {
				t.Errorf("Run = %v, %v; want a nil report and ErrInvalidConfig", rep, err)
			}
			if !reflect.DeepEqual(before, tc.cfg) {
				t.Errorf("Run changed the caller's Config: %+v → %+v", before, tc.cfg)
			}
		})
	}
}

func TestDefaultsLeaveConfigAlone(t *testing.T) {
	b := startBackend(t, backend.Config{})
	cfg := siege.Config{Target: b.URL(), Duration: 200 * time.Millisecond, Clients: 1}
	before := cfg
	rep := runChecked(t, t.Context(), cfg)
	if !reflect.DeepEqual(cfg, before) {
		t.Errorf("Run changed the caller's Config")
	}
	if rep.Scenario != siege.ScenarioNone || rep.Legit.KeepAlive || rep.Legit.Timeout != siege.DefaultTimeout || rep.Legit.ConnsPerClient != 1 {
		t.Errorf("defaults not applied: %+v", rep)
	}
	// One connection per request, plus one per loop for a request cut off at the end.
	if l := rep.Legit; l.ConnsOpened < l.Requests || l.ConnsOpened > l.Requests+1 {
		t.Errorf("fresh mode opened %d connections for %d requests", rep.Legit.ConnsOpened, rep.Legit.Requests)
	}
}

func TestIPv6(t *testing.T) {
	b, err := backend.Start("[::1]:0")
	if err != nil {
		t.Fatalf("IPv6 loopback: %v", err)
	}
	defer b.Close()
	v6 := netip.MustParseAddr("::1")
	rep := runChecked(t, t.Context(), siege.Config{
		Target:       b.URL() + "/",
		Scenario:     siege.ScenarioSlowloris,
		Duration:     500 * time.Millisecond,
		ClientAddrs:  []netip.Addr{v6, v6},
		AttackerAddr: v6,
		AttackConns:  5,
		Grace:        100 * time.Millisecond,
	})
	if l := rep.Legit; l.Clients != 2 || l.Requests == 0 || l.Successes != l.Requests {
		t.Errorf("legitimate over IPv6: %d clients, %d of %d; errors %+v", l.Clients, l.Successes, l.Requests, l.Errors)
	}
	if a := rep.Attack; a.PeakHeld != 5 {
		t.Errorf("attacker over IPv6: peak %d, want 5", a.PeakHeld)
	}
}

// A server that drops the SYNs of a client at its cap keeps the attacker's
// connects waiting; those it then lets in and refuses at accept were never
// held, however long their connect took. The grace runs from the end of the
// handshake, so the peak stays the server's cap.
func TestAttackerSlowConnectsAreNotHeld(t *testing.T) {
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	inner, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := connlimit.NewListener(inner, connlimit.Config{Policy: connlimit.Policy{Permits: 4}, SYNFilter: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		inner.Close()
		t.Fatal(err)
	}
	srv, err := backend.Serve(ln, backend.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	rep := runChecked(t, t.Context(), siege.Config{
		Target:         srv.URL() + "/",
		Scenario:       siege.ScenarioSlowRequests,
		SlowPath:       "/slow?ms=300", // admitted requests end, so the filter opens and shuts
		Duration:       3500 * time.Millisecond,
		Warmup:         200 * time.Millisecond,
		Clients:        2,
		Timeout:        3 * time.Second, // long enough for a SYN retried after 1 s
		AttackConns:    40,
		Grace:          200 * time.Millisecond,
		MaxConnectRate: 400,
	})
	a := rep.Attack
	if a == nil {
		t.Fatal("no attacker section")
	}
	if a.PeakHeld > 4 {
		t.Errorf("PeakHeld = %d, want at most the server's cap of 4", a.PeakHeld)
	}
	if a.Answered == 0 {
		t.Errorf("no slow request was answered: the test did not cycle the attacker's slots")
	}
}
