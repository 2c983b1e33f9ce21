package daemon_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/realclients"
)

// TestInterceptRealClients sends a request through an intercepting forward
// listener with curl (HTTP/1.1 and HTTP/2 inside the session), Go's
// http.Client (both too) and Python's requests, each trusting the CA: the
// target's answer arrives, the session was intercepted (Go sees a leaf of
// the CA), and the proxy_user limit counted the CONNECT and the request
// inside one by one.
func TestInterceptRealClients(t *testing.T) { bothServers(t, testInterceptRealClients) }

func testInterceptRealClients(t *testing.T) {
	d := startIntercept(t, interceptAuthed, "")
	proxyURL := "http://alice:alice-pw@" + d.srv.Addr("egress").String()
	clients := []struct {
		name  string
		proto string // the protocol inside the session
		get   func(t *testing.T, url string) answer
	}{
		{"curl --http1.1", "1.1", func(t *testing.T, url string) answer { return curlGet(t, proxyURL, d.ca.certFile, "--http1.1", url) }},
		{"curl --http2", "2", func(t *testing.T, url string) answer { return curlGet(t, proxyURL, d.ca.certFile, "--http2", url) }},
		{"Go HTTP/1.1", "1.1", func(t *testing.T, url string) answer {
			return goGet(t, d.icClient("alice", "alice-pw", "127.0.0.2", d.ca.pool, false), url)
		}},
		{"Go HTTP/2", "2", func(t *testing.T, url string) answer {
			return goGet(t, d.icClient("alice", "alice-pw", "127.0.0.3", d.ca.pool, true), url)
		}},
		{"Python requests", "", func(t *testing.T, url string) answer {
			out, err := realclients.Run(t, waitLimit, realclients.Python(t), "-c", realclients.PythonGet, proxyURL, url, d.ca.certFile)
			status, body, _ := strings.Cut(out, "\n")
			if err != nil {
				t.Fatalf("python: %v\n%s", err, out)
			}
			return answer{status: status, body: body}
		}},
	}
	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			before, lim := d.intercepted(), d.forwardLimit("egress", "proxy_user").Totals
			got := c.get(t, d.targetURL("/echo"))
			if got.status != "200" || (c.proto != "" && got.proto != c.proto) {
				t.Fatalf("answer %s over HTTP/%s, want 200 over HTTP/%s: %s", got.status, got.proto, c.proto, got.body)
			}
			checkEchoed(t, got.body, "localhost:"+d.port())
			after := d.intercepted()
			if after.Sessions != before.Sessions+1 || after.Requests != before.Requests+1 || after.Tunnelled != 0 {
				t.Errorf("intercept counts %+v after %+v: want one more session and one more request", after, before)
			}
			if n := d.forwardLimit("egress", "proxy_user").Totals.Granted - lim.Granted; n != 2 {
				t.Errorf("the proxy_user limit granted %d permits, want 2: the CONNECT's and the request's inside", n)
			}
		})
	}
	if m := d.minted(); m != 1 {
		t.Errorf("%v leaves minted for one name, want 1", m)
	}
}

// answer is what a client got: the final status, the HTTP version inside
// the session ("1.1", "2"), the body.
type answer struct{ status, proto, body string }

// curlGet GETs url with curl through proxy, trusting caFile, with the
// protocol flag given, and returns the final status, the HTTP version
// inside the session and the body.
func curlGet(t *testing.T, proxy, caFile, flag, url string) answer {
	t.Helper()
	out, err := realclients.Run(t, waitLimit, realclients.Curl(t), "-sS", "--max-time", "10", flag, "-x", proxy,
		"--cacert", caFile, "-w", "\n%{http_connect} %{http_code} %{http_version}", url)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	codes := strings.Fields(lines[len(lines)-1])
	if err != nil || len(codes) != 3 || codes[0] != "200" {
		t.Fatalf("curl: %v\n%s", err, out)
	}
	return answer{status: codes[1], proto: codes[2], body: strings.Join(lines[:len(lines)-1], "\n")}
}

func goGet(t *testing.T, c *http.Client, url string) answer {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if issuer := peerIssuer(t, resp); issuer != "portcullis proxy test CA" {
		t.Errorf("the client saw a certificate issued by %q, not by the interception CA", issuer)
	}
	proto := "1.1"
	if resp.ProtoMajor == 2 {
		proto = "2"
	}
	return answer{status: fmt.Sprint(resp.StatusCode), proto: proto, body: string(body)}
}

// TestInterceptUserLimitCountsRequestsInsideOneSession: a proxy_user limit
// of 2 admits two concurrent requests over one intercepted HTTP/2 session
// and refuses the third with 429; /debug/limits shows the user's two
// requests, not its tunnel.
func TestInterceptUserLimitCountsRequestsInsideOneSession(t *testing.T) {
	bothServers(t, testInterceptUserLimitCountsRequestsInsideOneSession)
}

func testInterceptUserLimitCountsRequestsInsideOneSession(t *testing.T) {
	d := startIntercept(t, interceptAuthed, "")
	c := d.icClient("alice", "alice-pw", "127.0.0.2", d.ca.pool, true)
	if a := goGet(t, c, d.targetURL("/echo")); a.status != "200" || a.proto != "2" {
		t.Fatalf("first request: %+v, want 200 over HTTP/2", a)
	}
	if n := d.forwardLimit("egress", "proxy_user").Totals.InUse; n != 0 {
		t.Fatalf("%d permits in use by an idle intercepted session, want 0", n)
	}
	slow := []<-chan result{getAsync(c, d.targetURL("/slow")), getAsync(c, d.targetURL("/slow"))}
	for range 2 {
		select {
		case <-d.target.entered:
		case <-time.After(waitLimit):
			t.Fatal("the slow requests did not reach the target")
		}
	}
	lim := d.forwardLimit("egress", "proxy_user")
	if len(lim.Busy) != 1 || lim.Busy[0].Key != "alice" || lim.Busy[0].InUse != 2 {
		t.Fatalf("/debug/limits shows %+v, want alice holding 2 permits", lim.Busy)
	}
	st, body, h := get(t, c, d.targetURL("/echo"))
	if st != http.StatusTooManyRequests || h.Get("Retry-After") == "" {
		t.Fatalf("a third request at once: %d %q, want 429 with Retry-After", st, body)
	}
	d.target.open()
	for i, ch := range slow {
		if r := await(t, ch); r.err != nil || r.status != http.StatusOK {
			t.Fatalf("slow request %d: %d %v", i, r.status, r.err)
		}
	}
	ic := d.intercepted()
	if ic.Connects != 1 || ic.Sessions != 1 || ic.Requests != 4 {
		t.Errorf("intercept counts %+v: want the four requests over one session", ic)
	}
	tot := d.forwardLimit("egress", "proxy_user").Totals
	if tot.Granted != 4 || tot.Refused != 1 || tot.InUse != 0 {
		t.Errorf("proxy_user totals %+v: want the CONNECT and three requests granted, one refused, none in use", tot)
	}
}

// TestInterceptBypassStaysPlainTunnel: a bypassed host is tunnelled, and
// the client sees the target's own certificate; another target of the same
// listener is intercepted.
func TestInterceptBypassStaysPlainTunnel(t *testing.T) {
	bothServers(t, testInterceptBypassStaysPlainTunnel)
}

func testInterceptBypassStaysPlainTunnel(t *testing.T) {
	d := startIntercept(t, interceptAuthed, `"localhost"`)
	origin := sharedCert(t).Pool
	resp, err := d.icClient("alice", "alice-pw", "127.0.0.2", origin, false).Get(d.targetURL("/echo"))
	if err != nil {
		t.Fatalf("a bypassed host through a client trusting only the target: %v", err)
	}
	resp.Body.Close()
	if issuer := peerIssuer(t, resp); issuer != "portcullis test" {
		t.Errorf("the client of a bypassed host saw a certificate issued by %q, want the target's own", issuer)
	}
	ic := d.intercepted()
	if ic.Tunnelled != 1 || ic.Connects != 0 || d.forwardOf("egress").TunnelsOpened != 1 {
		t.Errorf("intercept %+v, forward %+v: want one plain tunnel and nothing intercepted", ic, d.forwardOf("egress"))
	}
	// An IP address is not bypassed: the client asks for no name in SNI,
	// and gets a leaf for the address of its CONNECT.
	a := goGet(t, d.icClient("alice", "alice-pw", "127.0.0.3", d.ca.pool, false), "https://"+d.target.addr+"/echo")
	if a.status != "200" {
		t.Fatalf("an intercepted address: %+v", a)
	}
	if ic := d.intercepted(); ic.Connects != 1 || ic.Tunnelled != 1 {
		t.Errorf("intercept %+v: want one session and one tunnel", ic)
	}
}

// TestInterceptUntrustingClientLeavesNoPermit: a client that does not trust
// the CA fails its handshake, the failure is counted, and the CONNECT's
// permit goes back; so does that of a client that never starts its
// handshake (handshake_timeout) and of one that resets during it.
func TestInterceptUntrustingClientLeavesNoPermit(t *testing.T) {
	bothServers(t, testInterceptUntrustingClientLeavesNoPermit)
}

func testInterceptUntrustingClientLeavesNoPermit(t *testing.T) {
	text := strings.Replace(interceptAuthed, "        bypass:", "        handshake_timeout: 500ms\n        bypass:", 1)
	d := startIntercept(t, text, "")
	_, err := d.icClient("alice", "alice-pw", "127.0.0.2", sharedCert(t).Pool, false).Get(d.targetURL("/echo"))
	var unknown x509.UnknownAuthorityError
	if err == nil || !errors.As(err, &unknown) {
		t.Fatalf("a client not trusting the CA: %v, want an unknown authority error", err)
	}
	d.waitFor("the failed handshake counted", func() bool { return d.intercepted().HandshakeFailures == 1 })
	d.waitFor("the permit back", func() bool { return d.allIdle("egress") })

	alice := basicAuth("alice", "alice-pw")
	tu, resp := d.openTunnel("egress", "127.0.0.3", "localhost:"+d.port(), alice)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	if n := d.forwardLimit("egress", "proxy_user").Totals.InUse; n != 1 {
		t.Fatalf("%d permits in use during the handshake, want the CONNECT's 1", n)
	}
	if _, err := tu.br.ReadByte(); err == nil {
		t.Fatal("the proxy sent something to a client that sent no ClientHello")
	}
	d.waitFor("the silent client counted", func() bool { return d.intercepted().HandshakeFailures == 2 })
	d.waitFor("the permit back after the handshake timeout", func() bool { return d.allIdle("egress") })

	tu, resp = d.openTunnel("egress", "127.0.0.4", "localhost:"+d.port(), alice)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	_, _ = tu.c.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01}) // the start of a ClientHello
	resetConn(tu.c)
	d.waitFor("the reset client counted", func() bool { return d.intercepted().HandshakeFailures == 3 })
	d.waitFor("the permit back after the reset", func() bool { return d.allIdle("egress") })
}

// interceptOpen is a forward listener without authentication nor caps that
// intercepts everything, for the minting test.
const interceptOpen = `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: egress
    protocol: http
    listen: "127.0.0.1:0"
    mode: forward
    max_conns_per_client: -1
    forward:
      destinations: {allow: ["127.0.0.0/8", "::1"]}
      intercept:
        ca_cert: "{{ca_cert}}"
        ca_key: "{{ca_key}}"
        bypass: [{{bypass}}]
        upstream: {ca_file: "{{origin_ca}}"}
`

// TestInterceptConcurrentHandshakesMintOncePerName opens 200 intercepted
// sessions at once, four for each of 50 names, through the daemon: each
// handshake gets a leaf for its name, and /metrics counts exactly 50 leaves
// minted, the other 150 handshakes served from the cache or by the minting
// already under way.
func TestInterceptConcurrentHandshakesMintOncePerName(t *testing.T) {
	bothServers(t, testInterceptConcurrentHandshakesMintOncePerName)
}

func testInterceptConcurrentHandshakesMintOncePerName(t *testing.T) {
	d := startIntercept(t, interceptOpen, "")
	const names, each = 50, 4
	addr := d.srv.Addr("egress").String()
	// Every CONNECT is answered first; then every handshake starts at once.
	var connected, done sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, names*each)
	for i := range names * each {
		name := fmt.Sprintf("n%d.test", i%names)
		connected.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			errs <- handshakeThrough(addr, name, d.ca, connected.Done, start)
		}()
	}
	connected.Wait()
	close(start)
	done.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	minted := d.minted()
	hits := d.metric(`portcullis_intercept_leaves_cache_hits_total{listener="egress"}`)
	shared := d.metric(`portcullis_intercept_leaves_shared_total{listener="egress"}`)
	if minted != names || hits+shared != names*(each-1) {
		t.Fatalf("%v leaves minted, %v cache hits, %v shared mintings; want %d minted and %d served otherwise", minted, hits, shared, names, names*(each-1))
	}
	// A session is counted once the server's side of its handshake has
	// ended, which may be after the client's side has (TLS 1.3: the server
	// reads the client's Finished last).
	var sessions float64
	if !waitUntil(func() bool {
		sessions = d.metric(`portcullis_intercept_sessions_total{listener="egress"}`)
		return sessions >= names*each
	}) || sessions != names*each {
		t.Errorf("%v sessions, want %d", sessions, names*each)
	}
	t.Logf("%v cache hits, %v handshakes waited for a minting under way", hits, shared)
}

// handshakeThrough opens a CONNECT to name:443 through the proxy at addr,
// calls connected once it is answered (or failed), and once start is
// closed takes the TLS handshake inside, trusting ca only; it checks that
// the leaf is for name.
func handshakeThrough(addr, name string, ca *testCA, connected func(), start <-chan struct{}) error {
	once := sync.OnceFunc(connected)
	defer once()
	c, err := net.DialTimeout("tcp", addr, waitLimit)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * waitLimit))
	if _, err := fmt.Fprintf(c, "CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n\r\n", name, name); err != nil {
		return err
	}
	// Read the answer byte by byte, so that no byte of the handshake is
	// left in a buffer.
	var head []byte
	for !strings.HasSuffix(string(head), "\r\n\r\n") {
		var b [1]byte
		if _, err := c.Read(b[:]); err != nil {
			return fmt.Errorf("%s: reading the CONNECT answer: %w", name, err)
		}
		head = append(head, b[0])
	}
	if !strings.HasPrefix(string(head), "HTTP/1.1 200 ") {
		return fmt.Errorf("%s: CONNECT answered %q", name, head)
	}
	once()
	<-start
	tc := tls.Client(c, &tls.Config{ServerName: name, RootCAs: ca.pool})
	if err := tc.Handshake(); err != nil {
		return fmt.Errorf("%s: handshake: %w", name, err)
	}
	if got := tc.ConnectionState().PeerCertificates[0].DNSNames; len(got) != 1 || got[0] != name {
		return fmt.Errorf("%s: leaf for %v", name, got)
	}
	return tc.Close()
}

// TestInterceptRateCountsRequestsInside: the listener's rate, keyed by
// proxy user, counts the CONNECT and then each request inside the session:
// with a burst of 2 (3 at once) and a rate too slow to refill during the
// test, the CONNECT and two requests pass and the third request inside the
// same session gets 429; another user from the same address passes, the
// key being the user the CONNECT authenticated as.
func TestInterceptRateCountsRequestsInside(t *testing.T) {
	bothServers(t, testInterceptRateCountsRequestsInside)
}

func testInterceptRateCountsRequestsInside(t *testing.T) {
	text := strings.Replace(interceptAuthed, "    auth:", "    rate: {rate: 1r/m, burst: 2, nodelay: true, key: proxy_user}\n    auth:", 1)
	d := startIntercept(t, text, "")
	c := d.icClient("alice", "alice-pw", "127.0.0.2", d.ca.pool, false)
	for i := range 2 {
		if a := goGet(t, c, d.targetURL("/echo")); a.status != "200" {
			t.Fatalf("request %d inside the session: %+v", i, a)
		}
	}
	st, body, h := get(t, c, d.targetURL("/echo"))
	if st != http.StatusTooManyRequests || h.Get("Retry-After") == "" {
		t.Fatalf("the third request inside the session: %d %q, want 429 from the rate", st, body)
	}
	if ic := d.intercepted(); ic.Sessions != 1 || ic.Requests != 3 {
		t.Errorf("intercept counts %+v: want three requests over one session", ic)
	}
	if a := goGet(t, d.icClient("bob", "bob-pw", "127.0.0.2", d.ca.pool, false), d.targetURL("/echo")); a.status != "200" {
		t.Errorf("another user from the same address: %+v, want 200", a)
	}
	if r := d.listener("egress").Rate; r == nil || r.Totals.Refused != 1 || r.Totals.Admitted != 5 {
		t.Errorf("rate snapshot %+v, want alice's CONNECT and two requests and bob's CONNECT and request admitted, one refused", r)
	}
}
