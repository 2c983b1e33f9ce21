package http1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// hpHead is what Exchange.Head and HeadParser.Parse show of a request,
// copied out of the structures both reuse: every field headSeen records
// (method, RequestURI, URL, protocol, Host, Header, ContentLength,
// TransferEncoding, Close, Trailer), whether it carries a TLS state, a
// context of its own or a body other than http.NoBody, and apart, its
// RemoteAddr, so that one parser can be held to many connections.
type hpHead struct {
	desc   string
	remote string
}

func hpHeadOf(r *http.Request) hpHead {
	extra := fmt.Sprintf(" TLS=%v background=%v noBody=%v", r.TLS != nil, r.Context() == context.Background(), r.Body == http.NoBody)
	return hpHead{desc: headSeen(r).String() + extra, remote: r.RemoteAddr}
}

// hpEvent is one thing a server did with a request: offered it to
// Exchanges ("offer", with the length of its RawHead), or gave it to
// Handler ("handle", offered telling whether it was offered first).
type hpEvent struct {
	kind    string
	offered bool
	head    hpHead
	headLen int
}

func (e hpEvent) String() string {
	return fmt.Sprintf("%s(offered=%v, %d bytes) %s remote=%s", e.kind, e.offered, e.headLen, e.head.desc, e.head.remote)
}

// hpWatcher is the Exchanges hook and the Handler of a server under test:
// the hook records the Head of each request offered to it and declines
// it; the handler records each request it gets, reads its body and
// answers "ok". Events are kept by the client's address.
type hpWatcher struct {
	mu      sync.Mutex
	events  map[string][]hpEvent
	pending map[string]bool // an offered request is on its way to the handler
}

func (w *hpWatcher) add(remote string, e hpEvent) {
	if w.events == nil {
		w.events = make(map[string][]hpEvent)
		w.pending = make(map[string]bool)
	}
	w.events[remote] = append(w.events[remote], e)
}

func (w *hpWatcher) ServeExchange(x *Exchange) bool {
	hd := hpHeadOf(x.Head())
	n := len(x.RawHead())
	w.mu.Lock()
	defer w.mu.Unlock()
	w.add(hd.remote, hpEvent{kind: "offer", offered: true, head: hd, headLen: n})
	w.pending[hd.remote] = true
	return false
}

func (w *hpWatcher) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	hd := hpHeadOf(r)
	w.mu.Lock()
	offered := w.pending[r.RemoteAddr]
	w.add(r.RemoteAddr, hpEvent{kind: "handle", offered: offered, head: hd})
	delete(w.pending, r.RemoteAddr)
	w.mu.Unlock()
	_, _ = io.Copy(io.Discard, r.Body)
	_, _ = io.WriteString(rw, "ok")
}

// take returns the events of the connection from remote and forgets them.
func (w *hpWatcher) take(remote string) []hpEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	ev := w.events[remote]
	delete(w.events, remote)
	delete(w.pending, remote)
	return ev
}

// hpWant returns what Parse must return for in, given what the server did
// with the same bytes: the head it offered when it offered the first
// request and that request's head is all of in; false otherwise (it
// refused the head, found it incomplete, did not offer the request, or
// read more after it).
func hpWant(events []hpEvent, in []byte) (hpHead, bool) {
	if len(events) == 0 || events[0].kind != "offer" || events[0].headLen != len(in) {
		return hpHead{}, false
	}
	return events[0].head, true
}

// hpDiff parses in with p and returns "" when the result is want (with
// RemoteAddr remote) and wantOK, or what differs. It also checks that
// Parse left in as it was.
func hpDiff(p *HeadParser, in []byte, want hpHead, wantOK bool, remote string) string {
	kept := bytes.Clone(in)
	r, ok := p.Parse(in)
	if !bytes.Equal(in, kept) {
		return "Parse changed its input"
	}
	if ok != wantOK {
		got := "<nil>"
		if r != nil {
			got = hpHeadOf(r).desc
		}
		return fmt.Sprintf("Parse ok = %v, want %v; Parse returned %s", ok, wantOK, got)
	}
	if !ok {
		if r != nil {
			return "Parse returned a request with false"
		}
		return ""
	}
	got := hpHeadOf(r)
	if got.desc != want.desc {
		return fmt.Sprintf("Parse:\n got  %s\n want %s", got.desc, want.desc)
	}
	if got.remote != remote {
		return fmt.Sprintf("RemoteAddr %q, want %q", got.remote, remote)
	}
	return ""
}

// hpHeadOfLen returns a valid GET head of exactly n bytes (n ≥ 64), its
// fields "X-P" lines of at most 1000 bytes.
func hpHeadOfLen(n int) string {
	const prefix = "GET /big HTTP/1.1\r\nHost: x\r\n"
	var b strings.Builder
	b.WriteString(prefix)
	r := n - len(prefix) - 2
	for r > 1000+7 {
		b.WriteString("X-P: " + strings.Repeat("p", 1000-7) + "\r\n")
		r -= 1000
	}
	b.WriteString("X-P:" + strings.Repeat("q", r-6) + "\r\n")
	b.WriteString("\r\n")
	if b.Len() != n {
		panic(fmt.Sprintf("hpHeadOfLen(%d) made %d bytes", n, b.Len()))
	}
	return b.String()
}

// hpCases are the inputs of the HeadParser's differential tests beyond
// the server's own corpus, for a server with maxHeaderBytes: heads of
// every kind the parser must accept or refuse as the server does, heads
// at the server's size limit and the read buffer's size, heads with a
// body, an Expect field, "OPTIONS *" and the HTTP/2 preface, which the
// server does not offer, and heads followed by more bytes.
func hpCases(maxHeaderBytes int) []corpusCase {
	limit, _, _ := (&Server{MaxHeaderBytes: maxHeaderBytes}).ReadLimits()
	var many, manyRepeated strings.Builder
	for i := range 150 {
		fmt.Fprintf(&many, "X-Field-%d: value %d\r\n", i, i)
		fmt.Fprintf(&manyRepeated, "%s: v%d\r\n", []string{"Accept", "accept", "X-R", "x-r", "Cookie"}[i%5], i)
	}
	cases := []corpusCase{
		{name: "plain get", raw: "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"},
		{name: "browser get", raw: "GET /a/b?c=d&e HTTP/1.1\r\nHost: example.com\r\nUser-Agent: Mozilla/5.0\r\nAccept: text/html,application/xhtml+xml\r\nAccept-Language: en-US,en;q=0.5\r\nAccept-Encoding: gzip, deflate, br\r\nConnection: keep-alive\r\nCookie: a=1; b=2\r\nUpgrade-Insecure-Requests: 1\r\nSec-Fetch-Dest: document\r\nPriority: u=0, i\r\n\r\n"},
		{name: "many fields", raw: "GET /many HTTP/1.1\r\nHost: x\r\n" + many.String() + "\r\n"},
		{name: "many repeated fields", raw: "GET /rep HTTP/1.1\r\nHost: x\r\n" + manyRepeated.String() + "\r\n"},
		{name: "repeated fields", raw: "GET / HTTP/1.1\r\nHost: x\r\nAccept: a\r\naccept: b\r\nACCEPT: c\r\nCookie: x=1\r\nCookie: y=2\r\n\r\n"},
		{name: "non-canonical names", raw: "GET / HTTP/1.1\r\nhost: x\r\nx-custom-thing: 1\r\ncontent-TYPE: t\r\nX-CAPS: 2\r\nx_under: 3\r\n\r\n"},
		{name: "empty values", raw: "GET / HTTP/1.1\r\nHost: x\r\nX-E:\r\nX-F: \t \r\n\r\n"},
		{name: "obs-fold", raw: "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\tc\r\nX-B: d\r\n\r\n"},
		{name: "obs-fold empty continuation", raw: "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n \r\n\r\n"},
		{name: "obs-fold first line", raw: "GET / HTTP/1.1\r\n X-A: a\r\nHost: x\r\n\r\n"},
		{name: "obs-fold onto host", raw: "GET / HTTP/1.1\r\nHost: x\r\n y\r\n\r\n"},
		{name: "bare lf", raw: "GET /lf HTTP/1.1\nHost: x\nX-A: 1\n\n"},
		{name: "mixed line ends", raw: "GET /mixed HTTP/1.1\r\nHost: x\nX-A: 1\r\n\n"},
		{name: "bare cr", raw: "GET / HTTP/1.1\rHost: x\r\n\r\n"},
		{name: "absolute form", raw: "GET http://a.example/x?y HTTP/1.1\r\nHost: b.example\r\n\r\n"},
		{name: "absolute form https userinfo port", raw: "GET https://u:p@a.example:8443/x;p?q=1 HTTP/1.1\r\nHost: b\r\n\r\n"},
		{name: "absolute form ipv6", raw: "GET http://[::1]:8080/p HTTP/1.1\r\nHost: x\r\n\r\n"},
		{name: "absolute form escapes", raw: "GET http://a.example/%7Ex/a%2Fb?%41 HTTP/1.1\r\nHost: x\r\n\r\n"},
		{name: "absolute form no host field", raw: "GET http://a.example/x HTTP/1.1\r\n\r\n"},
		{name: "absolute form bad port", raw: "GET http://a.example:x/ HTTP/1.1\r\nHost: x\r\n\r\n"},
		{name: "escaped path", raw: "GET /a%20b/%2F/c?x=%20 HTTP/1.1\r\nHost: x\r\n\r\n"},
		{name: "bad escape", raw: "GET /%zz HTTP/1.1\r\nHost: x\r\n\r\n"},
		{name: "fragment", raw: "GET /a#b HTTP/1.1\r\nHost: x\r\n\r\n"},
		{name: "asterisk get", raw: "GET * HTTP/1.1\r\nHost: x\r\n\r\n"},
		{name: "bad host space", raw: "GET / HTTP/1.1\r\nHost: a b\r\n\r\n"},
		{name: "bad host slash", raw: "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n"},
		{name: "bad host two", raw: "GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n"},
		{name: "bad host userinfo", raw: "GET / HTTP/1.1\r\nHost: u@a\r\n\r\n"},
		{name: "empty host", raw: "GET / HTTP/1.1\r\nHost:\r\n\r\n"},
		{name: "no host http/1.1", raw: "GET / HTTP/1.1\r\nX: y\r\n\r\n"},
		{name: "host ipv6 port", raw: "GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n"},
		{name: "http/1.0 no host", raw: "GET /ten HTTP/1.0\r\n\r\n"},
		{name: "http/1.0 keep-alive", raw: "GET /ten HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n\r\n"},
		{name: "http/1.0 close", raw: "GET /ten HTTP/1.0\r\nConnection: close\r\n\r\n"},
		{name: "http/1.0 te without body", raw: "POST /ten HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"},
		{name: "http/1.2", raw: "GET / HTTP/1.2\r\nHost: x\r\n\r\n"},
		{name: "http/2.0", raw: "GET / HTTP/2.0\r\nHost: x\r\n\r\n"},
		{name: "http/0.9", raw: "GET /\r\n\r\n"},
		{name: "connection close", raw: "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"},
		{name: "connection close in list", raw: "GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Close\r\n\r\n"},
		{name: "pragma no-cache", raw: "GET / HTTP/1.1\r\nHost: x\r\nPragma: no-cache\r\n\r\n"},
		{name: "pragma no-cache with cache-control", raw: "GET / HTTP/1.1\r\nHost: x\r\nPragma: no-cache\r\nCache-Control: max-age=0\r\n\r\n"},
		{name: "trailer without chunked", raw: "GET / HTTP/1.1\r\nHost: x\r\nTrailer: X-T\r\n\r\n"},
		{name: "lowercase method", raw: "get / HTTP/1.1\r\nHost: x\r\n\r\n"},
		{name: "odd method", raw: "PURGE-ALL /x HTTP/1.1\r\nHost: x\r\n\r\n"},
		{name: "delete", raw: "DELETE /x HTTP/1.1\r\nHost: x\r\n\r\n"},
		{name: "head", raw: "HEAD /x HTTP/1.1\r\nHost: x\r\n\r\n"},
		{name: "connect authority", raw: "CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n"},
		{name: "connect without host", raw: "CONNECT a.example:443 HTTP/1.1\r\n\r\n"},
		{name: "space before colon", raw: "GET / HTTP/1.1\r\nHost: x\r\nX-A : 1\r\n\r\n"},
		{name: "space in name", raw: "GET / HTTP/1.1\r\nHost: x\r\nX A: 1\r\n\r\n"},
		{name: "no colon", raw: "GET / HTTP/1.1\r\nHost: x\r\nX-A\r\n\r\n"},
		{name: "value ctl", raw: "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\x01b\r\n\r\n"},
		{name: "value 8bit", raw: "GET / HTTP/1.1\r\nHost: x\r\nX-A: caf\xc3\xa9\r\n\r\n"},
		{name: "double space in request line", raw: "GET  / HTTP/1.1\r\nHost: x\r\n\r\n"},
		{name: "leading crlf", raw: "\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n"},

		// Bodies, Expect, OPTIONS *, the HTTP/2 preface: not offered.
		{name: "content-length body", raw: "POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"},
		{name: "content-length without its body", raw: "POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n"},
		{name: "content-length 0", raw: "POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"},
		{name: "content-length 000", raw: "POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 000\r\n\r\n"},
		{name: "content-length 0 twice", raw: "POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n"},
		{name: "content-length 0 list", raw: "POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 0, 0\r\n\r\n"},
		{name: "content-length on get", raw: "GET /p HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nab"},
		{name: "content-length bad", raw: "POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: x\r\n\r\n"},
		{name: "chunked", raw: "POST /p HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"},
		{name: "chunked head only", raw: "POST /p HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"},
		{name: "chunked with content-length 0", raw: "POST /p HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n0\r\n\r\n"},
		{name: "te gzip", raw: "POST /p HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n"},
		{name: "expect 100-continue no body", raw: "POST /p HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\r\n"},
		{name: "expect 100-continue content-length 0", raw: "POST /p HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\n"},
		{name: "expect 100-continue with body", raw: "POST /p HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc"},
		{name: "expect other", raw: "GET /p HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\n\r\n"},
		{name: "expect empty", raw: "GET /p HTTP/1.1\r\nHost: x\r\nExpect:\r\n\r\n"},
		{name: "options star", raw: "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n"},
		{name: "options star http/1.0", raw: "OPTIONS * HTTP/1.0\r\n\r\n"},
		{name: "options path", raw: "OPTIONS /x HTTP/1.1\r\nHost: x\r\n\r\n"},
		{name: "options star lowercase", raw: "options * HTTP/1.1\r\nHost: x\r\n\r\n"},
		{name: "h2 preface head", raw: "PRI * HTTP/2.0\r\n\r\n"},
		{name: "h2 preface whole", raw: "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"},
		{name: "pri with host", raw: "PRI * HTTP/2.0\r\nHost: x\r\n\r\n"},

		// More than one head, or less.
		{name: "pipelined second head", raw: "GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\n\r\n"},
		{name: "pipelined same head", raw: "GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /1 HTTP/1.1\r\nHost: x\r\n\r\n"},
		{name: "head then partial", raw: "GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGE"},
		{name: "head then crlf", raw: "GET /1 HTTP/1.1\r\nHost: x\r\n\r\n\r\n"},
		{name: "head then garbage", raw: "GET /1 HTTP/1.1\r\nHost: x\r\n\r\nxyz\r\n\r\n"},
		{name: "incomplete head", raw: "GET / HTTP/1.1\r\nHost: x\r\n"},
		{name: "incomplete field", raw: "GET / HTTP/1.1\r\nHost: x"},
		{name: "request line only", raw: "GET / HTTP/1.1\r\n"},
		{name: "truncated request line", raw: "GET / HT"},
		{name: "empty", raw: ""},
		{name: "crlf only", raw: "\r\n\r\n"},

		// Sizes: the read buffer's, and the server's limit.
		{name: "head of 4095", raw: hpHeadOfLen(4095)},
		{name: "head of 4096", raw: hpHeadOfLen(4096)},
		{name: "head of 4097", raw: hpHeadOfLen(4097)},
		{name: "head of 8193", raw: hpHeadOfLen(8193)},
		{name: "head at limit-1", raw: hpHeadOfLen(limit - 1)},
		{name: "head at limit", raw: hpHeadOfLen(limit)},
		{name: "head at limit+1", raw: hpHeadOfLen(limit + 1)},
		{name: "head at limit then more", raw: hpHeadOfLen(limit) + "GET / HTTP/1.1\r\nHost: x\r\n\r\n"},
		{name: "head far over limit", raw: hpHeadOfLen(limit + limit/2)},
		{name: "request line over limit", raw: "GET /" + strings.Repeat("a", limit) + " HTTP/1.1\r\nHost: x\r\n\r\n"},
		{name: "one field over limit", raw: "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("b", limit) + "\r\n\r\n"},
	}
	return cases
}

// hpSend sends in to the server at addr on a new connection, half-closes
// it, reads until the server closes it, and returns the client's address
// (the RemoteAddr of its requests) and what the server did with them.
func hpSend(t *testing.T, addr string, w *hpWatcher, in []byte) (string, []hpEvent) {
	t.Helper()
	c := dial(t, addr)
	remote := c.LocalAddr().String()
	if _, err := c.Write(in); err != nil {
		t.Logf("write: %v", err) // the server may close before reading everything (431, 400)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	if _, err := io.ReadAll(c); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("the server did not close the connection: %v", err)
		}
	}
	_ = c.Close()
	return remote, w.take(remote)
}

// TestHeadParserMatchesServer holds HeadParser.Parse to the server: for
// the server's differential corpus and hpCases, each sent on its own
// loopback connection to a Server whose Exchanges hook records Head and
// declines, Parse on the same bytes must return the request the server
// offered (RemoteAddr the client's address), or false when the server
// offered nothing, or not that head as all of the input. It runs with
// the default head limit and a small one, with a new parser for each
// input and with one parser taking every input in turn, each twice (the
// second time repeats the previous head byte for byte).
func TestHeadParserMatchesServer(t *testing.T) {
	for _, maxHeaderBytes := range []int{0, 1024} {
		t.Run(fmt.Sprintf("MaxHeaderBytes=%d", maxHeaderBytes), func(t *testing.T) {
			w := &hpWatcher{}
			srv := &Server{Handler: w, Exchanges: w, MaxHeaderBytes: maxHeaderBytes, ReadHeaderTimeout: 10 * time.Second, Logger: discardSlog}
			addr := serve(t, srv)
			cases := append(append(append([]corpusCase{}, hostileCorpus...), bufferEdgeCorpus...), hpCases(maxHeaderBytes)...)
			shared := NewHeadParser("shared", maxHeaderBytes)
			defer shared.Release()
			offered, refused := 0, 0
			for k, tc := range cases {
				in := []byte(tc.raw)
				remote, events := hpSend(t, addr, w, in)
				want, wantOK := hpWant(events, in)
				if wantOK {
					offered++
				} else {
					refused++
				}
				name := tc.name
				if len(tc.raw) <= 300 {
					name = fmt.Sprintf("%s %q", tc.name, tc.raw)
				}
				p := NewHeadParser(remote, maxHeaderBytes)
				if d := hpDiff(p, in, want, wantOK, remote); d != "" {
					t.Errorf("%s: new parser: %s\nserver: %v", name, d, events)
				}
				p.Release()
				if k%2 == 1 {
					// A POST before: the next head must not be read as
					// the server reads one after a POST (skipping CR
					// and LF bytes before it).
					if _, ok := shared.Parse([]byte(hpWarmHead)); !ok {
						t.Fatal("a POST head without a body does not parse")
					}
				}
				for i := range 2 {
					if d := hpDiff(shared, in, want, wantOK, "shared"); d != "" {
						t.Errorf("%s: shared parser, parse %d: %s\nserver: %v", name, i+1, d, events)
					}
				}
			}
			t.Logf("%d inputs offered as one head, %d not", offered, refused)
			// The cases must check both answers.
			if offered < 60 || refused < 100 {
				t.Errorf("the server offered %d inputs as one head and not %d: the cases do not check both", offered, refused)
			}
		})
	}
}

// hpStep is one request of a keep-alive sequence: its head, and the bytes
// that follow it (a body).
type hpStep struct {
	name, method, head, body string
}

// TestHeadParserSequence sends a sequence of requests on one keep-alive
// loopback connection and parses their heads in the same order with one
// parser, which reuses the previous head's strings and lines: a head
// repeating the previous one byte for byte, heads differing from it by
// one field's value, by an added or removed field or by the request
// line, and heads the server does not offer in between, must each parse
// to what the server offered. A parse of a head followed by more bytes
// (false) must not spoil the next.
func TestHeadParserSequence(t *testing.T) {
	const a = "GET /a?x=1 HTTP/1.1\r\nHost: example.com\r\nUser-Agent: test/1.0\r\nAccept: */*\r\nAccept-Encoding: gzip\r\nCookie: s=1\r\n\r\n"
	a1 := strings.Replace(a, "Accept: */*", "Accept: text/html", 1)
	a2 := strings.Replace(a, "Cookie: s=1\r\n", "Cookie: s=1\r\nX-Added: yes\r\n", 1)
	a3 := strings.Replace(a, "User-Agent: test/1.0\r\n", "", 1)
	a4 := strings.Replace(a, "Cookie: s=1", "Cookie: s=2", 1)
	b := strings.Replace(a, "GET /a?x=1 ", "GET /b?y=2 ", 1)
	host := strings.Replace(a, "Host: example.com", "Host: other.example", 1)
	lower := "GET /a?x=1 HTTP/1.1\r\nhost: example.com\r\nuser-agent: test/1.0\r\naccept: */*\r\naccept-encoding: gzip\r\ncookie: s=1\r\n\r\n"
	steps := []hpStep{
		{"first", "GET", a, ""},
		{"repeat", "GET", a, ""},
		{"repeat again", "GET", a, ""},
		{"one value differs", "GET", a1, ""},
		{"repeat of that", "GET", a1, ""},
		{"back", "GET", a, ""},
		{"field added", "GET", a2, ""},
		{"field removed", "GET", a3, ""},
		{"last field differs", "GET", a4, ""},
		{"host differs", "GET", host, ""},
		{"request line differs", "GET", b, ""},
		{"lowercase names", "GET", lower, ""},
		{"back again", "GET", a, ""},
		{"options star", "OPTIONS", "OPTIONS * HTTP/1.1\r\nHost: example.com\r\n\r\n", ""},
		{"after options", "GET", a, ""},
		{"post with body", "POST", "POST /a?x=1 HTTP/1.1\r\nHost: example.com\r\nContent-Length: 3\r\n\r\n", "abc"},
		{"after post", "GET", a, ""},
		{"expect", "GET", "GET /a?x=1 HTTP/1.1\r\nHost: example.com\r\nExpect: 100-continue\r\n\r\n", ""},
		{"post without body", "POST", "POST /a?x=1 HTTP/1.1\r\nHost: example.com\r\nContent-Length: 0\r\n\r\n", ""},
		{"head method", "HEAD", "HEAD /a?x=1 HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n\r\n", ""},
		{"absolute form", "GET", "GET http://example.com/abs?z HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n\r\n", ""},
		{"obs-fold", "GET", "GET /a?x=1 HTTP/1.1\r\nHost: example.com\r\nX-F: one\r\n two\r\nAccept: */*\r\n\r\n", ""},
		{"obs-fold repeated", "GET", "GET /a?x=1 HTTP/1.1\r\nHost: example.com\r\nX-F: one\r\n two\r\nAccept: */*\r\n\r\n", ""},
		{"obs-fold differs", "GET", "GET /a?x=1 HTTP/1.1\r\nHost: example.com\r\nX-F: one\r\n three\r\nAccept: */*\r\n\r\n", ""},
		{"pragma", "GET", "GET /a?x=1 HTTP/1.1\r\nHost: example.com\r\nPragma: no-cache\r\n\r\n", ""},
		{"pragma repeated", "GET", "GET /a?x=1 HTTP/1.1\r\nHost: example.com\r\nPragma: no-cache\r\n\r\n", ""},
		{"http/1.0 keep-alive", "GET", "GET /a HTTP/1.0\r\nConnection: keep-alive\r\nAccept: */*\r\n\r\n", ""},
		{"big", "GET", hpHeadOfLen(9000), ""},
		{"big repeated", "GET", hpHeadOfLen(9000), ""},
		{"small after big", "GET", a, ""},
		{"last, closing", "GET", strings.Replace(a, "Cookie: s=1\r\n", "Cookie: s=1\r\nConnection: close\r\n", 1), ""},
	}
	w := &hpWatcher{}
	srv := &Server{Handler: w, Exchanges: w, ReadHeaderTimeout: 10 * time.Second, Logger: discardSlog}
	addr := serve(t, srv)
	c := dial(t, addr)
	remote := c.LocalAddr().String()
	br := bufio.NewReader(c)
	p := NewHeadParser(remote, 0)
	defer p.Release()
	for i, st := range steps {
		if _, err := io.WriteString(c, st.head+st.body); err != nil {
			t.Fatal(err)
		}
		resp, _ := readResponse(t, br, st.method)
		events := w.take(remote)
		in := []byte(st.head)
		want, wantOK := hpWant(events, in)
		if d := hpDiff(p, in, want, wantOK, remote); d != "" {
			t.Errorf("step %d (%s): %s\nserver: %v", i, st.name, d, events)
		}
		fresh := NewHeadParser(remote, 0)
		if d := hpDiff(fresh, in, want, wantOK, remote); d != "" {
			t.Errorf("step %d (%s), new parser: %s\nserver: %v", i, st.name, d, events)
		}
		fresh.Release()
		// A parse that fails because more bytes follow, then the same
		// head alone again: the parser remembered the head of the
		// failed parse.
		if i%3 == 1 {
			if r, ok := p.Parse([]byte(st.head + "GET / HTTP/1.1\r\n")); ok {
				t.Errorf("step %d (%s): Parse of a head followed by more bytes returned %s", i, st.name, hpHeadOf(r).desc)
			}
			if d := hpDiff(p, in, want, wantOK, remote); d != "" {
				t.Errorf("step %d (%s), after a parse with bytes after the head: %s\nserver: %v", i, st.name, d, events)
			}
		}
		if st.method == "POST" {
			// After a POST the server skips CR and LF bytes before the
			// next request; Parse takes a head from its request line,
			// whatever came before, and the server refuses such bytes
			// before a connection's first request.
			if r, ok := p.Parse([]byte("\r\n" + a)); ok {
				t.Errorf("step %d (%s): after a POST, a head after CRLF parses to %s", i, st.name, hpHeadOf(r).desc)
			}
		}
		if resp.Close != (i == len(steps)-1) {
			t.Fatalf("step %d (%s): response Close = %v", i, st.name, resp.Close)
		}
	}
}

// hpFuzzMaxHeaderBytes is the head limit of the fuzz target's server, small
// enough for inputs to reach it.
const hpFuzzMaxHeaderBytes = 1024

// hpWarmHead is the head a parser takes before the fuzz input, so that the
// input is parsed with the previous head's lines to reuse. It is a POST,
// after which a server skips CR and LF bytes before the next request: a
// parser must not.
const hpWarmHead = "POST / HTTP/1.1\r\n" + h + "Accept: */*\r\nX-A: a\r\n b\r\nContent-Length: 0\r\n\r\n"

// hpServeMem serves in, delivered chunk bytes at a time (0: whole), on an
// in-memory connection, and returns what the server did.
func hpServeMem(srv *Server, w *hpWatcher, in []byte, chunk int) []hpEvent {
	c := newMemConn(in, chunk)
	done := make(chan error, 1)
	go func() { done <- srv.ServeConn(c) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		buf := make([]byte, 1<<20)
		panic("the server did not finish a connection:\n" + string(buf[:runtime.Stack(buf, true)]))
	}
	return w.take(memAddr.String())
}

// FuzzHeadParserMatchesServer holds HeadParser.Parse to the server on
// arbitrary bytes, as TestHeadParserMatchesServer does, the server
// serving them as FuzzServer's harness does (an in-memory connection,
// the bytes in pieces of any size): a new parser, a parser that parsed
// another head before, and that parser once more on the same bytes must
// each return the request the server offered, or false.
// ci:fuzztime 100000x: it reads what a client sends.
func FuzzHeadParserMatchesServer(f *testing.F) {
	seeds := append(append(append([]corpusCase{}, hostileCorpus...), bufferEdgeCorpus...), hpCases(hpFuzzMaxHeaderBytes)...)
	for _, tc := range seeds {
		f.Add([]byte(tc.raw), uint8(0))
		f.Add([]byte(tc.raw), uint8(3))
	}
	w := &hpWatcher{}
	srv := &Server{Handler: w, Exchanges: w, MaxHeaderBytes: hpFuzzMaxHeaderBytes, Logger: discardSlog}
	remote := memAddr.String()
	f.Fuzz(func(t *testing.T, in []byte, chunk uint8) {
		events := hpServeMem(srv, w, in, int(chunk))
		want, wantOK := hpWant(events, in)
		p := NewHeadParser(remote, hpFuzzMaxHeaderBytes)
		defer p.Release()
		if d := hpDiff(p, in, want, wantOK, remote); d != "" {
			t.Fatalf("input %q (chunk %d), new parser: %s\nserver: %v", in, chunk, d, events)
		}
		warm := NewHeadParser(remote, hpFuzzMaxHeaderBytes)
		defer warm.Release()
		if _, ok := warm.Parse([]byte(hpWarmHead)); !ok {
			t.Fatal("the warm-up head does not parse")
		}
		for i := range 2 {
			if d := hpDiff(warm, in, want, wantOK, remote); d != "" {
				t.Fatalf("input %q (chunk %d), parser after another head, parse %d: %s\nserver: %v", in, chunk, i+1, d, events)
			}
		}
	})
}

// hpAccept accepts one connection from ln, within 5 s.
func hpAccept(t *testing.T, ln net.Listener) net.Conn {
	t.Helper()
	ch := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(ch)
			return
		}
		ch <- c
	}()
	select {
	case c, ok := <-ch:
		if !ok {
			t.Fatal("accept failed")
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("accept timed out")
	}
	return nil
}

// hpFirst is a first handler for ServeConnWith that records the requests
// it gets, reads their bodies and answers "first:" and the body.
type hpFirst struct {
	mu   sync.Mutex
	seen []string
}

func (f *hpFirst) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	f.mu.Lock()
	f.seen = append(f.seen, fmt.Sprintf("%s %s remote=%s body=%q err=%v ctxErr=%v", r.Method, r.RequestURI, r.RemoteAddr, b, err, r.Context().Err()))
	f.mu.Unlock()
	_, _ = io.WriteString(w, "first:"+string(b))
}

func (f *hpFirst) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.seen
	f.seen = nil
	return s
}

// hpServeConnWith serves the server end of a new loopback connection from
// ln with ServeConnWith(first) (ServeConn when useServeConn), sends in
// from the client, reads one response per method in methods, half-closes
// and waits for the server to close. It returns the response bodies, the
// client's address, and ServeConnWith's error.
func hpServeConnWith(t *testing.T, ln net.Listener, srv *Server, first http.Handler, useServeConn bool, in string, methods []string) ([]string, string, error) {
	t.Helper()
	c := dial(t, ln.Addr().String())
	sc := hpAccept(t, ln)
	done := make(chan error, 1)
	go func() {
		if useServeConn {
			done <- srv.ServeConn(sc)
		} else {
			done <- srv.ServeConnWith(sc, first)
		}
	}()
	if _, err := io.WriteString(c, in); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var bodies []string
	for _, m := range methods {
		_, body := readResponse(t, br, m)
		bodies = append(bodies, body)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	if rest, _ := waitClosed(t, c, 5*time.Second); rest != "" {
		t.Errorf("after the responses the server sent %q", rest)
	}
	select {
	case err := <-done:
		return bodies, c.LocalAddr().String(), err
	case <-time.After(5 * time.Second):
		t.Fatal("ServeConnWith did not return once the connection ended")
	}
	return nil, "", nil
}

// TestServeConnWith checks that ServeConnWith gives the first request read
// from the connection to first, neither offered to Exchanges nor given to
// Handler, whether or not it is one Exchanges would be offered, and
// serves the next as ServeConn would; and that ServeConnWith(c, nil) does
// what ServeConn does.
func TestServeConnWith(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	w := &hpWatcher{}
	srv := &Server{Handler: w, Exchanges: w, ReadHeaderTimeout: 10 * time.Second, Logger: discardSlog}
	t.Cleanup(func() { _ = srv.Close() })
	first := &hpFirst{}
	const second = "GET /2 HTTP/1.1\r\nHost: x\r\n\r\n"
	for _, tc := range []struct {
		name, in string
		methods  []string
		wantBody string
	}{
		{"offerable first", "GET /1 HTTP/1.1\r\nHost: x\r\n\r\n" + second, []string{"GET", "GET"}, ""},
		{"first with a body", "POST /1 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc" + second, []string{"POST", "GET"}, "abc"},
		{"chunked first", "POST /1 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n" + second, []string{"POST", "GET"}, "abc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bodies, remote, err := hpServeConnWith(t, ln, srv, first, false, tc.in, tc.methods)
			if err != nil {
				t.Errorf("ServeConnWith returned %v", err)
			}
			if want := []string{"first:" + tc.wantBody, "ok"}; fmt.Sprint(bodies) != fmt.Sprint(want) {
				t.Errorf("responses %q, want %q", bodies, want)
			}
			seen := first.take()
			wantFirst := fmt.Sprintf("%s /1 remote=%s body=%q err=<nil> ctxErr=<nil>", tc.methods[0], remote, tc.wantBody)
			if len(seen) != 1 || seen[0] != wantFirst {
				t.Errorf("first got %q, want [%q]", seen, wantFirst)
			}
			events := w.take(remote)
			if len(events) != 2 || events[0].kind != "offer" || events[1].kind != "handle" || !events[1].offered ||
				!strings.Contains(events[0].head.desc, "RequestURI:/2 ") || !strings.Contains(events[1].head.desc, "RequestURI:/2 ") {
				t.Errorf("Exchanges and Handler saw %v, want the second request offered and then handled", events)
			}
		})
	}

	// ServeConnWith(c, nil) is ServeConn: the same requests reach the
	// same hooks, the same responses come back.
	in := "GET /1 HTTP/1.1\r\nHost: x\r\n\r\nPOST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi" + second
	methods := []string{"GET", "POST", "GET"}
	var outs [2]string
	for i, useServeConn := range []bool{true, false} {
		bodies, remote, err := hpServeConnWith(t, ln, srv, nil, useServeConn, in, methods)
		if err != nil {
			t.Errorf("ServeConn (%v) returned %v", useServeConn, err)
		}
		events := w.take(remote)
		var b strings.Builder
		fmt.Fprintf(&b, "responses %q\n", bodies)
		for _, e := range events {
			e.head.remote = ""
			fmt.Fprintf(&b, "%v\n", e)
		}
		outs[i] = b.String()
		if len(events) != 5 {
			t.Errorf("ServeConn (%v): %d events, want 5 (two offered and handled, one handled):\n%s", useServeConn, len(events), outs[i])
		}
	}
	if outs[0] != outs[1] {
		t.Errorf("ServeConn:\n%s\nServeConnWith(c, nil):\n%s", outs[0], outs[1])
	}
	if s := first.take(); len(s) != 0 {
		t.Errorf("first was called without being given: %q", s)
	}
}

// TestServeConnWithAfterShutdown checks that once the server is shut
// down, ServeConnWith returns ErrServerClosed at once and closes the
// connection without reading from it or calling first, as ServeConn
// does.
func TestServeConnWithAfterShutdown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	w := &hpWatcher{}
	srv := &Server{Handler: w, Exchanges: w, Logger: discardSlog}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	first := &hpFirst{}
	for _, withFirst := range []bool{true, false} {
		c := dial(t, ln.Addr().String())
		sc := hpAccept(t, ln)
		if _, err := io.WriteString(c, get); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			if withFirst {
				done <- srv.ServeConnWith(sc, first)
			} else {
				done <- srv.ServeConnWith(sc, nil)
			}
		}()
		select {
		case err := <-done:
			if err != ErrServerClosed {
				t.Errorf("first %v: ServeConnWith returned %v, want ErrServerClosed", withFirst, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("first %v: ServeConnWith did not return", withFirst)
		}
		// The connection is closed (with the request unread, perhaps
		// reset): the client reads nothing and then the end.
		if got, _ := waitClosed(t, c, 5*time.Second); got != "" {
			t.Errorf("first %v: the client read %q", withFirst, got)
		}
	}
	if s := first.take(); len(s) != 0 {
		t.Errorf("first was called: %q", s)
	}
	w.mu.Lock()
	n := len(w.events)
	w.mu.Unlock()
	if n != 0 {
		t.Errorf("Exchanges or Handler saw requests: %v", w.events)
	}
}

// TestReadLimits checks the defaults ReadLimits applies: MaxHeaderBytes
// zero or negative is http.DefaultMaxHeaderBytes, and the head limit is
// 4096 more; ReadHeaderTimeout and IdleTimeout zero fall back to
// ReadTimeout.
func TestReadLimits(t *testing.T) {
	const def = http.DefaultMaxHeaderBytes + 4096
	for _, tc := range []struct {
		name         string
		srv          *Server
		head         int
		headTO, idle time.Duration
	}{
		{"zero", &Server{}, def, 0, 0},
		{"max header bytes", &Server{MaxHeaderBytes: 100}, 100 + 4096, 0, 0},
		{"negative max header bytes", &Server{MaxHeaderBytes: -1}, def, 0, 0},
		{"read timeout only", &Server{ReadTimeout: 3 * time.Second}, def, 3 * time.Second, 3 * time.Second},
		{"read header timeout", &Server{ReadHeaderTimeout: time.Second, ReadTimeout: 3 * time.Second}, def, time.Second, 3 * time.Second},
		{"idle timeout", &Server{IdleTimeout: 2 * time.Second, ReadTimeout: 3 * time.Second}, def, 3 * time.Second, 2 * time.Second},
		{"all", &Server{MaxHeaderBytes: 1 << 10, ReadHeaderTimeout: time.Second, ReadTimeout: 3 * time.Second, IdleTimeout: 2 * time.Second}, 1<<10 + 4096, time.Second, 2 * time.Second},
		{"header and idle without read", &Server{ReadHeaderTimeout: time.Second, IdleTimeout: 2 * time.Second}, def, time.Second, 2 * time.Second},
		{"write timeout does not count", &Server{WriteTimeout: 5 * time.Second}, def, 0, 0},
	} {
		head, headTO, idle := tc.srv.ReadLimits()
		if head != tc.head || headTO != tc.headTO || idle != tc.idle {
			t.Errorf("%s: ReadLimits() = %d, %v, %v; want %d, %v, %v", tc.name, head, headTO, idle, tc.head, tc.headTO, tc.idle)
		}
	}
}

// TestHeadParserLimitIsReadLimits checks that a parser made with the
// MaxHeaderBytes a Server has takes heads up to the Server's ReadLimits
// head limit and no longer, for a server's own setting and the defaults.
func TestHeadParserLimitIsReadLimits(t *testing.T) {
	for _, mhb := range []int{-1, 0, 1, 1000, 8 << 10} {
		limit, _, _ := (&Server{MaxHeaderBytes: mhb}).ReadLimits()
		p := NewHeadParser("a", mhb)
		for _, n := range []int{limit - 1, limit} {
			if _, ok := p.Parse([]byte(hpHeadOfLen(n))); !ok {
				t.Errorf("MaxHeaderBytes %d: a head of %d bytes (limit %d) is refused", mhb, n, limit)
			}
		}
		if _, ok := p.Parse([]byte(hpHeadOfLen(limit + 1))); ok {
			t.Errorf("MaxHeaderBytes %d: a head of %d bytes (limit %d) is taken", mhb, limit+1, limit)
		}
		// Still usable after a refusal, and after Release a new one is.
		if _, ok := p.Parse([]byte(get)); !ok {
			t.Errorf("MaxHeaderBytes %d: a plain head is refused after a long one", mhb)
		}
		p.Release()
	}
}

// TestHeadParserKeepsNothingOfItsInput checks that the request Parse
// returns holds copies: writing over the head's bytes after Parse, or
// releasing the parser, changes nothing of it.
func TestHeadParserKeepsNothingOfItsInput(t *testing.T) {
	for _, raw := range []string{
		"GET /a?b=c HTTP/1.1\r\nHost: example.com\r\nx-custom: v\r\nAccept: */*\r\n\r\n",
		"GET http://u@a.example:81/p%20q?r HTTP/1.1\r\nHost: x\r\nX-F: a\r\n b\r\n\r\n",
		hpHeadOfLen(6000),
	} {
		p := NewHeadParser("1.2.3.4:5", 0)
		in := []byte(raw)
		r, ok := p.Parse(in)
		if !ok {
			t.Fatalf("%q does not parse", raw)
		}
		before := hpHeadOf(r)
		for i := range in {
			in[i] = 'X'
		}
		if after := hpHeadOf(r); after != before {
			t.Errorf("writing over the input changed the request:\n before %s\n after  %s", before.desc, after.desc)
		}
		p.Release()
		if after := hpHeadOf(r); after != before {
			t.Errorf("Release changed the request:\n before %s\n after  %s", before.desc, after.desc)
		}
	}
}
