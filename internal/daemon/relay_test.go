package daemon_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/daemon"
)

// recordingBackend answers the paths of relayCases and records, for each
// request, what it received: method, target, Host, every header field
// (sorted), the body and the trailers.
type recordingBackend struct {
	srv  *http.Server
	ln   net.Listener
	mu   sync.Mutex
	last string
}

func startRecordingBackend(t *testing.T) *recordingBackend {
	t.Helper()
	b := &recordingBackend{}
	mux := http.NewServeMux()
	mux.HandleFunc("/plain", func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Up", "1")
		h.Set("Connection", "X-Hop")
		h.Set("X-Hop", "secret")
		h.Set("Keep-Alive", "timeout=5")
		h.Set("Proxy-Connection", "keep-alive")
		h["Set-Cookie"] = []string{"a=1", "b=2"}
		_, _ = io.WriteString(w, "plain\n")
	})
	mux.HandleFunc("/trailer-declared", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Sum")
		_, _ = io.WriteString(w, "abc")
		w.(http.Flusher).Flush()
		w.Header().Set("X-Sum", "42")
	})
	mux.HandleFunc("/trailer-prefix", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "abc")
		w.Header().Set(http.TrailerPrefix+"X-Late", "1")
	})
	mux.HandleFunc("/hints", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload; as=style")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.Header().Set("X-Final", "1")
		_, _ = io.WriteString(w, "after hints\n")
	})
	mux.HandleFunc("/sse", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		for i := range 3 {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
		}
	})
	mux.HandleFunc("/chunked", func(w http.ResponseWriter, r *http.Request) {
		for i := range 3 {
			fmt.Fprintf(w, "part %d\n", i)
			w.(http.Flusher).Flush()
		}
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(100<<10))
		_, _ = w.Write([]byte(strings.Repeat("0123456789abcdef", 100<<10/16)))
	})
	mux.HandleFunc("/status500", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "it broke", http.StatusInternalServerError)
	})
	mux.HandleFunc("/nocontent", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("/notmodified", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"v1"`)
		w.WriteHeader(http.StatusNotModified)
	})
	mux.HandleFunc("/echo-body", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "got %d bytes\n", len(b.lastBody()))
	})
	record := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var sb strings.Builder
		fmt.Fprintf(&sb, "%s %s %s\nHost: %s\nContent-Length: %d\nTransfer-Encoding: %q\n",
			r.Method, r.RequestURI, r.Proto, r.Host, r.ContentLength, r.TransferEncoding)
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range r.Header {
				if !yield(k) {
					return
				}
			}
		}) {
			for _, v := range r.Header[k] {
				fmt.Fprintf(&sb, "%s: %q\n", k, v)
			}
		}
		fmt.Fprintf(&sb, "body: %q\ntrailer: %v\n", body, r.Trailer)
		b.mu.Lock()
		b.last = sb.String()
		b.mu.Unlock()
		mux.ServeHTTP(w, r)
	})
	var err error
	if b.ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	b.srv = &http.Server{Handler: record}
	go func() { _ = b.srv.Serve(b.ln) }()
	t.Cleanup(func() { _ = b.srv.Close() })
	return b
}

func (b *recordingBackend) take() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.last
	b.last = ""
	return s
}

func (b *recordingBackend) lastBody() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, body, _ := strings.Cut(b.last, "body: ")
	s, _, _ := strings.Cut(body, "\n")
	u, _ := strconv.Unquote(s)
	return u
}

// relayCases are raw requests (each on its own connection, which the
// request closes) covering what a reverse proxy must rewrite or pass on.
var relayCases = []struct{ name, raw string }{
	{"trusted proxy: its forwarding fields", "trusted GET /plain HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n" +
		"X-Forwarded-For: 203.0.113.1, 198.51.100.2\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: www.example\r\n" +
		"Forwarded: for=203.0.113.1\r\nTrue-Client-Ip: 203.0.113.1\r\nX-Real-Ip: 203.0.113.1\r\nX_Real_Ip: 1.2.3.4\r\n\r\n"},
	{"trusted proxy: no forwarding fields", "trusted GET /plain HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n"},
	{"hop-by-hop and managed request fields", "GET /plain HTTP/1.1\r\nHost: app.test\r\nConnection: close, X-Drop\r\n" +
		"X-Drop: 1\r\nKeep-Alive: 300\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: Basic eDp5\r\n" +
		"Te: gzip\r\nUpgrade: h2c\r\nX-Forwarded-For: 203.0.113.1\r\nX-Forwarded-For: 203.0.113.2\r\n" +
		"Forwarded: for=203.0.113.1\r\nX-Real-Ip: 203.0.113.1\r\nX_Forwarded_For: 203.0.113.1\r\n" +
		"X-Original-Url: /admin\r\nX-Custom: a\r\nX-Custom: b\r\nUser-Agent: relay-test\r\nAccept: */*\r\n\r\n"},
	{"no User-Agent", "GET /plain HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n"},
	{"TE trailers", "GET /trailer-declared HTTP/1.1\r\nHost: app.test\r\nTe: trailers, deflate\r\nConnection: close\r\n\r\n"},
	{"undeclared trailer", "GET /trailer-prefix HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n"},
	{"semicolon in query", "GET /plain?a=1;b=2&c=3 HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n"},
	{"malformed escape in query", "GET /plain?x=%zz&y=1 HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n"},
	{"clean query", "GET /plain?x=%41&y=1&z HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n"},
	{"absolute-form target", "GET http://app.test/plain?q=1 HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n"},
	{"HEAD", "HEAD /plain HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n"},
	{"HTTP/1.0", "GET /plain HTTP/1.0\r\nHost: app.test\r\n\r\n"},
	{"103 early hints", "GET /hints HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n"},
	{"stream: server-sent events", "GET /sse HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n"},
	{"stream: unknown length", "GET /chunked HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n"},
	{"large body", "GET /big HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n"},
	{"500", "GET /status500 HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n"},
	{"204", "DELETE /nocontent HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n"},
	{"304", "GET /notmodified HTTP/1.1\r\nHost: app.test\r\nIf-None-Match: \"v1\"\r\nConnection: close\r\n\r\n"},
	{"POST with Content-Length", "POST /echo-body HTTP/1.1\r\nHost: app.test\r\nContent-Type: text/plain\r\nContent-Length: 11\r\nConnection: close\r\n\r\nhello world"},
	{"POST chunked with trailer", "POST /echo-body HTTP/1.1\r\nHost: app.test\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\nConnection: close\r\n\r\n" +
		"5\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\n"},
	{"PUT empty", "PUT /echo-body HTTP/1.1\r\nHost: app.test\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"},
	{"Expect 100-continue", "POST /echo-body HTTP/1.1\r\nHost: app.test\r\nExpect: 100-continue\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc"},
}

// dechunk returns the head of a chunked response and its data, without the
// chunk framing.
func dechunk(t *testing.T, resp string) string {
	t.Helper()
	head, body, ok := strings.Cut(resp, "\r\n\r\n")
	if !ok {
		t.Fatalf("no head in %q", resp)
	}
	var data strings.Builder
	br := bufio.NewReader(strings.NewReader(body))
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("chunked body %q: %v", body, err)
		}
		n, err := strconv.ParseUint(strings.TrimSpace(line), 16, 32)
		if err != nil {
			t.Fatalf("chunk size in %q: %v", body, err)
		}
		if n == 0 {
			rest, _ := io.ReadAll(br)
			return head + "\r\n\r\n" + data.String() + "|" + string(rest)
		}
		chunk := make([]byte, n+2)
		if _, err := io.ReadFull(br, chunk); err != nil {
			t.Fatalf("chunk of %q: %v", body, err)
		}
		data.Write(chunk[:n])
	}
}

const continue100 = "HTTP/1.1 100 Continue\r\n\r\n"

var dateLine = regexp.MustCompile(`(?m)^Date: .*\r$`)

// exchangeRaw sends raw on a new connection to addr and returns every
// byte of the answer, the Date fields masked. It connects from 127.0.0.2,
// or from the trusted proxy 127.0.0.5 when raw starts with "trusted ".
func exchangeRaw(t *testing.T, addr, raw string) string {
	t.Helper()
	from := "127.0.0.2"
	if rest, ok := strings.CutPrefix(raw, "trusted "); ok {
		from, raw = "127.0.0.5", rest
	}
	c := dialFrom(t, from, addr)
	_ = c.SetDeadline(time.Now().Add(waitLimit))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(bufio.NewReader(c))
	if err != nil {
		t.Fatalf("read the answer: %v (after %q)", err, out)
	}
	return dateLine.ReplaceAllString(string(out), "Date: -\r")
}

// TestRelayMatchesReverseProxy is the differential test of the daemon's
// forwarder: the same requests go through a daemon whose routes use the
// relay and through one whose routes use httputil.ReverseProxy, as the
// daemon did before; the upstream must receive the same requests and the
// client the same bytes back. The one deliberate difference: on the fast
// path, ReverseProxy sent a request without User-Agent upstream with an
// empty "User-Agent:" field, the relay sends no such field.
func TestRelayMatchesReverseProxy(t *testing.T) { bothServers(t, testRelayMatchesReverseProxy) }

func testRelayMatchesReverseProxy(t *testing.T) {
	b := startRecordingBackend(t)
	text := `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    trusted_proxies: [127.0.0.5/32]
    routes:
      - upstreams: ["{{backend}}"]
        limit: {permits: 8}
`
	restore := daemon.SetReverseProxy(true)
	rp := startDaemonBefore(t, text, "http://"+b.ln.Addr().String())
	restore()
	rl := startDaemonBefore(t, text, "http://"+b.ln.Addr().String())
	for _, tc := range relayCases {
		t.Run(tc.name, func(t *testing.T) {
			wantResp := exchangeRaw(t, rp.srv.Addr("web").String(), tc.raw)
			wantReq := b.take()
			gotResp := exchangeRaw(t, rl.srv.Addr("web").String(), tc.raw)
			gotReq := b.take()
			// The deliberate difference.
			wantReq = strings.Replace(wantReq, "User-Agent: \"\"\n", "", 1)
			if gotReq != wantReq {
				t.Errorf("the upstream received\n%s\nthrough the relay, and\n%s\nthrough ReverseProxy", gotReq, wantReq)
			}
			// Behind net/http's server, ReverseProxy and the relay alike
			// may send the client two 100 Continue answers: the server's
			// own, sent when the body is first read, and the upstream's,
			// forwarded when it arrives after that read (a clean-clone CI
			// run of 3 December saw the relay do it). Which comes first
			// is a race, and two are as valid as one (RFC 9110 §15.2):
			// compare with one on both sides.
			wantResp = strings.Replace(wantResp, continue100+continue100, continue100, 1)
			gotResp = strings.Replace(gotResp, continue100+continue100, continue100, 1)
			if strings.HasPrefix(tc.name, "stream: ") {
				// How a stream's parts are cut into chunks depends on
				// when they arrive: compare the heads and the data.
				gotResp, wantResp = dechunk(t, gotResp), dechunk(t, wantResp)
			}
			if gotResp != wantResp {
				t.Errorf("the client received\n%q\nthrough the relay, and\n%q\nthrough ReverseProxy", gotResp, wantResp)
			}
			if wantResp == "" || !strings.HasPrefix(wantResp, "HTTP/1.") {
				t.Errorf("no answer through ReverseProxy: %q", wantResp)
			}
		})
	}
}

// TestRelayUpgradeKeepsEarlyBytes switches protocols through the daemon
// with the client's first bytes of the new protocol sent in the same
// packet as its request: they reach the upstream, and its answers come
// back, until the client half-closes and the upstream ends.
func TestRelayUpgradeKeepsEarlyBytes(t *testing.T) { bothServers(t, testRelayUpgradeKeepsEarlyBytes) }

func testRelayUpgradeKeepsEarlyBytes(t *testing.T) {
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		_ = brw.Flush()
		for {
			line, err := brw.ReadString('\n')
			if err != nil {
				return
			}
			_, _ = brw.WriteString("echo " + line)
			_ = brw.Flush()
		}
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = up.Serve(ln) }()
	t.Cleanup(func() { _ = up.Close() })
	d := startDaemonBefore(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - name: echo
        upstreams: ["{{backend}}"]
        limit: {permits: 1}
`, "http://"+ln.Addr().String())
	c := dialFrom(t, "127.0.0.2", d.srv.Addr("web").String())
	_ = c.SetDeadline(time.Now().Add(waitLimit))
	if _, err := io.WriteString(c, "GET /x HTTP/1.1\r\nHost: app.test\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\nfirst\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("answer to the upgrade: %v %v", resp, err)
	}
	if line, err := br.ReadString('\n'); err != nil || line != "echo first\n" {
		t.Fatalf("the bytes sent with the request came back as %q %v, want \"echo first\\n\"", line, err)
	}
	if n := d.route("web", "echo").Limit.Totals.InUse; n != 1 {
		t.Errorf("the open tunnel holds %d permits, want 1", n)
	}
	if _, err := io.WriteString(c, "second\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := br.ReadString('\n'); err != nil || line != "echo second\n" {
		t.Fatalf("second line came back as %q %v", line, err)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
		t.Fatalf("after the client's half-close: %q %v, want the upstream's end", rest, err)
	}
	d.waitFor("the tunnel's permit back", func() bool { return d.route("web", "echo").Limit.Totals.InUse == 0 })
}
