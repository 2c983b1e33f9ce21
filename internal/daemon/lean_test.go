package daemon_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/daemon"
)

// rawBackend is an upstream that answers each path with fixed bytes and
// records the head of every request it reads, for comparing what the two
// data paths send and pass on byte for byte.
type rawBackend struct {
	ln      net.Listener
	answers map[string]string // path → the answer's bytes; "" cuts the connection
	mu      sync.Mutex
	heads   []string
}

func startRawBackend(t *testing.T, answers map[string]string) *rawBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &rawBackend{ln: ln, answers: answers}
	serveEach(t, ln, b.serve)
	return b
}

// serveEach serves every connection ln accepts with serve, on a goroutine
// of its own, until tb ends, when it closes ln and waits for them all.
func serveEach(tb testing.TB, ln net.Listener, serve func(net.Conn)) {
	var wg sync.WaitGroup
	tb.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { serve(c) })
		}
	})
}

func (b *rawBackend) serve(c net.Conn) {
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
		requestLine := strings.Fields(head.String())
		path, _, _ := strings.Cut(requestLine[1], "?")
		answer, ok := b.answers[path]
		if !ok {
			answer = "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 4\r\n\r\nnope"
		}
		if answer == "" {
			return
		}
		if requestLine[0] == http.MethodHead {
			answer = headOfAnswer(answer)
		}
		if _, err := io.WriteString(c, answer); err != nil || strings.Contains(answer, "Connection: close\r\n") ||
			!strings.Contains(answer, "Content-Length") && !strings.Contains(answer, "chunked") && !strings.Contains(answer, " 204 ") && !strings.Contains(answer, " 304 ") {
			return
		}
	}
}

// headOfAnswer returns answer as it would be to a HEAD: its heads (the
// informational ones, then the final one) without the final one's body.
func headOfAnswer(answer string) string {
	for pos := 0; ; {
		i := strings.Index(answer[pos:], "\r\n\r\n")
		if i < 0 {
			return answer
		}
		if !strings.HasPrefix(answer[pos:], "HTTP/1.1 1") {
			return answer[:pos+i+4]
		}
		pos += i + 4
	}
}

// lastHead returns the head of the last request the backend read, its
// request line then its fields sorted: the relay writes fields in no
// particular order.
func (b *rawBackend) lastHead() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.heads) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimSuffix(b.heads[len(b.heads)-1], "\r\n\r\n"), "\r\n")
	slices.Sort(lines[1:])
	return strings.Join(lines, "\n")
}

// leanAnswers are the backend's answers of the differential test: each
// kind of answer the lean path writes itself, and each it hands over.
var leanAnswers = map[string]string{
	"/simple": "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\nX-Up: 1\r\nConnection: X-Hop\r\n" +
		"X-Hop: secret\r\nKeep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\nSet-Cookie: b=2\r\nSet-Cookie: a=1\r\n\r\nhello",
	"/dated":     "HTTP/1.1 200 OK\r\nDate: Mon, 01 Jan 2024 00:00:00 GMT\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok",
	"/empty":     "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
	"/error":     "HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain\r\nContent-Length: 8\r\n\r\nit broke",
	"/odd":       "HTTP/1.1 299 Whatever\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nodd",
	"/closing":   "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\nConnection: close\r\n\r\nbye",
	"/hints":     "HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok",
	"/untyped":   "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n<html",
	"/chunked":   "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
	"/trailers":  "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTrailer: X-Sum\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-Sum: 42\r\n\r\n",
	"/nocontent": "HTTP/1.1 204 No Content\r\nX-Up: 1\r\n\r\n",
	"/notmod":    "HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\n\r\n",
	"/big":       "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 40000\r\n\r\n" + strings.Repeat("0123456789", 4000),
	"/unframed":  "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\nuntil the end",
	"/cut":       "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100\r\nConnection: close\r\n\r\nonly this",
	"/reset":     "",
	"/switch":    "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
}

// leanCase is one request of the differential test and what the lean
// path does with it.
type leanCase struct {
	name    string
	request string // the request's bytes, with {{host}} for the Host
	outcome string // relayed, handed_over, declined; "": never offered to it
}

// loopOutcomes are the outcomes of the cases the lean path ends another
// way on event loops (http1_server eventloop): the loops hand over an
// answer with informational heads, and one cut short.
var loopOutcomes = map[string]string{"early hints": "handed_over", "head of early hints": "handed_over", "cut short": "handed_over"}

// outcomeOn returns what the lean path does with the case on server.
func (tc leanCase) outcomeOn(server config.HTTP1Server) string {
	if o, ok := loopOutcomes[tc.name]; ok && server == config.HTTP1ServerEventLoop {
		return o
	}
	return tc.outcome
}

var leanCases = []leanCase{
	{"simple", "GET /simple?a=1&b=2 HTTP/1.1\r\nHost: app.test\r\nUser-Agent: t/1\r\nAccept: */*\r\nCookie: a\r\nCookie: b\r\n" +
		"X-Forwarded-For: 6.6.6.6\r\nX_Forwarded_For: 6.6.6.6\r\nX-Real-IP: 6.6.6.6\r\nX-Original-URL: /admin\r\n" +
		"Keep-Alive: 300\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: Basic eA==\r\n\r\n", "relayed"},
	{"query re-encoded", "GET /simple?a=1;b=2&c=%zz HTTP/1.1\r\nHost: app.test\r\n\r\n", "relayed"},
	{"dated", "GET /dated HTTP/1.1\r\nHost: app.test\r\n\r\n", "relayed"},
	{"empty", "GET /empty HTTP/1.1\r\nHost: app.test\r\n\r\n", "relayed"},
	{"error", "GET /error HTTP/1.1\r\nHost: app.test:8080\r\n\r\n", "relayed"},
	{"odd status", "GET /odd HTTP/1.1\r\nHost: app.test\r\n\r\n", "relayed"},
	{"upstream closing", "GET /closing HTTP/1.1\r\nHost: app.test\r\n\r\n", "relayed"},
	{"early hints", "GET /hints HTTP/1.1\r\nHost: app.test\r\n\r\n", "relayed"},
	{"no route", "GET /nowhere HTTP/1.1\r\nHost: elsewhere.test\r\n\r\n", "declined"},
	{"unknown path", "GET /nothing HTTP/1.1\r\nHost: app.test\r\n\r\n", "relayed"},
	{"untyped", "GET /untyped HTTP/1.1\r\nHost: app.test\r\n\r\n", "handed_over"},
	{"chunked", "GET /chunked HTTP/1.1\r\nHost: app.test\r\n\r\n", "handed_over"},
	{"trailers", "GET /trailers HTTP/1.1\r\nHost: app.test\r\nTE: trailers\r\n\r\n", "declined"},
	{"trailers not asked for", "GET /trailers HTTP/1.1\r\nHost: app.test\r\n\r\n", "handed_over"},
	{"no content", "GET /nocontent HTTP/1.1\r\nHost: app.test\r\n\r\n", "handed_over"},
	{"not modified", "GET /notmod HTTP/1.1\r\nHost: app.test\r\nIf-None-Match: \"v1\"\r\n\r\n", "handed_over"},
	{"big", "GET /big HTTP/1.1\r\nHost: app.test\r\n\r\n", "handed_over"},
	{"unframed", "GET /unframed HTTP/1.1\r\nHost: app.test\r\n\r\n", "handed_over"},
	{"unasked switch", "GET /switch HTTP/1.1\r\nHost: app.test\r\n\r\n", "handed_over"},
	{"cut short", "GET /cut HTTP/1.1\r\nHost: app.test\r\n\r\n", "relayed"},
	{"upstream reset", "GET /reset HTTP/1.1\r\nHost: app.test\r\n\r\n", "handed_over"},
	{"head", "HEAD /simple HTTP/1.1\r\nHost: app.test\r\n\r\n", "relayed"},
	{"head of a big answer", "HEAD /big HTTP/1.1\r\nHost: app.test\r\n\r\n", "relayed"},
	{"head of an untyped answer", "HEAD /untyped HTTP/1.1\r\nHost: app.test\r\n\r\n", "relayed"},
	{"head of an empty answer", "HEAD /empty HTTP/1.1\r\nHost: app.test\r\n\r\n", "relayed"},
	{"head of a chunked answer", "HEAD /chunked HTTP/1.1\r\nHost: app.test\r\n\r\n", "handed_over"},
	{"head of early hints", "HEAD /hints HTTP/1.1\r\nHost: app.test\r\n\r\n", "relayed"},
	{"head, no content", "HEAD /nocontent HTTP/1.1\r\nHost: app.test\r\n\r\n", "handed_over"},
	{"post", "POST /simple HTTP/1.1\r\nHost: app.test\r\nContent-Length: 3\r\n\r\nabc", ""}, // has a body: not offered
	{"keep-alive", "GET /simple HTTP/1.1\r\nHost: app.test\r\nConnection: keep-alive\r\nKeep-Alive: 300\r\n\r\n", "relayed"},
	{"connection field", "GET /simple HTTP/1.1\r\nHost: app.test\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\nX-Kept: 1\r\n\r\n", "relayed"},
	{"connection naming forwarding", "GET /simple HTTP/1.1\r\nHost: app.test\r\nConnection: X-Forwarded-For,x-real-ip, ,cookie\r\n" +
		"X-Forwarded-For: 6.6.6.6\r\nCookie: a\r\nX-Kept: 1\r\n\r\n", "relayed"},
	{"connection naming many", "GET /simple HTTP/1.1\r\nHost: app.test\r\nConnection: a, b, c, d, e\r\nA: 1\r\nE: 5\r\nX-Kept: 1\r\n\r\n", "handed_over"},
	{"connection close", "GET /simple HTTP/1.1\r\nHost: app.test\r\nConnection: keep-alive, close\r\n\r\n", "relayed"},
	{"connection close, handed over", "GET /chunked HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n", "handed_over"},
	{"connection close, head", "HEAD /simple HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n", "relayed"},
	{"upgrade", "GET /simple HTTP/1.1\r\nHost: app.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", "declined"},
	{"unclean path", "GET /a/../simple HTTP/1.1\r\nHost: app.test\r\n\r\n", "declined"},
	{"HTTP/1.0", "GET /simple HTTP/1.0\r\nHost: app.test\r\n\r\n", "declined"},
}

const leanDiffConfig = `
admin: {listen: "127.0.0.1:0"}
log: {format: json, level: info, access_log: true}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    client_limit: {permits: 8}
    routes:
      - name: app
        host: [app.test]
        upstreams: ["{{backend}}"]
        upstream_timeout: 2s
        limit: {permits: 4, queue: {size: 2, timeout: 1s}}
        shadow_limit: {permits: 2}
` + leanDiffRate

// leanDiffRate is the rate of leanDiffConfig's route: it admits every
// request at once, so that its admission is compared too.
const leanDiffRate = "        rate: {rate: 100000r/s, burst: 100000, nodelay: true}\n"

// TestLeanMatchesFast sends every request of leanCases, one connection
// each, through a daemon whose listener runs the fast path, one whose
// listener runs the lean path and one whose listener runs it on event
// loops, and checks that the upstream received the same head, the client
// the same bytes (but for Date), the access log the same line (but for
// its times) and the metrics the same counts; and that the lean path
// relayed, handed over or declined each as expected, so that the
// comparison covers each of its ways.
// On an https listener the same requests go over TLS, so that the event
// loops' TLS connections are held to the full server's too.
func TestLeanMatchesFast(t *testing.T) {
	t.Run("http", func(t *testing.T) { leanMatchesFast(t, false) })
	t.Run("https", func(t *testing.T) { leanMatchesFast(t, true) })
}

func leanMatchesFast(t *testing.T, overTLS bool) {
	type run struct {
		upstream, client, access string
	}
	results := map[config.HTTP1Server][]run{}
	metrics := map[config.HTTP1Server]string{}
	leanCounts := map[config.HTTP1Server]string{}
	leanServers := []config.HTTP1Server{config.HTTP1ServerLean, config.HTTP1ServerEventLoop}
	text := leanDiffConfig
	if overTLS {
		certFile, keyFile := certFiles(t)
		text = onHTTPS(text, certFile, keyFile)
	}
	for _, server := range append([]config.HTTP1Server{config.HTTP1ServerFast}, leanServers...) {
		b := startRawBackend(t, leanAnswers)
		cfg := parseConfig(t, text, "http://"+b.ln.Addr().String())
		cfg.Listeners[0].HTTP1Server = server
		var logs syncBuffer
		srv, err := daemon.Start(cfg, daemon.Options{LogOutput: &logs})
		if err != nil {
			t.Fatal(err)
		}
		addr := srv.Addr("web").String()
		for _, tc := range leanCases {
			before := strings.Count(logs.String(), "\n")
			client := leanExchangeOver(t, addr, tc.request, overTLS)
			var access string
			waitUntil(func() bool {
				lines := strings.Split(logs.String(), "\n")
				for _, l := range lines[min(before, len(lines)):] {
					if strings.Contains(l, `"msg":"access"`) {
						access = l
						return true
					}
				}
				return false
			})
			results[server] = append(results[server], run{b.lastHead(), client, stripTimes(t, access)})
		}
		_, m, _ := get(t, http.DefaultClient, "http://"+srv.AdminAddr().String()+"/metrics")
		metrics[server] = countLines(m)
		leanCounts[server] = grepLines(m, "portcullis_http_lean_exchanges_total")
		// Every request's connection is closed: nothing may be held,
		// whichever way each exchange ended (cut short, reset, 502).
		if !waitUntil(func() bool { return srv.Snapshot().InUse() == 0 }) {
			t.Errorf("%s: permits or connections still held after every exchange ended: %+v", server, srv.Snapshot())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = srv.Shutdown(ctx)
		cancel()
	}
	for _, server := range leanServers {
		for i, tc := range leanCases {
			fast, lean := results[config.HTTP1ServerFast][i], results[server][i]
			if fast.upstream != lean.upstream {
				t.Errorf("%s: the upstream received\n%s\nfrom the fast path and\n%s\nfrom %s", tc.name, fast.upstream, lean.upstream, server)
			}
			if fast.client != lean.client {
				t.Errorf("%s: the client received\n%q\nfrom the fast path and\n%q\nfrom %s", tc.name, fast.client, lean.client, server)
			}
			if fast.access != lean.access {
				t.Errorf("%s: access line\n%s\nfrom the fast path and\n%s\nfrom %s", tc.name, fast.access, lean.access, server)
			}
		}
		if fast, other := ownPools(server, metrics[config.HTTP1ServerFast]), ownPools(server, metrics[server]); fast != other {
			t.Errorf("counts from the fast path:\n%s\nfrom %s:\n%s", fast, server, other)
		}
		want := map[string]int{}
		for _, tc := range leanCases {
			if o := tc.outcomeOn(server); o != "" {
				want[o]++
			}
		}
		for outcome, n := range want {
			line := fmt.Sprintf(`portcullis_http_lean_exchanges_total{listener="web",outcome=%q} %d`, outcome, n)
			if !strings.Contains(leanCounts[server], line) {
				t.Errorf("%s outcomes: want %s in\n%s", server, line, leanCounts[server])
			}
		}
	}
}

// ownPools returns the metrics text m without the counts of upstream
// connections opened and kept when server is eventloop: each loop keeps
// connections of its own, and an exchange it hands over ends with its
// connection, so that it opens more than the transport does.
func ownPools(server config.HTTP1Server, m string) string {
	if server != config.HTTP1ServerEventLoop {
		return m
	}
	var kept []string
	for _, l := range strings.Split(m, "\n") {
		if !strings.HasPrefix(l, "portcullis_upstream_dials_total") && !strings.HasPrefix(l, "portcullis_upstream_idle_connections") {
			kept = append(kept, l)
		}
	}
	return strings.Join(kept, "\n")
}

// leanExchangeOver sends request on a new connection from 127.0.0.2,
// over TLS (HTTP/1.1 by ALPN) when overTLS, and
// returns what came back, up to the end of the response (or of the
// connection), without its Date field. After an answer that says
// "Connection: close" it waits for the connection's end, and reports a
// connection left open; after a HEAD's it waits a moment for bytes that
// should not come (a body). Bytes after the answer are reported.
func leanExchangeOver(t *testing.T, addr, request string, overTLS bool) string {
	t.Helper()
	var c net.Conn
	if overTLS {
		c = tlsDial(t, "127.0.0.2", addr, "http/1.1")
	} else {
		c = dialFrom(t, "127.0.0.2", addr)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatal(err)
	}
	method, _, _ := strings.Cut(request, " ")
	answer, after := readAnswers(c, method)
	switch {
	case strings.Contains(answer, "\r\nConnection: close\r\n"):
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := io.Copy(io.Discard, c)
		after += int(n)
		if err != nil {
			answer += fmt.Sprintf("[not closed: %v]", err)
		}
	case method == http.MethodHead:
		_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		n, _ := io.Copy(io.Discard, c)
		after += int(n)
	}
	if after > 0 {
		answer += fmt.Sprintf("[%d bytes after the answer]", after)
	}
	return answer
}

// readAnswers reads from c the answers to pipelined requests with
// methods, in order: for each, the informational responses and the final
// one, or what came before the connection ended; without Date fields. It
// also returns how many bytes came after the last answer that it read
// already (it does not wait for more).
func readAnswers(c net.Conn, methods ...string) (string, int) {
	var got bytes.Buffer
	br := bufio.NewReader(io.TeeReader(c, &got))
	readOne := func(method string) bool {
		for {
			resp, err := http.ReadResponse(br, &http.Request{Method: method})
			if err != nil {
				return false
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode >= 200 {
				return true
			}
		}
	}
	for _, method := range methods {
		if !readOne(method) {
			break
		}
	}
	// What the reader buffered past the answers is not part of them.
	out := got.Bytes()[:got.Len()-br.Buffered()]
	return leanDateLine.ReplaceAllString(string(out), "Date: -\r\n"), br.Buffered()
}

var leanDateLine = regexp.MustCompile(`Date: [^\r\n]*\r\n`)

// stripTimes returns a JSON access line without its times, which differ
// from run to run, and the client's port.
func stripTimes(t *testing.T, line string) string {
	t.Helper()
	if line == "" {
		return ""
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatalf("access line %q: %v", line, err)
	}
	for _, k := range []string{"time", "duration_ms", "upstream_ms", "peer"} {
		delete(m, k)
	}
	out, _ := json.Marshal(m)
	return string(out)
}

// countLines returns the lines of the counts the two paths must agree on:
// every counter and gauge of the daemon and every histogram's count, but
// for the lean path's own counts and the build's.
func countLines(m string) string {
	var out []string
	for _, l := range strings.Split(m, "\n") {
		if !strings.HasPrefix(l, "portcullis_") || strings.Contains(l, "_bucket") || strings.Contains(l, "_sum") ||
			strings.HasPrefix(l, "portcullis_http_lean_exchanges_total") || strings.HasPrefix(l, "portcullis_build_info") {
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}
