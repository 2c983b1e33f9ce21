package daemon_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/admin"
)

// rateOf returns the rate snapshot of the named route ("" for the
// listener's own rate).
func (d *testDaemon) rateOf(listener, route string) *admin.RateSnapshot {
	d.t.Helper()
	if route == "" {
		return d.listener(listener).Rate
	}
	return d.route(listener, route).Rate
}

// A route's rate refuses a client past its rate and burst with 429, a
// Retry-After and the RateLimit fields computed from the key's state, and
// lets another client through; the refused request never reaches the
// route's concurrency limit nor the backend.
func TestRouteRateRefuses429WithHeadersFromState(t *testing.T) {
	bothServers(t, testRouteRateRefuses429WithHeadersFromState)
}

func testRouteRateRefuses429WithHeadersFromState(t *testing.T) {
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - name: r
        upstreams: ["{{backend}}"]
        rate: {rate: 6r/m, burst: 2, nodelay: true, headers: always}
        limit: {permits: 4}
`)
	c := d.client("127.0.0.2")
	url := d.url("web", "/")
	// A fresh key may send burst+1 = 3 at once; each admitted response
	// says how many are left: 2, 1, 0, and when the next comes (one
	// interval, 10 s, after the state falls below the window).
	for i, want := range []string{`"default";r=2;t=10`, `"default";r=1;t=10`, `"default";r=0;t=10`} {
		st, _, h := get(t, c, url)
		if st != http.StatusOK {
			t.Fatalf("request %d: %d, want 200", i+1, st)
		}
		if got := h.Get("RateLimit"); !okWithin(got, want) {
			t.Errorf("request %d: RateLimit %q, want %q (a second less if the machine stalled)", i+1, got, want)
		}
		if got := h.Get("RateLimit-Policy"); got != `"default";q=3;w=30` {
			t.Errorf("request %d: RateLimit-Policy %q", i+1, got)
		}
	}
	st, _, h := get(t, c, url)
	if st != http.StatusTooManyRequests {
		t.Fatalf("fourth request: %d, want 429", st)
	}
	// The state is 30 s ahead and may be 20 s ahead for one more: retry in
	// 10 s (9 if a second passed since the first request).
	ra, err := strconv.Atoi(h.Get("Retry-After"))
	if err != nil || ra < 9 || ra > 10 {
		t.Fatalf("Retry-After %q, want 10 from the key's state", h.Get("Retry-After"))
	}
	if got, want := h.Get("RateLimit"), `"default";r=0;t=`+strconv.Itoa(ra); got != want {
		t.Errorf("refusal RateLimit %q, want %q (t equals Retry-After)", got, want)
	}
	if st, _, _ := get(t, d.client("127.0.0.3"), url); st != http.StatusOK {
		t.Fatalf("another client: %d, want 200", st)
	}
	if n := d.backend.requests.Load(); n != 4 {
		t.Fatalf("backend saw %d requests, want the 4 admitted", n)
	}
	rs := d.rateOf("web", "r")
	if rs == nil || rs.Limit != "6r/m burst=2 nodelay" || rs.Key != "client_ip" {
		t.Fatalf("/debug/limits rate: %+v", rs)
	}
	if tot := rs.Totals; tot.Admitted != 4 || tot.Refused != 1 || tot.Keys != 2 {
		t.Fatalf("rate totals %+v, want 4 admitted, 1 refused, 2 busy keys", tot)
	}
	if k := rs.Busy[0]; k.Key != "127.0.0.2" || k.Remaining != 0 || k.AheadSeconds < 28 || k.AheadSeconds > 30 {
		t.Fatalf("busiest key %+v, want 127.0.0.2 about 30 s ahead with nothing left", k)
	}
	if g := d.route("web", "r").Limit.Totals.Granted; g != 4 {
		t.Fatalf("route limit granted %d permits, want 4: a refused request takes none", g)
	}
	m := d.metrics()
	for _, want := range []string{
		`portcullis_rate_admitted_total{limit="rate",listener="web",route="r"} 4`,
		`portcullis_rate_refused_total{limit="rate",listener="web",route="r"} 1`,
		`portcullis_rate_keys{limit="rate",listener="web",route="r"} 2`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// okWithin reports whether a RateLimit field equals want, or want with t
// one second less (a second went by between two requests).
func okWithin(got, want string) bool {
	if got == want {
		return true
	}
	i := strings.LastIndex(want, "t=")
	n, _ := strconv.Atoi(want[i+2:])
	return got == want[:i+2]+strconv.Itoa(n-1)
}

// In delay mode the early requests of a burst wait their turn, spaced out
// at the rate, and a delayed request holds no permit while it waits: with
// a client_limit and a route limit of one permit each and no queue, four
// requests sent at once all succeed, one after the other.
func TestRouteRateDelaySpacesRequestsWithoutHoldingPermits(t *testing.T) {
	defaultServer(t, testRouteRateDelaySpacesRequestsWithoutHoldingPermits)
}

func testRouteRateDelaySpacesRequestsWithoutHoldingPermits(t *testing.T) {
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    client_limit: {permits: 1}
    routes:
      - name: r
        upstreams: ["{{backend}}"]
        rate: {rate: 4r/s, burst: 3}
        limit: {permits: 1}
`)
	c := d.client("127.0.0.2")
	url := d.url("web", "/")
	start := time.Now()
	var mu sync.Mutex
	var done []time.Duration
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			resp, err := c.Get(url)
			if err != nil {
				t.Errorf("GET: %v", err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("status %d, want 200: a delayed request must not hold a permit", resp.StatusCode)
			}
			mu.Lock()
			done = append(done, time.Since(start))
			mu.Unlock()
		})
	}
	d.waitFor("three requests delayed", func() bool { return d.rateOf("web", "r").Totals.Delayed == 3 })
	l := d.listener("web")
	if cl, rl := l.ClientLimit.Totals.InUse, l.Routes[0].Limit.Totals.InUse; cl > 1 || rl > 1 {
		t.Errorf("client_limit holds %d permits and the route limit %d while three requests are delayed, want at most the one proceeding", cl, rl)
	}
	wg.Wait()
	slices.Sort(done)
	// 4r/s is one every 250 ms: the i-th request cannot end before i
	// intervals (a little less, since the first may have come late).
	for i, at := range done {
		if floor := time.Duration(i)*250*time.Millisecond - 50*time.Millisecond; at < floor {
			t.Errorf("request %d ended after %v, before its turn at %v", i+1, at, floor)
		}
	}
	if tot := d.rateOf("web", "r").Totals; tot.Admitted != 1 || tot.Delayed != 3 || tot.Refused != 0 {
		t.Fatalf("rate totals %+v, want 1 admitted at once and 3 delayed", tot)
	}
}

// A listener's conn_rate refuses a client's connections past its rate at
// accept: closed without an answer, before the server reads a byte, and
// counted as client_rate refusals; other clients are not affected, and
// closing a connection gives nothing back (a rate is not a cap).
func TestConnRateRefusesAtAccept(t *testing.T) { defaultServer(t, testConnRateRefusesAtAccept) }

func testConnRateRefusesAtAccept(t *testing.T) {
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    conn_rate: {rate: 1r/m, burst: 1}
    routes:
      - upstreams: ["{{backend}}"]
`)
	addr := d.srv.Addr("web").String()
	for i := range 2 {
		c := dialFrom(t, "127.0.0.2", addr)
		_ = c.SetDeadline(time.Now().Add(waitLimit))
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		if b, _ := io.ReadAll(c); !strings.HasPrefix(string(b), "HTTP/1.1 200") {
			t.Fatalf("connection %d within the burst: %q", i+1, b)
		}
		c.Close()
	}
	d.waitFor("the connections closed", func() bool { return d.listener("web").Connections.Open == 0 })
	if !refusedAtOnce(t, dialFrom(t, "127.0.0.2", addr)) {
		t.Fatal("a third connection within a minute was served over conn_rate 1r/m burst 1")
	}
	if st, _, _ := get(t, d.client("127.0.0.3"), d.url("web", "/")); st != http.StatusOK {
		t.Fatalf("another client: %d", st)
	}
	l := d.listener("web")
	if l.Connections.Refused.ClientRate != 1 || l.Connections.Refused.ClientCap != 0 {
		t.Fatalf("refusals %+v, want one client_rate", l.Connections.Refused)
	}
	if n := d.backend.requests.Load(); n != 3 {
		t.Fatalf("backend saw %d requests, want 3", n)
	}
	cr := l.ConnRate
	if cr == nil || cr.Limit != "1r/m burst=1 nodelay" || cr.Totals.Admitted != 3 || cr.Totals.Refused != 1 ||
		len(cr.Busy) != 2 || cr.Busy[0].Key != "127.0.0.2" || cr.Busy[0].Remaining != 0 {
		t.Fatalf("/debug/limits conn_rate: %+v", cr)
	}
	m := d.metrics()
	for _, want := range []string{
		`portcullis_connections_refused_total{listener="web",reason="client_rate"} 1`,
		`portcullis_rate_refused_total{limit="conn_rate",listener="web",route=""} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// A route's rate counts HTTP/1.1, HTTP/2 and HTTP/3 requests alike, in one
// state per client whichever listener and protocol they come by; an http3
// listener's handshake_rate refuses a proven client's QUIC connections
// past its rate.
func TestRateCountsHTTP2AndHTTP3Alike(t *testing.T) {
	defaultServer(t, testRateCountsHTTP2AndHTTP3Alike)
}

func testRateCountsHTTP2AndHTTP3Alike(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t)
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: tls
    protocol: https
    listen: "127.0.0.1:0"
    tls: {cert_file: "`+certFile+`", key_file: "`+keyFile+`"}
    routes:
      - name: r
        upstreams: ["{{backend}}"]
        rate: {rate: 1r/m, burst: 3, nodelay: true}
  - name: quic
    protocol: http3
    listen: "127.0.0.1:0"
    tls: {cert_file: "`+certFile+`", key_file: "`+keyFile+`"}
    routes_from: tls
    handshake_rate: {rate: 1r/m, burst: 1}
`)
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	h2 := &http.Client{Timeout: waitLimit, Transport: &http.Transport{DialContext: dialer.DialContext,
		TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	d.mu.Lock()
	d.clients = append(d.clients, h2)
	d.mu.Unlock()
	h3, _ := h3Client(t, "127.0.0.2", pool)
	tlsURL := "https://" + d.srv.Addr("tls").String() + "/"
	quicURL := "https://127.0.0.1:" + strconv.Itoa(d.srv.Addr("quic").(*net.UDPAddr).Port) + "/"
	// Burst 3: four requests at once for a fresh client, two over each
	// protocol; the fifth is refused whichever way it comes.
	for i, c := range []*http.Client{h2, h3, h2, h3} {
		resp, err := c.Get([]string{tlsURL, quicURL}[i%2])
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Proto != []string{"HTTP/2.0", "HTTP/3.0"}[i%2] {
			t.Fatalf("request %d: %d over %s", i+1, resp.StatusCode, resp.Proto)
		}
	}
	for _, url := range []string{quicURL, tlsURL} {
		c := map[string]*http.Client{tlsURL: h2, quicURL: h3}[url]
		resp, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("%s over its rate: %d, Retry-After %q; want 429 with Retry-After", resp.Proto, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	if tot := d.rateOf("tls", "r").Totals; tot.Admitted != 4 || tot.Refused != 2 || tot.Keys != 1 {
		t.Fatalf("one rate for both protocols: totals %+v, want 4 admitted, 2 refused, 1 key", tot)
	}
	// handshake_rate 1r/m burst 1: the client's first QUIC connection is
	// the one above; a second is admitted, a third refused.
	second, tr2 := h3Client(t, "127.0.0.2", pool)
	if resp, err := second.Get(quicURL); err != nil {
		t.Fatalf("second QUIC connection within the burst: %v", err)
	} else {
		resp.Body.Close()
	}
	third, _ := h3Client(t, "127.0.0.2", pool)
	if resp, err := third.Get(quicURL); err == nil {
		resp.Body.Close()
		t.Fatalf("a third QUIC connection within a minute was served (%d) over handshake_rate 1r/m burst 1", resp.StatusCode)
	}
	// A client whose Initial packet is retransmitted before the refusal
	// reaches it (a loaded machine) makes a second attempt, refused too:
	// at least one refusal, and only refusals past the two admissions.
	l := d.listener("quic")
	if l.Connections.Refused.ClientRate < 1 {
		t.Fatalf("quic refusals %+v, want client_rate ones", l.Connections.Refused)
	}
	if hr := l.HandshakeRate; hr == nil || hr.Totals.Admitted != 2 || hr.Totals.Refused < 1 || len(hr.Busy) != 1 {
		t.Fatalf("/debug/limits handshake_rate: %+v", hr)
	}
	if m := d.metrics(); !strings.Contains(m, `portcullis_quic_attempts_total{listener="quic",outcome="per_client_rate_refused"} `) ||
		!strings.Contains(m, `portcullis_rate_admitted_total{limit="handshake_rate",listener="quic",route=""} 2`) {
		t.Errorf("/metrics lacks the handshake rate's refusal and admissions")
	}
	_ = tr2.Close()
}

// A dry-run rate lets every request through at once and counts what it
// would have refused and delayed.
func TestRateDryRunCountsWithoutRefusing(t *testing.T) {
	defaultServer(t, testRateDryRunCountsWithoutRefusing)
}

func testRateDryRunCountsWithoutRefusing(t *testing.T) {
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    rate: {rate: 1r/m, burst: 1, dry_run: true}
    routes:
      - upstreams: ["{{backend}}"]
`)
	c := d.client("127.0.0.2")
	start := time.Now()
	for i := range 4 {
		if st, _, h := get(t, c, d.url("web", "/")); st != http.StatusOK || h.Get("Retry-After") != "" {
			t.Fatalf("request %d under a dry-run rate: %d, Retry-After %q", i+1, st, h.Get("Retry-After"))
		}
	}
	if el := time.Since(start); el > 30*time.Second {
		t.Fatalf("4 requests took %v: a dry run must not delay", el)
	}
	// Burst 1 with delay 0: the second would have waited a minute, the
	// third and fourth been refused.
	tot := d.rateOf("web", "").Totals
	if tot.Admitted != 1 || tot.ShadowDelayed != 1 || tot.ShadowRefused != 2 || tot.Refused != 0 {
		t.Fatalf("dry-run totals %+v, want 1 admitted, 1 shadow-delayed, 2 shadow-refused", tot)
	}
	if m := d.metrics(); !strings.Contains(m, `portcullis_rate_shadow_refused_total{limit="rate",listener="web",route=""} 2`) {
		t.Errorf("/metrics lacks the shadow refusals")
	}
}

const rateReloadA = `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - name: r
        upstreams: ["{{backend}}"]
        rate: {rate: 1r/m}
`

// A reload that leaves a rate's settings alone keeps its state: a client
// refused before is still refused after; a reload that changes the rate
// starts it afresh, and the replaced rate is closed.
func TestReloadKeepsRateStateWhenUnchanged(t *testing.T) {
	defaultServer(t, testReloadKeepsRateStateWhenUnchanged)
}

func testReloadKeepsRateStateWhenUnchanged(t *testing.T) {
	d := startDaemon(t, rateReloadA)
	c := d.client("127.0.0.2")
	url := d.url("web", "/")
	if st, _, _ := get(t, c, url); st != http.StatusOK {
		t.Fatalf("first: %d", st)
	}
	if st, _, _ := get(t, c, url); st != http.StatusTooManyRequests {
		t.Fatalf("second within a minute: %d, want 429", st)
	}
	// Another route and a new upstream timeout: the rate's settings stay.
	unchanged := strings.Replace(rateReloadA, "        rate: {rate: 1r/m}\n",
		"        rate: {rate: 1r/m}\n        upstream_timeout: 30s\n      - name: other\n        path_prefix: /other\n        upstreams: [\"{{backend}}\"]\n", 1)
	if err := d.srv.Reload(d.sameAddr(unchanged)); err != nil {
		t.Fatal(err)
	}
	if st, _, _ := get(t, c, url); st != http.StatusTooManyRequests {
		t.Fatalf("after a reload that kept the rate: %d, want 429 (its state carries over)", st)
	}
	if tot := d.rateOf("web", "r").Totals; tot.Admitted != 1 || tot.Refused != 2 {
		t.Fatalf("totals after the reload %+v, want them carried over: 1 admitted, 2 refused", tot)
	}
	before, sweeps := retiringRates(), rateSweeps()
	changed := strings.Replace(rateReloadA, "rate: {rate: 1r/m}", "rate: {rate: 2r/m}", 1)
	if err := d.srv.Reload(d.sameAddr(changed)); err != nil {
		t.Fatal(err)
	}
	if st, _, _ := get(t, c, url); st != http.StatusOK {
		t.Fatalf("after a reload that changed the rate: %d, want 200 from a fresh state", st)
	}
	if rs := d.rateOf("web", "r"); rs.Limit != "2r/m" || rs.Totals.Admitted != 1 || rs.Totals.Refused != 0 {
		t.Fatalf("new rate %+v", rs)
	}
	d.waitFor("the replaced rate to close", func() bool { return retiringRates() == before && rateSweeps() == sweeps })
}

// retiringRates counts the goroutines waiting to close a replaced rate.
func retiringRates() int {
	n := 0
	for _, g := range allGoroutines() {
		if strings.Contains(g, "(*Server).retireRate.func") {
			n++
		}
	}
	return n
}

// rateSweeps counts the background sweeps of the rate limiters running.
func rateSweeps() int {
	n := 0
	for _, g := range allGoroutines() {
		if strings.Contains(g, "rate.(*Limiter[...]).sweepLoop") {
			n++
		}
	}
	return n
}

func allGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Split(string(buf), "\n\n")
}

// A request whose client goes away while the rate delays it gives its
// place back, reaches no upstream and holds nothing; the client's next
// request takes the place it left.
func TestDelayedRequestWhoseClientLeavesGivesItsPlaceBack(t *testing.T) {
	bothServers(t, testDelayedRequestWhoseClientLeavesGivesItsPlaceBack)
}

func testDelayedRequestWhoseClientLeavesGivesItsPlaceBack(t *testing.T) {
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - name: r
        upstreams: ["{{backend}}"]
        rate: {rate: 1r/m, burst: 1}
        limit: {permits: 1}
`)
	c := d.client("127.0.0.2")
	url := d.url("web", "/")
	if st, _, _ := get(t, c, url); st != http.StatusOK {
		t.Fatalf("first: %d", st)
	}
	for i := range 2 {
		// The second request waits a minute for its turn; its client
		// gives up first.
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		errc := make(chan error, 1)
		go func() {
			resp, err := c.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			errc <- err
		}()
		d.waitFor("the request delayed", func() bool { return d.rateOf("web", "r").Totals.Delayed == uint64(i+1) })
		cancel()
		if err := <-errc; err == nil {
			t.Fatal("the cancelled request got a response")
		}
		d.waitFor("the place given back", func() bool { return d.rateOf("web", "r").Totals.Cancelled == uint64(i+1) })
	}
	// Burst 1: had the first delayed request kept its place, the second
	// would have been refused, not delayed.
	if tot := d.rateOf("web", "r").Totals; tot.Refused != 0 || tot.Admitted != 1 {
		t.Fatalf("totals %+v", tot)
	}
	if n := d.backend.requests.Load(); n != 1 {
		t.Fatalf("backend saw %d requests, want 1: a delayed request reaches no upstream", n)
	}
	if g := d.route("web", "r").Limit.Totals.Granted; g != 1 {
		t.Fatalf("route limit granted %d permits, want 1", g)
	}
}

const connRateReload = `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    conn_rate: {rate: 1r/m}
    routes:
      - name: r
        upstreams: ["{{backend}}"]
`

// conn_rate lives with the listener's connection caps: a reload that keeps
// the listener (a change of routes) keeps its state, and one that rebuilds
// it (a change of its socket settings) starts it afresh, as docs/daemon.md
// says.
func TestReloadConnRateFollowsTheListener(t *testing.T) {
	defaultServer(t, testReloadConnRateFollowsTheListener)
}

func testReloadConnRateFollowsTheListener(t *testing.T) {
	d := startDaemon(t, connRateReload)
	addr := d.srv.Addr("web").String()
	if refusedAtOnce(t, dialFrom(t, "127.0.0.2", addr)) {
		t.Fatal("first connection refused")
	}
	if !refusedAtOnce(t, dialFrom(t, "127.0.0.2", addr)) {
		t.Fatal("second connection within a minute served over conn_rate 1r/m")
	}
	routeChange := strings.Replace(connRateReload, "        upstreams:", "        limit: {permits: 5}\n        upstreams:", 1)
	if err := d.srv.Reload(d.sameAddr(routeChange)); err != nil {
		t.Fatal(err)
	}
	if !refusedAtOnce(t, dialFrom(t, "127.0.0.2", addr)) {
		t.Fatal("after a reload that kept the listener, a connection was served: its conn_rate state was lost")
	}
	socketChange := strings.Replace(routeChange, "    conn_rate:", "    read_timeout: 30s\n    conn_rate:", 1)
	if err := d.srv.Reload(d.sameAddr(socketChange)); err != nil {
		t.Fatal(err)
	}
	if refusedAtOnce(t, dialFrom(t, "127.0.0.2", addr)) {
		t.Fatal("after a reload that rebuilt the listener, the conn_rate did not start afresh")
	}
	if cr := d.listener("web").ConnRate; cr == nil || cr.Totals.Admitted != 1 || cr.Totals.Refused != 0 {
		t.Fatalf("the rebuilt listener's conn_rate: %+v", cr)
	}
}

// A forward listener's rate keyed by target_host counts each request, and
// each CONNECT once (not the requests inside its tunnel), whoever sends
// them; an override exempts one target; authentication comes first, so a
// request refused 407 is never counted.
func TestForwardRateByTargetHost(t *testing.T) { defaultServer(t, testForwardRateByTargetHost) }

func testForwardRateByTargetHost(t *testing.T) {
	limited, tlsTarget, free := newGatedTarget(t, false), newGatedTarget(t, true), newGatedTarget(t, false)
	d, _ := startForward(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: egress
    protocol: http
    listen: "127.0.0.1:0"
    mode: forward
    auth: {htpasswd: "{{htpasswd}}"}
    rate: {rate: 1r/m, burst: 1, nodelay: true, key: target_host, overrides: {"`+free.addr+`": unlimited}}
    forward:
      destinations: {allow: ["127.0.0.0/8"]}
`)
	alice := d.proxyClient("egress", "alice", "alice-pw", "127.0.0.2")
	bob := d.proxyClient("egress", "bob", "bob-pw", "127.0.0.3")
	intruder := d.proxyClient("egress", "alice", "guess", "127.0.0.4")
	if st, _, _ := get(t, intruder, limited.url("/echo")); st != http.StatusProxyAuthRequired {
		t.Fatalf("wrong password: %d, want 407", st)
	}
	for i, c := range []*http.Client{alice, bob} {
		if st, _, _ := get(t, c, limited.url("/echo")); st != http.StatusOK {
			t.Fatalf("request %d to the limited target: %d", i+1, st)
		}
	}
	st, _, h := get(t, bob, limited.url("/echo"))
	if st != http.StatusTooManyRequests || h.Get("Retry-After") == "" {
		t.Fatalf("a third request to the target within a minute: %d (Retry-After %q), want 429 whoever sends it", st, h.Get("Retry-After"))
	}
	for range 5 {
		if st, _, _ := get(t, alice, free.url("/echo")); st != http.StatusOK {
			t.Fatalf("the unlimited target: %d", st)
		}
	}
	// HTTPS through CONNECT: a tunnel counts once, however many requests
	// it carries; two tunnels fit the burst, a third CONNECT is refused.
	for range 3 {
		if st, _, _ := get(t, alice, tlsTarget.url("/echo")); st != http.StatusOK {
			t.Fatalf("request inside the first tunnel: %d", st)
		}
	}
	if st, _, _ := get(t, d.proxyClient("egress", "bob", "bob-pw", "127.0.0.5"), tlsTarget.url("/echo")); st != http.StatusOK {
		t.Fatalf("a second tunnel to the target: %d", st)
	}
	if _, err := d.proxyClient("egress", "bob", "bob-pw", "127.0.0.6").Get(tlsTarget.url("/echo")); err == nil {
		t.Fatal("a third CONNECT to the target within a minute opened a tunnel")
	}
	rs := d.rateOf("egress", "")
	if rs == nil || rs.Key != "target_host" {
		t.Fatalf("/debug/limits rate %+v", rs)
	}
	// 2 + 1 refused to the limited target, 5 to the free one, 2 + 1
	// refused CONNECTs; the 407 is not there.
	if tot := rs.Totals; tot.Admitted != 9 || tot.Refused != 2 {
		t.Fatalf("rate totals %+v, want 9 admitted and 2 refused", tot)
	}
}

// A shutdown whose timeout runs out while a request is delayed cuts it
// off: it ends (503 or a closed connection) without reaching the backend,
// gives its place back, and leaves nothing held.
func TestShutdownCutsDelayedRequests(t *testing.T) { bothServers(t, testShutdownCutsDelayedRequests) }

func testShutdownCutsDelayedRequests(t *testing.T) {
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    client_limit: {permits: 4}
    routes:
      - name: r
        upstreams: ["{{backend}}"]
        rate: {rate: 1r/m, burst: 1}
`)
	d.manualStop = true
	c := d.client("127.0.0.2")
	if st, _, _ := get(t, c, d.url("web", "/")); st != http.StatusOK {
		t.Fatalf("first: %d", st)
	}
	delayed := getAsync(c, d.url("web", "/"))
	d.waitFor("the request delayed", func() bool { return d.rateOf("web", "r").Totals.Delayed == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := d.srv.Shutdown(ctx); err == nil {
		t.Fatal("Shutdown returned nil with a request delayed for a minute: it should have cut it off")
	}
	if r := await(t, delayed); r.err == nil && r.status != http.StatusServiceUnavailable {
		t.Fatalf("the delayed request got %d, want 503 or a closed connection", r.status)
	}
	if n := d.backend.requests.Load(); n != 1 {
		t.Fatalf("backend saw %d requests, want 1", n)
	}
	s := d.srv.Snapshot()
	if rs := (routeFinder{s}).route("web", "r").Rate; rs.Totals.Cancelled != 1 {
		t.Fatalf("rate totals %+v, want the cut request given back", rs.Totals)
	}
}
