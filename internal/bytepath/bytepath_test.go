package bytepath_test

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/httplimit"
	"github.com/seed-a07d1050/portcullis/internal/bytepath"
	"github.com/seed-a07d1050/portcullis/internal/evloop"
	"github.com/seed-a07d1050/portcullis/internal/exchange"
	"github.com/seed-a07d1050/portcullis/internal/http1"
	"github.com/seed-a07d1050/portcullis/internal/relay"
	"github.com/seed-a07d1050/portcullis/internal/waitfor"
)

// These tests run the byte path alone, without a daemon: a listener's
// http1.Server whose chain is one handler answering "chain", a route table
// of one route (/app, to a backend on loopback, through one concurrency
// limit), and the views bytepath declares, filled in here as the daemon
// fills them. The daemon's differential tests (TestLeanMatchesFast,
// FuzzLeanAnswerMatchesFast) hold the byte path to the full server.

const upstreamAnswer = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\nX-Up: 1\r\n\r\nhello"

// backend answers every request it reads with upstreamAnswer, on kept
// connections, and records the heads it read.
type backend struct {
	ln    net.Listener
	mu    sync.Mutex
	heads []string
}

func startBackend(t testing.TB) *backend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{ln: ln}
	var wg sync.WaitGroup
	var conns sync.Map // the connections being served, closed at the end
	t.Cleanup(func() {
		ln.Close()
		conns.Range(func(c, _ any) bool { c.(net.Conn).Close(); return true })
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Store(c, nil)
			wg.Go(func() { defer conns.Delete(c); b.serve(c) })
		}
	})
	return b
}

func (b *backend) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		var head strings.Builder
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			head.WriteString(line)
			if line == "\r\n" {
				break
			}
		}
		b.mu.Lock()
		b.heads = append(b.heads, head.String())
		b.mu.Unlock()
		if _, err := io.WriteString(c, upstreamAnswer); err != nil {
			return
		}
	}
}

func (b *backend) requests() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.heads)
}

func (b *backend) lastHead() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.heads) == 0 {
		return ""
	}
	return b.heads[len(b.heads)-1]
}

// prefixRouter is a table of one route: every request whose path is
// under prefix.
type prefixRouter struct {
	prefix string
	route  *bytepath.Route
	picks  atomic.Int64
}

func (p *prefixRouter) Route(r *http.Request) *bytepath.Route {
	p.picks.Add(1)
	if strings.HasPrefix(r.URL.Path, p.prefix) {
		return p.route
	}
	return nil
}

// rig is one listener served by an http1.Server with the byte path.
type rig struct {
	addr    string
	limiter *httplimit.Limiter
	router  *prefixRouter
	counts  *exchange.LeanCounts
	altSvc  atomic.Pointer[string]
	active  atomic.Int64
	chain   atomic.Int64 // requests the chain served
	srv     *http1.Server
	loops   *evloop.Server // nil unless started with loops
	taken   atomic.Int64   // connections the loops took
}

// startRig serves a listener whose one route /app goes to upstream
// through a limit of one exchange per client address; with loops, on
// event loops, its server serving what they give back.
func startRig(t testing.TB, upstream string, loops bool) *rig {
	t.Helper()
	pool, err := relay.NewPool([]string{upstream})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	rl := relay.New(pool, relay.NewForwarding(&clientkey.Resolver{}), relay.NewTransport(), 2*time.Second, relay.NewBufferPool(), log, nil, nil)
	lim, err := httplimit.New(httplimit.Config{Policy: httplimit.Policy{Permits: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lim.Close() })
	rt, err := bytepath.NewRoute("app", nil, rl, nil, []bytepath.Limit{{By: "route_limit", Limiter: lim, ByPeer: true}})
	if err != nil {
		t.Fatal(err)
	}
	if rt == nil {
		t.Skip("the upstream transport cannot send heads as bytes on this system: no byte path")
	}
	g := &rig{limiter: lim, router: &prefixRouter{prefix: "/app", route: rt}, counts: exchange.NewMetrics().LeanCounts("web")}
	table := &bytepath.Table{Routes: g.router, Opts: exchange.Opts{Listener: "web"}, Counts: g.counts, OnLoop: rt.OnLoop()}
	view := bytepath.Listener{Table: func() *bytepath.Table { return table }, AltSvc: &g.altSvc, Active: &g.active, Log: log}
	g.srv = &http1.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			g.chain.Add(1)
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.WriteString(w, "chain")
		}),
		Exchanges: bytepath.NewPoller(view),
		Logger:    log,
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g.addr = ln.Addr().String()
	served := make(chan struct{})
	var accepts net.Listener = ln
	if loops {
		lp := bytepath.NewLoops(view, g.srv)
		if !lp.Takes() {
			t.Fatal("the loops take nothing of a table whose route they may serve")
		}
		if g.loops, err = lp.Start(new(evloop.Counts)); err != nil {
			t.Fatal(err)
		}
		accepts = &loopListener{Listener: ln, g: g, lp: lp}
	}
	go func() { defer close(served); _ = g.srv.Serve(accepts) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = ln.Close()
		if g.loops != nil {
			_ = g.loops.Shutdown(ctx)
		}
		_ = g.srv.Shutdown(ctx)
		<-served
	})
	return g
}

// loopListener gives the loops every connection they take, as the
// daemon's listener does, and the server the others.
type loopListener struct {
	net.Listener
	g  *rig
	lp *bytepath.Loops
}

func (l *loopListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if !l.lp.Takes() || !l.g.loops.Serve(c) {
			return c, nil
		}
		l.g.taken.Add(1)
	}
}

// exchange sends request on c and reads one answer to it.
func exchangeOn(t testing.TB, c net.Conn, br *bufio.Reader, request string) (*http.Response, string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatal(err)
	}
	method, _, _ := strings.Cut(request, " ")
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%q: %v", request, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("%q: body: %v", request, err)
	}
	return resp, string(body)
}

func dial(t testing.TB, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func (g *rig) outcome(o exchange.LeanOutcome) int {
	return int(testutil.ToFloat64(g.counts[o]))
}

// settledOutcome returns the count of o once it is want, or what it is
// after waitfor.Limit: an exchange is counted when it ends, which may be
// after its client has read the answer.
func (g *rig) settledOutcome(o exchange.LeanOutcome, want int) int {
	waitfor.Until(waitfor.Limit, func() bool { return g.outcome(o) == want })
	return g.outcome(o)
}

// assertIdle waits until the byte path holds nothing: no permit, no
// exchange under way.
func (g *rig) assertIdle(t testing.TB) {
	t.Helper()
	waitfor.Cond(t, "every permit and exchange to end", func() bool {
		return g.limiter.Totals().InUse == 0 && g.active.Load() == 0
	})
}

const get = "GET /app/x?q=1 HTTP/1.1\r\nHost: app.test\r\nAccept: */*\r\n\r\n"

// TestByteLeanRelaysAndGivesBack relays a plain GET in Go's poller, on
// the lean path: the upstream's answer comes back with the server's Date,
// the upstream gets the forwarding fields, the exchange is counted relayed
// and its permit comes back.
func TestByteLeanRelaysAndGivesBack(t *testing.T) {
	b := startBackend(t)
	g := startRig(t, "http://"+b.ln.Addr().String(), false)
	c, br := dial(t, g.addr)
	for i := range 2 {
		resp, body := exchangeOn(t, c, br, get)
		if resp.StatusCode != http.StatusOK || body != "hello" || resp.Header.Get("X-Up") != "1" || resp.Header.Get("Date") == "" {
			t.Fatalf("request %d: %d %q %v, want the upstream's 200 hello with a Date", i, resp.StatusCode, body, resp.Header)
		}
	}
	if head := b.lastHead(); !strings.HasPrefix(head, "GET /app/x?q=1 HTTP/1.1\r\n") || !strings.Contains(head, "\r\nX-Forwarded-For: 127.0.0.1\r\n") {
		t.Errorf("the upstream read\n%s\nwant the request line and X-Forwarded-For: 127.0.0.1", head)
	}
	if got := g.settledOutcome(exchange.LeanRelayed, 2); got != 2 || g.chain.Load() != 0 {
		t.Errorf("relayed %d, chain served %d; want 2 relayed, none by the chain", got, g.chain.Load())
	}
	g.assertIdle(t)
	if tot := g.limiter.Totals(); tot.Granted != 2 || tot.Refused != 0 {
		t.Errorf("limit totals %+v, want 2 granted, none refused", tot)
	}
}

// TestByteLeanDeclines offers the lean path requests it must not take:
// each goes to the chain, having been sent nowhere and counted nowhere
// (a full limit is asked quietly: no refusal is counted).
func TestByteLeanDeclines(t *testing.T) {
	b := startBackend(t)
	g := startRig(t, "http://"+b.ln.Addr().String(), false)
	cases := []struct {
		name, request string
		setup         func(t *testing.T) (undo func())
		declined      int // counted declined (0: never offered, a body)
	}{
		{"no route", "GET /elsewhere HTTP/1.1\r\nHost: app.test\r\n\r\n", nil, 1},
		{"a body", "POST /app HTTP/1.1\r\nHost: app.test\r\nContent-Length: 2\r\n\r\nhi", nil, 0},
		{"upgrade", "GET /app HTTP/1.1\r\nHost: app.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", nil, 1},
		{"alt-svc", get, func(t *testing.T) func() {
			v := `h3=":443"`
			g.altSvc.Store(&v)
			return func() { g.altSvc.Store(nil) }
		}, 1},
		{"limit full", get, func(t *testing.T) func() {
			r := &http.Request{RemoteAddr: "127.0.0.1:1", Header: http.Header{}}
			_, p, ok := g.limiter.TryAdmit(r, nil)
			if !ok {
				t.Fatal("the test could not take the client's one permit")
			}
			return p.Release
		}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.setup != nil {
				defer tc.setup(t)()
			}
			declined, chain, upstream := g.outcome(exchange.LeanDeclined), g.chain.Load(), b.requests()
			refused := g.limiter.Totals().Refused
			c, br := dial(t, g.addr)
			resp, body := exchangeOn(t, c, br, tc.request)
			if resp.StatusCode != http.StatusOK || body != "chain" {
				t.Fatalf("%d %q, want the chain's 200 chain", resp.StatusCode, body)
			}
			if got := g.outcome(exchange.LeanDeclined) - declined; got != tc.declined {
				t.Errorf("declined %d, want %d", got, tc.declined)
			}
			if g.chain.Load() != chain+1 || b.requests() != upstream {
				t.Errorf("the chain served %d, the upstream read %d; want 1 and 0", g.chain.Load()-chain, b.requests()-upstream)
			}
			if got := g.limiter.Totals().Refused; got != refused {
				t.Errorf("refusals counted: %d, want none", got-refused)
			}
		})
	}
	g.assertIdle(t)
}

// TestByteLeanHandsOverAFailure sends a request to an upstream that
// refuses connections: the exchange is handed to the relay's own code,
// which answers 502, and its permit comes back.
func TestByteLeanHandsOverAFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there now: connections are refused
	g := startRig(t, "http://"+dead, false)
	c, br := dial(t, g.addr)
	resp, _ := exchangeOn(t, c, br, get)
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %d, want the relay's 502", resp.StatusCode)
	}
	if got := g.settledOutcome(exchange.LeanHandedOver, 1); got != 1 || g.chain.Load() != 0 {
		t.Errorf("handed over %d, chain served %d; want 1 and 0", got, g.chain.Load())
	}
	g.assertIdle(t)
}

// TestByteLoopsRelayAndGiveBack serves a listener on event loops: they
// take its connection and relay its plain GETs, and give the connection
// back to the server at a request the byte path declines, which the chain
// answers; every permit comes back.
func TestByteLoopsRelayAndGiveBack(t *testing.T) {
	if !evloop.Supported() {
		t.Skip("no event loops on this system")
	}
	b := startBackend(t)
	g := startRig(t, "http://"+b.ln.Addr().String(), true)
	c, br := dial(t, g.addr)
	for i := range 2 {
		resp, body := exchangeOn(t, c, br, get)
		if resp.StatusCode != http.StatusOK || body != "hello" || resp.Header.Get("Date") == "" {
			t.Fatalf("request %d: %d %q, want the upstream's 200 hello with a Date", i, resp.StatusCode, body)
		}
	}
	// The accepting goroutine counts the connection once the loops took it,
	// which may be after they answered.
	waitfor.Until(waitfor.Limit, func() bool { return g.taken.Load() == 1 })
	if g.taken.Load() != 1 || g.loops.Conns() != 1 {
		t.Errorf("the loops took %d connections and hold %d, want 1 and 1", g.taken.Load(), g.loops.Conns())
	}
	resp, body := exchangeOn(t, c, br, "GET /elsewhere HTTP/1.1\r\nHost: app.test\r\n\r\n")
	if resp.StatusCode != http.StatusOK || body != "chain" {
		t.Fatalf("a request the byte path declines: %d %q, want the chain's 200 chain", resp.StatusCode, body)
	}
	// Given back, the connection's next plain GET takes the lean path in
	// Go's poller.
	if resp, body := exchangeOn(t, c, br, get); resp.StatusCode != http.StatusOK || body != "hello" {
		t.Fatalf("after the hand-back: %d %q, want the upstream's 200 hello", resp.StatusCode, body)
	}
	if got := g.settledOutcome(exchange.LeanRelayed, 3); got != 3 {
		t.Errorf("relayed %d, want 3 (2 on the loops, 1 in Go's poller)", got)
	}
	waitfor.Cond(t, "the loops to let go of the connection", func() bool { return g.loops.Conns() == 0 })
	g.assertIdle(t)
}

// TestByteZeroViews checks the documented zero values: a Listener
// without a table declines everything; Loops without a server refuse to
// start.
func TestByteZeroViews(t *testing.T) {
	var chain atomic.Int64
	srv := &http1.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			chain.Add(1)
			_, _ = io.WriteString(w, "chain")
		}),
		Exchanges: bytepath.NewPoller(bytepath.Listener{}),
		Logger:    slog.New(slog.DiscardHandler),
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close(); <-done }()
	c, br := dial(t, ln.Addr().String())
	if resp, body := exchangeOn(t, c, br, get); resp.StatusCode != http.StatusOK || body != "chain" || chain.Load() != 1 {
		t.Errorf("%d %q, chain served %d; want the chain's 200 chain", resp.StatusCode, body, chain.Load())
	}

	lp := bytepath.NewLoops(bytepath.Listener{}, nil)
	if lp.Takes() {
		t.Error("loops without a table take connections")
	}
	if s, err := lp.Start(new(evloop.Counts)); err == nil || s != nil {
		t.Errorf("Start without a server: %v, %v; want an error", s, err)
	}
}

// TestByteNewRoute checks what NewRoute refuses, and that a route to an
// https upstream is none the byte path serves.
func TestByteNewRoute(t *testing.T) {
	newRelay := func(t *testing.T, url string) *relay.Relay {
		pool, err := relay.NewPool([]string{url})
		if err != nil {
			t.Fatal(err)
		}
		return relay.New(pool, relay.NewForwarding(&clientkey.Resolver{}), relay.NewTransport(), time.Second, relay.NewBufferPool(), slog.New(slog.DiscardHandler), nil, nil)
	}
	lim, err := httplimit.New(httplimit.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	one := bytepath.Limit{By: "route_limit", Limiter: lim}
	plain := newRelay(t, "http://127.0.0.1:9")
	for _, tc := range []struct {
		name   string
		rl     *relay.Relay
		limits []bytepath.Limit
		want   string
	}{
		{"no relay", nil, nil, "no relay"},
		{"no limiter", plain, []bytepath.Limit{{By: "client"}}, "has no Limiter"},
		{"too many limits", plain, []bytepath.Limit{one, one, one, one}, "4 limits, at most 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt, err := bytepath.NewRoute("app", nil, tc.rl, nil, tc.limits)
			if err == nil || rt != nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewRoute: %v, %v; want an error saying %q", rt, err, tc.want)
			}
		})
	}
	rt, err := bytepath.NewRoute("app", nil, newRelay(t, "https://127.0.0.1:9"), nil, []bytepath.Limit{one})
	if err != nil || rt != nil {
		t.Errorf("a route to an https upstream: %v, %v; want none and no error", rt, err)
	}
	if rt.OnLoop() {
		t.Error("a nil Route is on the loops")
	}
}
