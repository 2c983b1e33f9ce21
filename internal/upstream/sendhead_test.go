package upstream

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/httpfield"
)

// sender is one way of sending a request through a Transport. The tests
// that run over every sender hold them to the same behaviour.
type sender struct {
	name string
	send func(ctx context.Context, tr *Transport, req *http.Request, opts SendOptions) (*http.Response, error)
}

var senders = []sender{
	{"RoundTrip", func(ctx context.Context, tr *Transport, req *http.Request, opts SendOptions) (*http.Response, error) {
		if opts.Got1xx != nil || opts.Fields != nil || !opts.Now.IsZero() || opts.HeaderValid {
			return nil, errors.New("test: RoundTrip takes no option but HeadTimeout")
		}
		return tr.WithHeadTimeout(opts.HeadTimeout).RoundTrip(req.WithContext(ctx))
	}},
	{"Send", func(ctx context.Context, tr *Transport, req *http.Request, opts SendOptions) (*http.Response, error) {
		return tr.Send(ctx, req, opts)
	}},
	{"SendHead", sendAsHead},
}

// headFor returns the Head of req as a byte-level proxy would give it to
// SendHead: the head Send writes for req, and its address, method and
// close. An invalid request fails as Send fails it.
func headFor(req *http.Request) (Head, error) {
	method, target, host, err := requestTarget(req)
	if err != nil {
		return Head{}, err
	}
	if err := validateHeader(req.Header); err != nil {
		return Head{}, err
	}
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	writeRequest(w, req, method, target, host)
	w.Flush()
	return Head{Addr: hostPort(req.URL.Host), Method: method, Bytes: buf.Bytes(), Close: wantsClose(req)}, nil
}

// sendAsHead sends req with SendHead, written out by headFor, and checks
// that SendHead left the head's bytes as they were.
func sendAsHead(ctx context.Context, tr *Transport, req *http.Request, opts SendOptions) (*http.Response, error) {
	h, err := headFor(req)
	if err != nil {
		return nil, err
	}
	kept := bytes.Clone(h.Bytes)
	resp, err := tr.SendHead(ctx, h, opts)
	if !bytes.Equal(h.Bytes, kept) {
		if resp != nil {
			resp.Body.Close()
		}
		return nil, fmt.Errorf("test: SendHead changed the head to %q (and returned %v)", h.Bytes, err)
	}
	return resp, err
}

// sendVia sends method url with header through s, with a time limit as
// doReq has.
func sendVia(t *testing.T, via sender, tr *Transport, method, url string, header http.Header, opts SendOptions) (*http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return sendViaCtx(t, ctx, via, tr, method, url, header, opts)
}

func sendViaCtx(t *testing.T, ctx context.Context, via sender, tr *Transport, method, url string, header http.Header, opts SendOptions) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	return via.send(ctx, tr, req, opts)
}

// recordingUpstream is a loopback upstream that records every request head
// it receives, byte for byte, with the connection it came on, and answers
// by the request's path (see answerFor).
type recordingUpstream struct {
	*rawServer
	mu    sync.Mutex
	heads []recordedHead
	next  int // the number of the next connection accepted
}

type recordedHead struct {
	conn int
	raw  []byte
}

func newRecordingUpstream(t *testing.T) *recordingUpstream {
	u := &recordingUpstream{}
	u.rawServer = newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		u.mu.Lock()
		id := u.next
		u.next++
		u.mu.Unlock()
		for {
			var raw []byte
			for {
				line, err := br.ReadBytes('\n')
				raw = append(raw, line...)
				if err != nil {
					return
				}
				if string(line) == "\r\n" {
					break
				}
			}
			u.mu.Lock()
			u.heads = append(u.heads, recordedHead{conn: id, raw: raw})
			u.mu.Unlock()
			req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
			if err != nil {
				return
			}
			answer, closes := answerFor(req)
			if _, err := io.WriteString(c, answer); err != nil || closes {
				return
			}
		}
	})
	return u
}

// take returns the heads recorded so far, with connections numbered from
// 0 in the order they first appear, and forgets them.
func (u *recordingUpstream) take() []recordedHead {
	u.mu.Lock()
	defer u.mu.Unlock()
	heads := u.heads
	u.heads = nil
	seen := map[int]int{}
	for i, h := range heads {
		n, ok := seen[h.conn]
		if !ok {
			n = len(seen)
			seen[h.conn] = n
		}
		heads[i].conn = n
	}
	return heads
}

// answerFor returns the response to req, chosen by its path, and whether
// the upstream closes the connection after it. It closes only where the
// client does not keep the connection, so that no exchange races a close.
func answerFor(req *http.Request) (string, bool) {
	head := req.Method == http.MethodHead
	body := func(b string) string {
		if head {
			return ""
		}
		return b
	}
	switch req.URL.Path {
	case "/chunked":
		return "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body("3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n"), false
	case "/204":
		return "HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n", false
	case "/304":
		return "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\nEtag: \"e\"\r\n\r\n", false
	case "/close":
		return "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 5\r\n\r\n" + body("hello"), true
	case "/eof": // a body that ends with the connection; none after HEAD, and the connection is kept
		return "HTTP/1.1 200 OK\r\nX-A: 1\r\n\r\n" + body("until the end"), !head
	case "/http10":
		return "HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\n" + body("hello"), false
	case "/hints":
		return "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n" + body("hello"), false
	case "/many":
		return "HTTP/1.1 404 Not Found\r\nX-A: 1\r\nX-A: 2\r\nSet-Cookie: a=1\r\nx-lower: v\r\nContent-Type: text/plain\r\nContent-Length: 9\r\n\r\n" + body("not found"), false
	}
	return "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\n" + body("hello"), false
}

var answerPaths = []string{"/", "/chunked", "/204", "/304", "/close", "/eof", "/http10", "/hints", "/many"}

// requestVariant edits a request of the differential corpus.
type requestVariant struct {
	name string
	edit func(*http.Request)
}

var requestVariants = []requestVariant{
	{"bare", func(*http.Request) {}},
	{"one field", func(r *http.Request) { r.Header.Set("X-One", "1") }},
	{"empty value", func(r *http.Request) { r.Header.Set("X-Empty", "") }},
	{"forwarding fields", func(r *http.Request) {
		r.Header.Set("User-Agent", "client/1.0")
		r.Header.Set("Accept", "*/*")
		r.Header.Set("X-Forwarded-For", "192.0.2.1")
		r.Header.Set("X-Forwarded-Proto", "http")
	}},
	{"Connection: close", func(r *http.Request) { r.Header.Set("Connection", "close") }},
	{"req.Close", func(r *http.Request) { r.Close = true }},
	{"Idempotency-Key", func(r *http.Request) { r.Header.Set("Idempotency-Key", "k") }},
	{"Host", func(r *http.Request) { r.Host = "upstream.test" }},
	{"query", func(r *http.Request) { r.URL.RawQuery = "q=1&r=a%20b" }},
	{"framing fields", func(r *http.Request) { r.Header.Set("Content-Length", "0") }},
	{"large", func(r *http.Request) { r.Header.Set("X-Large", strings.Repeat("a", 200<<10)) }},
}

// sendOutcome is what a caller sees of one exchange.
type sendOutcome struct {
	Err           string
	Status        int
	Proto         string
	Header        http.Header
	FieldsTook    bool // resp.Header was nil, the fields in *opts.Fields
	Body          string
	Close         bool
	ContentLength int64
	Informational []int
	Stats         Stats // once the body is read and closed
}

// runCorpus sends every request of the corpus through s on a new
// Transport, one after another, and returns what each got.
func runCorpus(t *testing.T, via sender, u *recordingUpstream, withFields bool) []sendOutcome {
	tr := newTransport(t, Config{})
	defer tr.CloseIdleConnections()
	var out []sendOutcome
	for _, method := range []string{"GET", "HEAD", "OPTIONS", "DELETE"} {
		for _, path := range answerPaths {
			for _, v := range requestVariants {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				req, err := http.NewRequestWithContext(ctx, method, u.url()+path, nil)
				if err != nil {
					t.Fatal(err)
				}
				v.edit(req)
				var o sendOutcome
				var fields []httpfield.Field
				opts := SendOptions{Got1xx: func(code int, _ http.Header) error {
					o.Informational = append(o.Informational, code)
					return nil
				}}
				if withFields {
					opts.Fields = &fields
				}
				resp, err := via.send(ctx, tr, req, opts)
				if err != nil {
					o.Err = err.Error()
				} else {
					switch {
					case via.name == "SendHead" && resp.Request != nil:
						t.Errorf("%s %s %s: resp.Request is %p, want nil", method, path, v.name, resp.Request)
					case via.name != "SendHead" && resp.Request != req:
						t.Errorf("%s %s %s: resp.Request is %p, want the request %p", method, path, v.name, resp.Request, req)
					}
					o.Status, o.Proto, o.Header = resp.StatusCode, resp.Proto, resp.Header
					if resp.Header == nil {
						o.FieldsTook = true
						o.Header = http.Header{}
						for _, f := range fields {
							o.Header[f.Name] = append(o.Header[f.Name], f.Value)
						}
					}
					o.Close, o.ContentLength = resp.Close, resp.ContentLength
					b, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					o.Body = string(b)
					if err != nil {
						o.Err = "body: " + err.Error()
					}
				}
				cancel()
				o.Stats = tr.Stats()
				out = append(out, o)
				if o.Err != "" {
					// Every request of the corpus succeeds: the first that
					// does not ends the run, so that a broken exchange
					// costs one request's time limit, not one per request.
					t.Errorf("%s %s %s via %s: %s", method, path, v.name, via.name, o.Err)
					return out
				}
			}
		}
	}
	return out
}

// canonicalHead returns raw with its field lines sorted: Send writes a
// header of several fields in map order, which differs from one write to
// the next.
func canonicalHead(raw []byte) string {
	lines := strings.Split(string(raw), "\r\n")
	fields := lines[1 : len(lines)-2]
	slices.Sort(fields)
	return strings.Join(lines, "\r\n")
}

// TestSendHeadMatchesSend is the differential test of SendHead: for every
// request of a corpus of bodyless requests (methods, paths the upstream
// answers with every framing, header variants), Send and SendHead with the
// head writeRequest writes for it give the upstream the same bytes, on the
// same connections, and the caller the same responses, and count the same
// dials, retries and idle connections, with the header in a map and in a
// list of fields.
func TestSendHeadMatchesSend(t *testing.T) {
	u := newRecordingUpstream(t)
	var send, sendHead sender
	for _, via := range senders {
		switch via.name {
		case "Send":
			send = via
		case "SendHead":
			sendHead = via
		}
	}
	for _, withFields := range []bool{false, true} {
		t.Run(fmt.Sprintf("fields=%v", withFields), func(t *testing.T) {
			want := runCorpus(t, send, u, withFields)
			wantHeads := u.take()
			got := runCorpus(t, sendHead, u, withFields)
			gotHeads := u.take()
			if len(got) != len(want) {
				t.Fatalf("%d outcomes, want %d", len(got), len(want))
			}
			fieldsTook := 0
			for i := range want {
				if !reflect.DeepEqual(got[i], want[i]) {
					t.Errorf("request %d: SendHead\n%+v\nSend\n%+v", i, got[i], want[i])
				}
				if want[i].FieldsTook {
					fieldsTook++
				}
			}
			if withFields && fieldsTook == 0 || !withFields && fieldsTook != 0 {
				t.Errorf("%d responses with their fields in the list, fields asked: %v", fieldsTook, withFields)
			}
			if len(gotHeads) != len(wantHeads) {
				t.Fatalf("the upstream received %d heads from SendHead, %d from Send", len(gotHeads), len(wantHeads))
			}
			exact := 0
			for i := range wantHeads {
				g, w := gotHeads[i], wantHeads[i]
				if g.conn != w.conn || canonicalHead(g.raw) != canonicalHead(w.raw) {
					t.Fatalf("head %d: SendHead sent on connection %d\n%q\nSend on connection %d\n%q", i, g.conn, clip(g.raw), w.conn, clip(w.raw))
				}
				if bytes.Equal(g.raw, w.raw) {
					exact++
				} else if bytes.Count(w.raw, []byte("\r\n")) <= 4 { // request line, Host, one field, end: a single order
					t.Fatalf("head %d: SendHead sent %q, Send %q", i, g.raw, w.raw)
				}
			}
			if exact < len(wantHeads)/2 {
				t.Fatalf("only %d of %d heads byte for byte the same", exact, len(wantHeads))
			}
			last := want[len(want)-1].Stats
			if last.Dials < 10 || last.Dials > uint64(len(want)-10) {
				t.Fatalf("stats %+v: the corpus did not both reuse and dial", last)
			}
			t.Logf("%d requests, %d heads byte for byte the same, the rest in another field order; stats %+v", len(want), exact, last)
		})
	}
}

// TestSendHeadHEAD sends a hand-written HEAD head: the response's
// Content-Length is read as the length the resource would have, no body is
// read, and the connection goes back to the pool at once and is reused.
func TestSendHeadHEAD(t *testing.T) {
	srv := newRawServer(t, serveFixed("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\n", 0))
	tr := newTransport(t, Config{})
	addr := strings.TrimPrefix(srv.url(), "http://")
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := tr.SendHead(ctx, Head{Addr: addr, Method: "HEAD", Bytes: []byte("HEAD /r HTTP/1.1\r\nHost: a\r\n\r\n")}, SendOptions{})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		if s := tr.Stats(); s.Idle != 1 {
			t.Fatalf("request %d: stats %+v before the body is read, want the connection idle at once", i, s)
		}
		if resp.StatusCode != 200 || resp.ContentLength != 5 || resp.Body != http.NoBody || resp.Header.Get("Content-Type") != "text/plain" {
			t.Fatalf("request %d: status %d, length %d, body %T, header %v", i, resp.StatusCode, resp.ContentLength, resp.Body, resp.Header)
		}
		if got := readAll(t, resp); got != "" {
			t.Fatalf("request %d: body %q after HEAD", i, got)
		}
		cancel()
	}
	if s := tr.Stats(); s.Dials != 1 || srv.conns.Load() != 1 {
		t.Fatalf("stats %+v, %d connections; want one connection for every HEAD", s, srv.conns.Load())
	}
}

// TestSendHeadFields checks SendOptions.Fields with SendHead: the fields
// of a response the fast path reads itself come in the list, in order,
// with resp.Header nil, and a response it leaves to net/http has its
// header in resp.Header.
func TestSendHeadFields(t *testing.T) {
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if req.URL.Path == "/chunked" {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nX-B: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n")
				continue
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nX-B: 2\r\nx-a: 1\r\nX-B: 3\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	tr := newTransport(t, Config{})
	addr := strings.TrimPrefix(srv.url(), "http://")
	fields := []httpfield.Field{{Name: "Stale", Value: "from before"}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := tr.SendHead(ctx, Head{Addr: addr, Method: "GET", Bytes: []byte("GET / HTTP/1.1\r\nHost: a\r\n\r\n")}, SendOptions{Fields: &fields})
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "ok" || resp.Header != nil {
		t.Fatalf("body %q, header %v; want \"ok\" and the header in the list", got, resp.Header)
	}
	want := []httpfield.Field{{Name: "X-B", Value: "2"}, {Name: "X-A", Value: "1"}, {Name: "X-B", Value: "3"}, {Name: "Content-Length", Value: "2"}}
	if !slices.Equal(fields, want) {
		t.Fatalf("fields %v, want %v", fields, want)
	}
	resp, err = tr.SendHead(ctx, Head{Addr: addr, Method: "GET", Bytes: []byte("GET /chunked HTTP/1.1\r\nHost: a\r\n\r\n")}, SendOptions{Fields: &fields})
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "ok" || resp.Header.Get("X-B") != "2" {
		t.Fatalf("chunked: body %q, header %v; want the header in the map", got, resp.Header)
	}
	if s := tr.Stats(); s.Dials != 1 {
		t.Fatalf("stats %+v, want one connection", s)
	}
}

// TestSendHeadRejectsInvalidHead gives SendHead heads it can tell are
// wrong: each fails with ErrInvalidRequest, without a dial, a panic, or a
// change to the bytes.
func TestSendHeadRejectsInvalidHead(t *testing.T) {
	srv := newRawServer(t, serveFixed("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 0))
	addr := strings.TrimPrefix(srv.url(), "http://")
	good := "GET / HTTP/1.1\r\nHost: a\r\n\r\n"
	cases := []struct {
		name string
		h    Head
	}{
		{"no address", Head{Method: "GET", Bytes: []byte(good)}},
		{"no method", Head{Addr: addr, Bytes: []byte(good)}},
		{"method not a token", Head{Addr: addr, Method: "G T", Bytes: []byte("G T / HTTP/1.1\r\nHost: a\r\n\r\n")}},
		{"CONNECT", Head{Addr: addr, Method: "CONNECT", Bytes: []byte("CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n")}},
		{"nil bytes", Head{Addr: addr, Method: "GET"}},
		{"empty bytes", Head{Addr: addr, Method: "GET", Bytes: []byte{}}},
		{"only the end", Head{Addr: addr, Method: "GET", Bytes: []byte("\r\n\r\n")}},
		{"no empty line", Head{Addr: addr, Method: "GET", Bytes: []byte("GET / HTTP/1.1\r\nHost: a\r\n")}},
		{"bytes after the head", Head{Addr: addr, Method: "GET", Bytes: []byte(good + "x")}},
		{"two heads", Head{Addr: addr, Method: "GET", Bytes: []byte(good + good)}},
		{"an empty line inside", Head{Addr: addr, Method: "GET", Bytes: []byte("GET / HTTP/1.1\r\n\r\nHost: a\r\n\r\n")}},
		{"bare LF", Head{Addr: addr, Method: "GET", Bytes: []byte("GET / HTTP/1.1\nHost: a\r\n\r\n")}},
		{"bare LF ending a field", Head{Addr: addr, Method: "GET", Bytes: []byte("GET / HTTP/1.1\r\nHost: a\n\r\n\r\n")}},
		{"bare LF empty line", Head{Addr: addr, Method: "GET", Bytes: []byte("GET / HTTP/1.1\r\nHost: a\r\n\nX: 1\r\n\r\n")}},
		{"bare CR", Head{Addr: addr, Method: "GET", Bytes: []byte("GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n")}},
		{"other method in the head", Head{Addr: addr, Method: "GET", Bytes: []byte("HEAD / HTTP/1.1\r\nHost: a\r\n\r\n")}},
		{"method a prefix of the head's", Head{Addr: addr, Method: "GE", Bytes: []byte(good)}},
		{"HTTP/1.0", Head{Addr: addr, Method: "GET", Bytes: []byte("GET / HTTP/1.0\r\nHost: a\r\n\r\n")}},
		{"no version", Head{Addr: addr, Method: "GET", Bytes: []byte("GET /\r\nHost: a\r\n\r\n")}},
		{"no target", Head{Addr: addr, Method: "GET", Bytes: []byte("GET  HTTP/1.1\r\nHost: a\r\n\r\n")}},
		{"target with a space", Head{Addr: addr, Method: "GET", Bytes: []byte("GET /a b HTTP/1.1\r\nHost: a\r\n\r\n")}},
		{"relative target", Head{Addr: addr, Method: "GET", Bytes: []byte("GET a HTTP/1.1\r\nHost: a\r\n\r\n")}},
		{"request line only the method", Head{Addr: addr, Method: "GET", Bytes: []byte("GET\r\n\r\n")}},
	}
	tr := newTransport(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a failure ends
	defer cancel()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kept := bytes.Clone(tc.h.Bytes)
			resp, err := tr.SendHead(ctx, tc.h, SendOptions{})
			if !errors.Is(err, ErrInvalidRequest) {
				if resp != nil {
					resp.Body.Close()
				}
				t.Fatalf("err = %v, want ErrInvalidRequest", err)
			}
			if !bytes.Equal(tc.h.Bytes, kept) {
				t.Fatalf("the head was changed to %q", tc.h.Bytes)
			}
		})
	}
	if s := tr.Stats(); s.Dials != 0 {
		t.Fatalf("stats %+v: invalid heads dialled", s)
	}
	// And the heads it takes: absolute-form and "*" targets, an address
	// without a port.
	for _, h := range []Head{
		{Addr: addr, Method: "GET", Bytes: []byte("GET http://a/x HTTP/1.1\r\nHost: a\r\n\r\n")},
		{Addr: addr, Method: "OPTIONS", Bytes: []byte("OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n")},
		{Addr: addr, Method: "PURGE", Bytes: []byte("PURGE /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"), Close: true},
	} {
		resp, err := tr.SendHead(ctx, h, SendOptions{})
		if err != nil {
			t.Fatalf("%q: %v", h.Bytes, err)
		}
		readAll(t, resp)
	}
	if s := tr.Stats(); s.Dials != 1 || s.Idle != 0 {
		t.Fatalf("stats %+v, want one connection, closed after the head that asked for it", s)
	}
}

// TestSendHeadDefaultPort checks that an address without a port is the
// address with port 80, as for Send: the two share a pool entry.
func TestSendHeadDefaultPort(t *testing.T) {
	var dialled []string
	tr := newTransport(t, Config{DialContext: func(_ context.Context, _, addr string) (net.Conn, error) {
		dialled = append(dialled, addr)
		return nil, errors.New("test: no dial")
	}})
	for _, addr := range []string{"upstream.test", "[::1]", "upstream.test:8080"} {
		tr.SendHead(t.Context(), Head{Addr: addr, Method: "GET", Bytes: []byte("GET / HTTP/1.1\r\nHost: a\r\n\r\n")}, SendOptions{})
	}
	if want := []string{"upstream.test:80", "[::1]:80", "upstream.test:8080"}; !slices.Equal(dialled, want) {
		t.Fatalf("dialled %q, want %q", dialled, want)
	}
}

func TestCanSendHead(t *testing.T) {
	tr := newTransport(t, Config{})
	if tr.CanSendHead() != canProbeSockets {
		t.Fatalf("CanSendHead() = %v on a system where the socket check is %v", tr.CanSendHead(), canProbeSockets)
	}
}

// TestIdempotencyKeyInHead checks how SendHead decides that a request of
// a method that is not idempotent may be sent again: by an Idempotency-Key
// or X-Idempotency-Key field, whatever the case of its name, at the start
// of a field line only.
func TestIdempotencyKeyInHead(t *testing.T) {
	cases := []struct {
		fields string
		want   bool
	}{
		{"", false},
		{"Idempotency-Key: k\r\n", true},
		{"X-Idempotency-Key: k\r\n", true},
		{"idempotency-key: k\r\n", true},
		{"x-IDEMPOTENCY-key:k\r\n", true},
		{"X-A: 1\r\nIdempotency-Key:\r\n", true},
		{"X-Idempotency-Keys: k\r\n", false},
		{"Idempotency-Key : k\r\n", false},
		{"X-A: Idempotency-Key: k\r\n", false},
		{"Y-Idempotency-Key: k\r\n", false},
		{"X-A: 1\r\n", false},
	}
	for _, tc := range cases {
		for _, method := range []string{"POST", "DELETE", "GET"} {
			b := []byte(method + " / HTTP/1.1\r\nHost: a\r\n" + tc.fields + "\r\n")
			head, err := headOf(Head{Addr: "a:80", Method: method, Bytes: b})
			if err != nil {
				t.Fatalf("%q: %v", b, err)
			}
			if want := tc.want || method == "GET"; head.replayable != want {
				t.Errorf("%q: replayable %v, want %v", b, head.replayable, want)
			}
		}
	}
}

// TestSendHeadIdleClosedBeforeReuse checks, for every sender, a pooled
// connection the upstream closed while it was idle: every method, none
// replayable aside, goes on a new connection, and nothing is retried.
func TestSendHeadIdleClosedBeforeReuse(t *testing.T) {
	for _, via := range senders {
		for _, method := range []string{"GET", "POST", "DELETE"} {
			t.Run(via.name+"/"+method, func(t *testing.T) {
				srv := newRawServer(t, serveFixed("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 1))
				rd := &recordingDialer{}
				tr := newTransport(t, Config{DialContext: rd.dial})
				resp, err := sendVia(t, via, tr, "GET", srv.url(), nil, SendOptions{})
				if err != nil {
					t.Fatal(err)
				}
				readAll(t, resp)
				waitNotOpen(t, rd.last())
				resp, err = sendVia(t, via, tr, method, srv.url(), nil, SendOptions{})
				if err != nil {
					t.Fatal(err)
				}
				readAll(t, resp)
				if st := tr.Stats(); st.Dials != 2 || st.IdleClosed != 1 || st.Retries != 0 || srv.conns.Load() != 2 {
					t.Fatalf("stats %+v, %d connections; want the closed one dropped and a second dialled", st, srv.conns.Load())
				}
			})
		}
	}
}

// TestSendHeadSettlesEveryConnection runs exchanges that end every way, a
// head timeout and a cancel among them, over in-memory connections whose
// server side the test drives, and counts the connections left open after
// each: exactly the idle ones.
func TestSendHeadSettlesEveryConnection(t *testing.T) {
	checkNoLeak(t)
	n := newMemNet()
	tr := newTransport(t, Config{DialContext: n.dial})
	open := func() int {
		n.mu.Lock()
		defer n.mu.Unlock()
		k := 0
		for _, c := range n.conns {
			if !c.clientClosed {
				k++
			}
		}
		return k
	}
	// serve answers the next request with answer once it arrived, or
	// takes it without an answer with answer "".
	stopped := false
	t.Cleanup(func() {
		n.mu.Lock()
		stopped = true
		n.cond.Broadcast()
		n.mu.Unlock()
	})
	serve := func(answer string) {
		go func() {
			n.mu.Lock()
			defer n.mu.Unlock()
			for !stopped {
				for _, c := range n.conns {
					if len(c.inbox) > 0 && !c.clientClosed {
						c.inbox = nil
						if answer != "" {
							c.srvWrite([]byte(answer), memWrite{})
						}
						return
					}
				}
				n.cond.Wait()
			}
		}()
	}
	const ok = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	steps := []struct {
		name   string
		answer string
		opts   SendOptions
		cancel time.Duration // cancel the context this long after the send
		method string
		err    error
		idle   int
		dials  uint64
	}{
		{"first", ok, SendOptions{}, 0, "GET", nil, 1, 1},
		{"reused", ok, SendOptions{}, 0, "GET", nil, 1, 1},
		{"head timeout", "", SendOptions{HeadTimeout: 50 * time.Millisecond}, 0, "GET", ErrHeadTimeout, 0, 1},
		{"after the timeout", ok, SendOptions{}, 0, "GET", nil, 1, 2},
		{"cancel", "", SendOptions{}, 50 * time.Millisecond, "GET", errClientGone, 0, 2},
		{"after the cancel", ok, SendOptions{}, 0, "DELETE", nil, 1, 3},
		{"HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n", SendOptions{}, 0, "HEAD", nil, 1, 3},
		{"closing", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", SendOptions{}, 0, "GET", nil, 0, 3},
		{"truncated body", "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nok", SendOptions{}, 100 * time.Millisecond, "GET", errClientGone, 0, 4},
	}
	for _, st := range steps {
		serve(st.answer)
		ctx, cancel := context.WithCancelCause(context.Background())
		ctx, stop := context.WithTimeout(ctx, 10*time.Second) // a failure ends
		if st.cancel > 0 {
			time.AfterFunc(st.cancel, func() { cancel(errClientGone) })
		}
		b := []byte(st.method + " /" + strings.ReplaceAll(st.name, " ", "-") + " HTTP/1.1\r\nHost: mem\r\n\r\n")
		resp, err := tr.SendHead(ctx, Head{Addr: "mem:80", Method: st.method, Bytes: b}, st.opts)
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		cancel(nil)
		stop()
		if st.err == nil && err != nil || st.err != nil && !errors.Is(err, st.err) {
			t.Fatalf("%s: err = %v, want %v", st.name, err, st.err)
		}
		s := tr.Stats()
		if s.Idle != st.idle || s.Dials != st.dials || open() != s.Idle {
			t.Fatalf("%s: stats %+v, %d connections open; want %d idle after %d dials, and open only those", st.name, s, open(), st.idle, st.dials)
		}
	}
	tr.CloseIdleConnections()
	if k := open(); k != 0 {
		t.Fatalf("%d connections open after CloseIdleConnections", k)
	}
	n.mu.Lock()
	v := n.violation
	n.mu.Unlock()
	if v != "" {
		t.Fatal(v)
	}
}

// headLinesByLine is headLines as it was first written, a line at a time:
// the reference FuzzHeadLines holds the faster one to.
func headLinesByLine(b []byte) (first int, ok bool) {
	if len(b) < 4 || string(b[len(b)-4:]) != "\r\n\r\n" {
		return 0, false
	}
	for start := 0; start < len(b); {
		n := bytes.IndexByte(b[start:], '\n') // the line with its CR
		if n < 1 || bytes.IndexByte(b[start:start+n], '\r') != n-1 {
			return 0, false
		}
		if start == 0 {
			first = n - 1
		}
		if n == 1 && start+2 != len(b) {
			return 0, false // an empty line before the last
		}
		start += n + 1
	}
	return first, true
}

// FuzzHeadLines requires headLines to judge every head as the line by line
// reference does, and to find the same first line.
// ci:fuzztime 20000x
func FuzzHeadLines(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n", "GET / HTTP/1.1\r\n\r\n", "\r\n\r\n", "\r\n\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\nb\r\n\r\n", "GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n", "GET / HTTP/1.1\r\n\r\nX: 1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\r\n\r\n", "GET / HTTP/1.1\n\r\n\r\n", "\r\r\n\n\r\n\r\n", "x\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		first, ok := headLines(b)
		wantFirst, wantOK := headLinesByLine(b)
		if ok != wantOK || ok && first != wantFirst {
			t.Fatalf("headLines(%q) = %d, %v; the line by line reference says %d, %v", b, first, ok, wantFirst, wantOK)
		}
	})
}

// BenchmarkHeadLines compares headLines with its line by line reference on
// the head the lean path sends for a browser's request.
func BenchmarkHeadLines(b *testing.B) {
	head := []byte("GET /assets/app.js?v=3 HTTP/1.1\r\nHost: app.example\r\n" +
		"User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0\r\n" +
		"Accept: */*\r\nAccept-Language: en-US,en;q=0.5\r\nAccept-Encoding: gzip, deflate, br\r\n" +
		"Referer: https://app.example/\r\nCookie: session=0123456789abcdef; theme=dark\r\n" +
		"Sec-Fetch-Dest: script\r\nSec-Fetch-Mode: no-cors\r\nSec-Fetch-Site: same-origin\r\n" +
		"X-Forwarded-For: 127.0.0.2\r\nX-Real-Ip: 127.0.0.2\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: app.example\r\n\r\n")
	for _, bc := range []struct {
		name string
		fn   func([]byte) (int, bool)
	}{{"scan", headLines}, {"by-line", headLinesByLine}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if _, ok := bc.fn(head); !ok {
					b.Fatal("head refused")
				}
			}
		})
	}
}
