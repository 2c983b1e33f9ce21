package upstream

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/httpfield"
)

// simpleHeadCorpus adds, to responseCorpus, answers ReadSimpleHead must
// take (every status it reads, fields of every kind it reads, HEAD
// answers) and must leave (1xx, bare line ends, framing fields).
var simpleHeadCorpus = []string{
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 201 Created\r\nLocation: /x\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-1/10\r\nContent-Length: 2\r\n\r\nab",
	"HTTP/1.1 301 Moved Permanently\r\nLocation: http://a/\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 599 Whatever\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nconnection: CLOSE\r\ncontent-length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nConnection: upgrade, close\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nContent-Length: 999999999999999999\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 1000000000000000000\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length:\t7\t\r\n\r\n1234567",
	"HTTP/1.1 200 OK\r\nX-Empty:\r\nX-Spaces:    \r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nDate: Wed, 02 Dec 2026 09:00:00 GMT\r\nServer: x\r\nVary: A\r\nVary: B\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: 4\r\nCache-Control: no-store\r\nSet-Cookie: a=1; Path=/\r\nSet-Cookie: b=2\r\nX-1: 1\r\n\r\nbody",
	"HTTP/1.1 404 \r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcHTTP/1.1 200 OK\r\n",
	"HTTP/1.1 100 Continue\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 101 Switching Protocols\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 304 Not Modified\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nPragma: x\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTrailer: X\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX: a\nb\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX: a\r\n\tb\r\n\r\n",
	"http/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\n" + strings.Repeat("X-Many: v\r\n", 63) + "Content-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\n" + strings.Repeat("X-Many: v\r\n", 64) + "Content-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-Long: " + strings.Repeat("l", 3000) + "\r\n\r\nabc",
}

// simpleOutcome is what ReadSimpleHead, and readResponse on its fast path,
// show of a response head.
type simpleOutcome struct {
	Status, Proto                      string
	StatusCode, ProtoMajor, ProtoMinor int
	ContentLength                      int64
	TransferEncoding                   []string
	Close, Uncompressed                bool
	Header, Trailer                    http.Header
	Fields                             []httpfield.Field
	HasRequest                         bool
}

func simpleOutcomeOf(resp *http.Response, fields *[]httpfield.Field) simpleOutcome {
	o := simpleOutcome{
		Status: resp.Status, Proto: resp.Proto, StatusCode: resp.StatusCode,
		ProtoMajor: resp.ProtoMajor, ProtoMinor: resp.ProtoMinor,
		ContentLength: resp.ContentLength, TransferEncoding: resp.TransferEncoding,
		Close: resp.Close, Uncompressed: resp.Uncompressed,
		Header: resp.Header, Trailer: resp.Trailer, HasRequest: resp.Request != nil,
	}
	if fields != nil {
		o.Fields = append([]httpfield.Field(nil), (*fields)...)
	}
	return o
}

// staleFields is what a field list holds before a read: a read that takes
// the head must replace it.
func staleFields() []httpfield.Field {
	return []httpfield.Field{{Name: "Stale", Value: "from an earlier response"}}
}

// checkSimpleHead holds ReadSimpleHead on in to readResponse on a
// bufio.Reader holding all of in, for method: ReadSimpleHead takes the
// head exactly when readResponse's fast path does (with a field list, the
// fast path is the one that leaves resp.Header nil), and then returns the
// same response, fields (or header) and the number of bytes readResponse
// consumed before the body. Every shorter prefix of a head it takes is
// not a whole head: false. The first read of each is made by reused, a
// SimpleHeadReader that has read every earlier input: nothing of an
// earlier answer may show in a later one.
func checkSimpleHead(t *testing.T, in []byte, method string) {
	t.Helper()
	kept := bytes.Clone(in)
	// Whether readResponse's fast path takes the head: with a field list,
	// it is the path that leaves resp.Header nil.
	probe := staleFields()
	r, err := readResponse(bufio.NewReaderSize(bytes.NewReader(in), max(16, len(in))), method, &probe)
	fast := err == nil && r.Header == nil
	for _, withFields := range []bool{true, false} {
		var fa, fb *[]httpfield.Field
		if withFields {
			a, b := staleFields(), staleFields()
			fa, fb = &a, &b
		}
		resp, headLen, ok := reused.Read(in, method, fa)
		if !bytes.Equal(in, kept) {
			t.Fatalf("%s %q: ReadSimpleHead changed its input", method, in)
		}
		br := bufio.NewReaderSize(bytes.NewReader(in), max(16, len(in)))
		want, err := readResponse(br, method, fb)
		if ok != fast {
			t.Fatalf("%s %q (fields %v): ReadSimpleHead ok = %v, readResponse's fast path took it: %v (err %v)", method, in, withFields, ok, fast, err)
		}
		if !ok {
			if resp != nil || headLen != 0 {
				t.Fatalf("%s %q: ReadSimpleHead returned %v, %d with false", method, in, resp, headLen)
			}
			continue
		}
		if got, want := simpleOutcomeOf(resp, fa), simpleOutcomeOf(want, fb); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s %q (fields %v):\nReadSimpleHead %+v\nreadResponse   %+v", method, in, withFields, got, want)
		}
		if consumed := len(in) - br.Buffered(); headLen != consumed {
			t.Fatalf("%s %q: ReadSimpleHead's head is %d bytes, readResponse consumed %d", method, in, headLen, consumed)
		}
		if resp.Body != http.NoBody {
			t.Fatalf("%s %q: ReadSimpleHead's body is %T, want http.NoBody", method, in, resp.Body)
		}
		// net/http reads the same head the same way.
		std, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(in)), &http.Request{Method: method})
		if err != nil {
			t.Fatalf("%s %q: ReadSimpleHead took a head http.ReadResponse refuses: %v", method, in, err)
		}
		header := resp.Header
		if withFields {
			header = http.Header{}
			for _, f := range *fa {
				header[f.Name] = append(header[f.Name], f.Value)
			}
		}
		if std.StatusCode != resp.StatusCode || std.Status != resp.Status || std.ContentLength != resp.ContentLength ||
			std.Close != resp.Close || !reflect.DeepEqual(std.Header, header) {
			t.Fatalf("%s %q: ReadSimpleHead %d %q length %d close %v %v; http.ReadResponse %d %q length %d close %v %v",
				method, in, resp.StatusCode, resp.Status, resp.ContentLength, resp.Close, header,
				std.StatusCode, std.Status, std.ContentLength, std.Close, std.Header)
		}
		// The head alone is a whole head; anything shorter is not.
		if _, n, ok := ReadSimpleHead(in[:headLen], method, fa); !ok || n != headLen {
			t.Fatalf("%s %q: the head alone: ok %v, %d bytes; want %d", method, in, ok, n, headLen)
		}
		for i := range headLen {
			if r, n, ok := ReadSimpleHead(in[:i], method, fa); ok || r != nil || n != 0 {
				t.Fatalf("%s %q: the first %d of the head's %d bytes: ok %v, %d bytes", method, in, i, headLen, ok, n)
			}
		}
	}
}

// reused is checkSimpleHead's reader.
var reused SimpleHeadReader

// TestReadSimpleHeadMatchesReadResponse is the differential test of
// ReadSimpleHead against the reader SendHead uses, over the response
// corpus, simpleHeadCorpus and seeded mutations of both, for GET, HEAD
// and POST.
func TestReadSimpleHeadMatchesReadResponse(t *testing.T) {
	corpus := append(append([]string{}, responseCorpus...), simpleHeadCorpus...)
	taken := 0
	for _, in := range corpus {
		for _, method := range []string{"GET", "HEAD", "POST"} {
			checkSimpleHead(t, []byte(in), method)
		}
		if _, _, ok := ReadSimpleHead([]byte(in), "GET", nil); ok {
			taken++
		}
	}
	t.Logf("ReadSimpleHead took %d of %d corpus entries", taken, len(corpus))
	if taken < 25 {
		t.Errorf("ReadSimpleHead took only %d corpus entries: the test would hardly see it take one", taken)
	}
	rng := rand.New(rand.NewPCG(7, 2026))
	special := []byte("\r\n :0123456789\t,-")
	for range 3000 {
		in := []byte(corpus[rng.IntN(len(corpus))])
		for range 1 + rng.IntN(3) {
			in = mutateOnce(rng, in, func() byte {
				c := special[rng.IntN(len(special))]
				if rng.IntN(3) == 0 {
					c = byte(rng.IntN(256))
				}
				return c
			})
		}
		for _, method := range []string{"GET", "HEAD"} {
			checkSimpleHead(t, in, method)
		}
	}
}

// TestReadSimpleHeadHEAD checks the answer to HEAD: no body, whatever the
// length says, and that length as ContentLength; the head's length does
// not count the body bytes that follow.
func TestReadSimpleHeadHEAD(t *testing.T) {
	in := []byte("HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n")
	for _, method := range []string{"HEAD", "GET"} {
		resp, n, ok := ReadSimpleHead(in, method, nil)
		if !ok || n != len(in) || resp.ContentLength != 1234 || resp.Body != http.NoBody {
			t.Errorf("%s: ok %v, %d bytes, %+v", method, ok, n, resp)
		}
	}
}

// readFresh is what a new SimpleHeadReader reads of in, with a field
// list: the outcome a reader that has read other heads must match.
func readFresh(in []byte, method string) (simpleOutcome, int, bool) {
	fields := staleFields()
	resp, n, ok := new(SimpleHeadReader).Read(in, method, &fields)
	if !ok {
		return simpleOutcome{}, n, false
	}
	return simpleOutcomeOf(resp, &fields), n, true
}

// checkReadAsFresh reads in with sr and fails unless it reads as a new
// reader would.
func checkReadAsFresh(t *testing.T, sr *SimpleHeadReader, in []byte, method string) {
	t.Helper()
	fields := staleFields()
	resp, n, ok := sr.Read(in, method, &fields)
	want, wantN, wantOK := readFresh(in, method)
	if ok != wantOK || n != wantN {
		t.Fatalf("%s %q: ok %v, %d bytes; a new reader: ok %v, %d bytes", method, in, ok, n, wantOK, wantN)
	}
	if ok {
		if got := simpleOutcomeOf(resp, &fields); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s %q:\nread   %+v\nafresh %+v", method, in, got, want)
		}
	}
}

// TestSimpleHeadReaderRepeatedHead checks the reader's copy of a head the
// same as the last: it reads as a fresh reader would, allocates nothing,
// is not fooled by a head that differs from the last in one byte or goes
// on past it, and does not see what its caller did to what it was given.
func TestSimpleHeadReaderRepeatedHead(t *testing.T) {
	const head = "HTTP/1.1 200 OK\r\nDate: Sat, 05 Dec 2026 21:00:00 GMT\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: 5\r\n\r\n"
	answer := []byte(head + "hello")
	var sr SimpleHeadReader
	fields := staleFields()
	if allocs := testing.AllocsPerRun(100, func() {
		if _, _, ok := sr.Read(answer, "GET", &fields); !ok {
			t.Fatal("the answer was not read")
		}
	}); allocs != 0 {
		t.Errorf("reading the same head again: %.1f allocations, want 0", allocs)
	}
	others := []string{
		strings.Replace(head, "21:00:00", "21:00:01", 1),
		strings.Replace(head, "Length: 5", "Length: 6", 1),
		strings.Replace(head, "200 OK", "201 OK", 1),
		strings.Replace(head, "Connection: close\r\n", "", 1),
		strings.Replace(head, "\r\n\r\n", "\r\nX-More: 1\r\n\r\n", 1),
		strings.Replace(head, "\r\n\r\n", "\r\nX-More: 1\r\n", 1) + "\r\n", // the same, with the last CRLF apart
		strings.Replace(head, "\r\n\r\n", "\r\nTransfer-Encoding: chunked\r\n\r\n", 1),
		head[:len(head)-1],
		head[:len(head)-2] + "\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-Long: " + strings.Repeat("l", maxRepeatedHead) + "\r\n\r\n",
	}
	for _, other := range others {
		for _, method := range []string{"GET", "HEAD"} {
			checkReadAsFresh(t, &sr, answer, method)
			checkReadAsFresh(t, &sr, []byte(other), method)
			checkReadAsFresh(t, &sr, []byte(other), method)
			checkReadAsFresh(t, &sr, answer, method)
		}
	}
	// What the caller does to the fields it was given, and to the
	// Response, shows in no later read.
	fields = staleFields()
	resp, _, _ := sr.Read(answer, "GET", &fields)
	fields[0].Value = "changed"
	fields = fields[:1]
	resp.StatusCode, resp.Close = 500, false
	checkReadAsFresh(t, &sr, answer, "GET")
}

// FuzzSimpleHeadReaderSequence reads two answers, and the second again,
// through one SimpleHeadReader: each as a new reader would read it,
// whatever the first was.
func FuzzSimpleHeadReaderSequence(f *testing.F) {
	for i, in := range simpleHeadCorpus {
		next := simpleHeadCorpus[(i+1)%len(simpleHeadCorpus)]
		f.Add([]byte(in), []byte(in))
		f.Add([]byte(in), []byte(next))
		f.Add([]byte(in), []byte(in+"HTTP/1.1 200 OK\r\n"))
	}
	f.Fuzz(func(t *testing.T, first, second []byte) {
		var sr SimpleHeadReader
		for _, in := range [][]byte{first, second, second, first} {
			checkReadAsFresh(t, &sr, in, "GET")
		}
	})
}

// prefixConn is a net.Conn whose first bytes read are prefix and then the
// connection's own: an answer some of which the caller read already, put
// back in front. It records whether it was closed. Embedding net.Conn
// only, it is no socket to the transport.
type prefixConn struct {
	net.Conn
	prefix []byte
	closed atomic.Bool
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

func (c *prefixConn) Close() error {
	c.closed.Store(true)
	return c.Conn.Close()
}

// adoptUpstream is a loopback upstream that, on each connection, reads
// one request head, calls answer (which writes what it likes and reports
// whether the connection stays open), and then reads until the client
// closes, reporting how many more bytes came and how the read ended.
type adoptUpstream struct {
	*rawServer
	heads chan string
	after chan adoptAfter
}

type adoptAfter struct {
	n   int64
	err error // nil: EOF, the client closed
}

func newAdoptUpstream(t *testing.T, answer func(c net.Conn) (open bool)) *adoptUpstream {
	t.Helper()
	u := &adoptUpstream{heads: make(chan string, 64), after: make(chan adoptAfter, 64)}
	u.rawServer = newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		_ = c.SetDeadline(time.Now().Add(15 * time.Second))
		var head []byte
		for {
			line, err := br.ReadBytes('\n')
			head = append(head, line...)
			if err != nil {
				return
			}
			if string(line) == "\r\n" {
				break
			}
		}
		u.heads <- string(head)
		if !answer(c) {
			return
		}
		n, err := io.Copy(io.Discard, br)
		u.after <- adoptAfter{n, err}
	})
	return u
}

// writeAnswer is an answer writing s and keeping the connection open.
func writeAnswer(s string) func(net.Conn) bool {
	return func(c net.Conn) bool {
		_, _ = io.WriteString(c, s)
		return true
	}
}

// closingAnswer is an answer writing s and closing the connection.
func closingAnswer(s string) func(net.Conn) bool {
	return func(c net.Conn) bool {
		_, _ = io.WriteString(c, s)
		return false
	}
}

// waitClosedByClient waits for u to see the client close the connection,
// having received nothing more than the request head.
func (u *adoptUpstream) waitClosedByClient(t *testing.T) {
	t.Helper()
	select {
	case a := <-u.after:
		// A client that closes with some of the answer unread resets
		// the connection.
		if a.err != nil && !errors.Is(a.err, syscall.ECONNRESET) || a.n != 0 {
			t.Errorf("the upstream read %d more bytes, then %v; want nothing, then the client's close", a.n, a.err)
		}
	case <-time.After(5 * time.Second):
		t.Error("the upstream did not see the connection close")
	}
}

const adoptRequest = "GET /x HTTP/1.1\r\nHost: upstream.test\r\n\r\n"

// adoptConn connects to u, sends head, waits for the first k bytes of the
// answer and returns the connection with them put back in front.
func adoptConn(t *testing.T, u *adoptUpstream, head string, k int) *prefixConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", u.ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	if _, err := io.WriteString(nc, head); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, k)
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(nc, buf); err != nil {
		t.Fatalf("reading the first %d bytes of the answer: %v", k, err)
	}
	_ = nc.SetReadDeadline(time.Time{})
	select {
	case got := <-u.heads:
		if got != head {
			t.Fatalf("the upstream got %q, sent %q", got, head)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream got no head")
	}
	return &prefixConn{Conn: nc, prefix: buf}
}

func adoptHead(u *adoptUpstream, method, raw string) Head {
	return Head{Addr: u.ln.Addr().String(), Method: method, Bytes: []byte(raw)}
}

// adoptCtx is the context of an Adopt call: every test bounds its time.
func adoptCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// informational is one 1xx head passed to Got1xx.
type informational struct {
	code   int
	header http.Header
}

// expectAnswer reads answer as net/http would for method: the 1xx heads
// before the final one, and the final response with its body.
func expectAnswer(t *testing.T, answer, method string) ([]informational, *http.Response, string) {
	t.Helper()
	br := bufio.NewReader(strings.NewReader(answer))
	var infos []informational
	for {
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			t.Fatalf("net/http does not read %q: %v", answer, err)
		}
		if resp.StatusCode >= 200 {
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("net/http does not read the body of %q: %v", answer, err)
			}
			return infos, resp, string(b)
		}
		infos = append(infos, informational{resp.StatusCode, resp.Header})
	}
}

// TestAdoptReadsTheAnswer sends a request head on a loopback connection,
// reads part of the answer (nothing, a byte, part of the head, the head,
// part of the body, everything) and hands the connection to Adopt with
// those bytes put back in front: Adopt must return the response net/http
// reads from the whole answer, its 1xx heads passed to Got1xx, with the
// header in the field list when it read the head itself, and the body;
// it must send nothing, and close the connection once the body is read
// (at once when there is none), whatever the answer says of keeping it.
func TestAdoptReadsTheAnswer(t *testing.T) {
	checkNoLeak(t)
	cases := []struct {
		name, method, answer string
	}{
		{"simple", "GET", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello"},
		{"keep-alive asked", "GET", "HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\nContent-Length: 2\r\n\r\nok"},
		{"connection close", "GET", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"},
		{"many fields", "GET", "HTTP/1.1 404 Not Found\r\nX-A: 1\r\nX-A: 2\r\nSet-Cookie: a=1\r\nx-lower: v\r\nContent-Type: text/plain\r\nContent-Length: 9\r\n\r\nnot found"},
		{"chunked", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n"},
		{"early hints", "GET", "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\nHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"},
		{"head", "HEAD", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\n"},
		{"204", "GET", "HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n"},
		{"304", "GET", "HTTP/1.1 304 Not Modified\r\nEtag: \"e\"\r\nContent-Length: 5\r\n\r\n"},
		{"empty", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"},
		{"http/1.0", "GET", "HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello"},
		{"large body", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + strings.Repeat("b", 100000)},
		{"bare lf head", "GET", "HTTP/1.1 200 OK\nContent-Length: 2\n\nok"},
	}
	tr := newTransport(t, Config{})
	for _, tc := range cases {
		finalHead := strings.LastIndex(tc.answer, "HTTP/1.")
		headEnd := finalHead + strings.Index(tc.answer[finalHead:], "\n\r\n") + 3
		if strings.Contains(tc.name, "bare lf") {
			headEnd = finalHead + strings.Index(tc.answer[finalHead:], "\n\n") + 2
		}
		var splits []int
		for _, k := range []int{0, 1, 12, headEnd - 1, headEnd, headEnd + 1, len(tc.answer)} {
			if k <= len(tc.answer) && !slices.Contains(splits, k) {
				splits = append(splits, k)
			}
		}
		// Whether SendHead would read the final head itself, and so fill
		// the field list.
		_, _, simple := ReadSimpleHead([]byte(tc.answer[finalHead:]), tc.method, nil)
		type variant struct {
			k                int
			wrap, withFields bool
		}
		var variants []variant
		for _, k := range splits {
			for _, withFields := range []bool{true, false} {
				variants = append(variants, variant{k, true, withFields})
				if k == 0 {
					// The socket itself too: a connection the transport
					// could check while idle, which it must not keep.
					variants = append(variants, variant{k, false, withFields})
				}
			}
		}
		for _, v := range variants {
			name := fmt.Sprintf("%s/read %d/fields %v", tc.name, v.k, v.withFields)
			if !v.wrap {
				name = fmt.Sprintf("%s/socket/fields %v", tc.name, v.withFields)
			}
			t.Run(name, func(t *testing.T) {
				wantInfos, want, wantBody := expectAnswer(t, tc.answer, tc.method)
				u := newAdoptUpstream(t, writeAnswer(tc.answer))
				req := strings.Replace(adoptRequest, "GET", tc.method, 1)
				pc := adoptConn(t, u, req, v.k)
				var infos []informational
				opts := SendOptions{HeadTimeout: 5 * time.Second, Got1xx: func(code int, h http.Header) error {
					infos = append(infos, informational{code, h.Clone()})
					return nil
				}}
				var fields []httpfield.Field
				if v.withFields {
					fields = staleFields()
					opts.Fields = &fields
				}
				var nc net.Conn = pc
				if !v.wrap {
					nc = pc.Conn
				}
				resp, err := tr.Adopt(adoptCtx(t), nc, adoptHead(u, tc.method, req), opts)
				if err != nil {
					t.Fatalf("Adopt: %v", err)
				}
				defer resp.Body.Close()
				// The fast path reads a head that the first read brings
				// whole: here, one put back whole.
				if v.withFields && simple && v.wrap && v.k >= headEnd && resp.Header != nil {
					t.Errorf("resp.Header is %v: with a field list, the header of a head read as SendHead reads it goes there", resp.Header)
				}
				if !reflect.DeepEqual(infos, wantInfos) && (len(infos) != 0 || len(wantInfos) != 0) {
					t.Errorf("Got1xx saw %v, want %v", infos, wantInfos)
				}
				header := resp.Header
				if header == nil {
					if !v.withFields {
						t.Fatal("resp.Header is nil without a field list")
					}
					header = http.Header{}
					for _, f := range fields {
						header[f.Name] = append(header[f.Name], f.Value)
					}
				}
				if resp.StatusCode != want.StatusCode || resp.Status != want.Status || resp.Proto != want.Proto ||
					resp.ContentLength != want.ContentLength || resp.Close != want.Close ||
					!reflect.DeepEqual(resp.TransferEncoding, want.TransferEncoding) || !reflect.DeepEqual(header, want.Header) {
					t.Errorf("response %d %q %s length %d close %v te %v header %v\nwant     %d %q %s length %d close %v te %v header %v",
						resp.StatusCode, resp.Status, resp.Proto, resp.ContentLength, resp.Close, resp.TransferEncoding, header,
						want.StatusCode, want.Status, want.Proto, want.ContentLength, want.Close, want.TransferEncoding, want.Header)
				}
				if resp.Request != nil {
					t.Errorf("resp.Request is %v, want nil", resp.Request)
				}
				body, err := io.ReadAll(resp.Body)
				if err != nil || string(body) != wantBody {
					t.Errorf("body %q (%v), want %q", body, err, wantBody)
				}
				if v.wrap && !pc.closed.Load() {
					t.Error("the connection is open after the body ended")
				}
				if s := tr.Stats(); s.Idle != 0 || s.Dials != 0 {
					tr.CloseIdleConnections()
					t.Fatalf("stats %+v: an adopted connection is neither dialed nor kept", s)
				}
				u.waitClosedByClient(t)
			})
		}
	}
}

// TestAdoptNoBodyClosesAtOnce: an answer without a body is settled, and
// its connection closed, before Adopt returns.
func TestAdoptNoBodyClosesAtOnce(t *testing.T) {
	checkNoLeak(t)
	tr := newTransport(t, Config{})
	for _, answer := range []string{
		"HTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: keep-alive\r\n\r\n",
	} {
		u := newAdoptUpstream(t, writeAnswer(answer))
		pc := adoptConn(t, u, adoptRequest, 0)
		resp, err := tr.Adopt(adoptCtx(t), pc, adoptHead(u, "GET", adoptRequest), SendOptions{})
		if err != nil {
			t.Fatalf("%q: %v", answer, err)
		}
		if resp.Body != http.NoBody {
			t.Errorf("%q: body %T, want http.NoBody", answer, resp.Body)
		}
		if !pc.closed.Load() {
			t.Errorf("%q: the connection is open after Adopt returned an answer without a body", answer)
		}
		u.waitClosedByClient(t)
	}
}

// TestAdoptBodyClosedEarly: closing the body before its end closes the
// connection.
func TestAdoptBodyClosedEarly(t *testing.T) {
	checkNoLeak(t)
	tr := newTransport(t, Config{})
	u := newAdoptUpstream(t, writeAnswer("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello"))
	pc := adoptConn(t, u, adoptRequest, 0)
	resp, err := tr.Adopt(adoptCtx(t), pc, adoptHead(u, "GET", adoptRequest), SendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !pc.closed.Load() {
		t.Error("the connection is open after the body was closed")
	}
	u.waitClosedByClient(t)
}

// adoptFails calls Adopt and checks that it fails with an error matching
// target (when not nil) within limit, and that the connection is closed
// (and seen closed by the upstream, when it keeps its end open).
func adoptFails(t *testing.T, ctx context.Context, tr *Transport, u *adoptUpstream, pc *prefixConn, h Head, opts SendOptions, target error, limit time.Duration, upstreamOpen bool) error {
	t.Helper()
	start := time.Now()
	resp, err := tr.Adopt(ctx, pc, h, opts)
	took := time.Since(start)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("Adopt returned %d, want an error", resp.StatusCode)
	}
	if resp != nil {
		t.Errorf("Adopt returned a response with its error %v", err)
	}
	if target != nil && !errors.Is(err, target) {
		t.Errorf("err = %v, want one matching %v", err, target)
	}
	if took > limit {
		t.Errorf("Adopt took %v to fail, want at most %v", took, limit)
	}
	if !pc.closed.Load() {
		t.Errorf("the connection is open after Adopt failed with %v", err)
		return err
	}
	if upstreamOpen {
		u.waitClosedByClient(t)
	}
	return err
}

// TestAdoptHeadTimeout: with HeadTimeout set and opts.Now in the past, an
// answer that does not come fails at once with ErrHeadTimeout, bytes of
// it put back in front or not; with Now zero, after the timeout.
//
// An answer that stalls within a line (say after "HTTP/1.1 2") times out
// too: bufio.Reader.ReadLine hands the partial line out and drops the
// timeout, and http.ReadResponse finds the line malformed, but the error
// is the timeout the connection's read met.
func TestAdoptHeadTimeout(t *testing.T) {
	checkNoLeak(t)
	tr := newTransport(t, Config{})
	for _, tc := range []struct {
		name    string
		partial string // what the upstream sends before it stalls
		k       int    // how much of it the caller read
		opts    SendOptions
		min     time.Duration
		max     time.Duration
	}{
		{"now in the past", "", 0, SendOptions{HeadTimeout: time.Second, Now: time.Now().Add(-time.Hour)}, 0, time.Second},
		{"now in the past, part put back", "HTTP/1.1 200 OK\r\n", 17, SendOptions{HeadTimeout: time.Second, Now: time.Now().Add(-time.Hour)}, 0, time.Second},
		{"now in the past, part put back, more sent", "HTTP/1.1 200 OK\r\nX-A: 1\r\n", 17, SendOptions{HeadTimeout: time.Second, Now: time.Now().Add(-time.Hour)}, 0, time.Second},
		{"part of the head read, then the timeout", "HTTP/1.1 200 OK\r\nX-A: 1\r\n", 5, SendOptions{HeadTimeout: 200 * time.Millisecond}, 200 * time.Millisecond, 3 * time.Second},
		{"now zero", "", 0, SendOptions{HeadTimeout: 200 * time.Millisecond}, 200 * time.Millisecond, 3 * time.Second},
		{"now recent, a 1xx came", "HTTP/1.1 103 Early Hints\r\n\r\n", 0, SendOptions{HeadTimeout: 300 * time.Millisecond}, 150 * time.Millisecond, 3 * time.Second},
		{"stalled within the status line", "HTTP/1.1 2", 0, SendOptions{HeadTimeout: 200 * time.Millisecond}, 200 * time.Millisecond, 3 * time.Second},
		{"stalled within a field", "HTTP/1.1 200 OK\r\nContent-Le", 0, SendOptions{HeadTimeout: 200 * time.Millisecond}, 200 * time.Millisecond, 3 * time.Second},
		{"now in the past, a partial line put back", "HTTP/1.1 2", 10, SendOptions{HeadTimeout: time.Second, Now: time.Now().Add(-time.Hour)}, 0, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newAdoptUpstream(t, writeAnswer(tc.partial))
			pc := adoptConn(t, u, adoptRequest, tc.k)
			if tc.name == "now recent, a 1xx came" {
				// The request left 100 ms ago: the head is due in 200.
				tc.opts.Now = time.Now().Add(-100 * time.Millisecond)
			}
			start := time.Now()
			err := adoptFails(t, adoptCtx(t), tr, u, pc, adoptHead(u, "GET", adoptRequest), tc.opts, ErrHeadTimeout, tc.max, true)
			if took := time.Since(start); took < tc.min {
				t.Errorf("Adopt failed after %v, before the head timeout %v: %v", took, tc.min, err)
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("err = %v, want one matching context.DeadlineExceeded", err)
			}
		})
	}
}

// TestAdoptUpstreamCloses: an upstream that closes before the head is
// whole fails Adopt; one that closes in the middle of the body fails the
// body's read; a body that ends with the connection ends without error.
// The connection is closed each time.
func TestAdoptUpstreamCloses(t *testing.T) {
	checkNoLeak(t)
	tr := newTransport(t, Config{})
	for _, tc := range []struct {
		name, answer string
		k            int
	}{
		{"nothing", "", 0},
		{"part of the status line", "HTTP/1.1 2", 0},
		{"part of the head", "HTTP/1.1 200 OK\r\nContent-Le", 0},
		{"part of the head, read", "HTTP/1.1 200 OK\r\nContent-Le", 5},
		{"part of a 1xx", "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newAdoptUpstream(t, closingAnswer(tc.answer))
			pc := adoptConn(t, u, adoptRequest, tc.k)
			err := adoptFails(t, adoptCtx(t), tr, u, pc, adoptHead(u, "GET", adoptRequest), SendOptions{HeadTimeout: 5 * time.Second}, nil, 3*time.Second, false)
			if errors.Is(err, ErrHeadTimeout) {
				t.Errorf("err = %v: the upstream closed, it did not time out", err)
			}
		})
	}
	for _, tc := range []struct {
		name, answer, body string
		bodyErr            error
	}{
		{"body cut short", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", "short", io.ErrUnexpectedEOF},
		{"chunked body cut short", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", "hello", io.ErrUnexpectedEOF},
		{"body to the end", "HTTP/1.1 200 OK\r\nX-A: 1\r\n\r\nuntil the end", "until the end", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newAdoptUpstream(t, closingAnswer(tc.answer))
			pc := adoptConn(t, u, adoptRequest, 0)
			resp, err := tr.Adopt(adoptCtx(t), pc, adoptHead(u, "GET", adoptRequest), SendOptions{HeadTimeout: 5 * time.Second})
			if err != nil {
				t.Fatalf("Adopt: %v", err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if string(body) != tc.body || !errors.Is(err, tc.bodyErr) || (tc.bodyErr == nil) != (err == nil) {
				t.Errorf("body %q, %v; want %q, %v", body, err, tc.body, tc.bodyErr)
			}
			if !pc.closed.Load() {
				t.Error("the connection is open after the body ended")
			}
		})
	}
}

// TestAdoptHeadTooLarge: a response head, or 1xx heads before the final
// one, longer than MaxResponseHeaderBytes fail Adopt with ErrHeadTooLarge,
// the bytes put back in front counting as the connection's; a head
// within the bound is read.
func TestAdoptHeadTooLarge(t *testing.T) {
	checkNoLeak(t)
	tr := newTransport(t, Config{MaxResponseHeaderBytes: 1024})
	big := "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("b", 2000) + "\r\nContent-Length: 2\r\n\r\nok"
	hints := strings.Repeat("HTTP/1.1 103 Early Hints\r\nLink: </"+strings.Repeat("l", 100)+">\r\n\r\n", 10) + "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	for _, tc := range []struct {
		name, answer string
		k            int
	}{
		{"final head", big, 0},
		{"final head, part read", big, 500},
		{"final head, all read", big, len(big)},
		{"1xx heads", hints, 0},
		{"1xx heads, all read", hints, len(hints)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newAdoptUpstream(t, writeAnswer(tc.answer))
			pc := adoptConn(t, u, adoptRequest, tc.k)
			adoptFails(t, adoptCtx(t), tr, u, pc, adoptHead(u, "GET", adoptRequest), SendOptions{HeadTimeout: 5 * time.Second}, ErrHeadTooLarge, 3*time.Second, true)
		})
	}
	t.Run("within the bound", func(t *testing.T) {
		answer := "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("b", 500) + "\r\nContent-Length: 2000\r\n\r\n" + strings.Repeat("o", 2000)
		u := newAdoptUpstream(t, writeAnswer(answer))
		pc := adoptConn(t, u, adoptRequest, 100)
		resp, err := tr.Adopt(adoptCtx(t), pc, adoptHead(u, "GET", adoptRequest), SendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, resp); got != strings.Repeat("o", 2000) {
			t.Errorf("body of %d bytes, want 2000", len(got))
		}
		u.waitClosedByClient(t)
	})
}

// TestAdoptUnexpectedSwitch: a 101 to a request that asked for no upgrade
// fails with ErrUnexpectedSwitch.
func TestAdoptUnexpectedSwitch(t *testing.T) {
	checkNoLeak(t)
	tr := newTransport(t, Config{})
	for _, k := range []int{0, 20} {
		u := newAdoptUpstream(t, writeAnswer("HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\nswitched bytes"))
		pc := adoptConn(t, u, adoptRequest, k)
		adoptFails(t, adoptCtx(t), tr, u, pc, adoptHead(u, "GET", adoptRequest), SendOptions{}, ErrUnexpectedSwitch, 3*time.Second, true)
	}
}

// TestAdoptGot1xxError: an error of Got1xx fails Adopt with it.
func TestAdoptGot1xxError(t *testing.T) {
	checkNoLeak(t)
	tr := newTransport(t, Config{})
	stop := errors.New("stop at the hint")
	u := newAdoptUpstream(t, writeAnswer("HTTP/1.1 103 Early Hints\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
	pc := adoptConn(t, u, adoptRequest, 0)
	opts := SendOptions{Got1xx: func(int, http.Header) error { return stop }}
	adoptFails(t, adoptCtx(t), tr, u, pc, adoptHead(u, "GET", adoptRequest), opts, stop, 3*time.Second, true)
}

// TestAdoptCanceled: a context that ends while Adopt waits for the head
// ends the wait at once, with its cause; one that ended before fails it
// too.
func TestAdoptCanceled(t *testing.T) {
	checkNoLeak(t)
	tr := newTransport(t, Config{})
	gone := errors.New("the client went away")
	for _, tc := range []struct {
		name    string
		partial string
		k       int
		before  bool
		opts    SendOptions
	}{
		{"during the wait", "", 0, false, SendOptions{}},
		{"during the wait, with a head timeout", "", 0, false, SendOptions{HeadTimeout: 5 * time.Second}},
		{"during the wait, part of the head read", "HTTP/1.1 200 OK\r\n", 5, false, SendOptions{}},
		{"before", "", 0, true, SendOptions{}},
		{"before, with a head timeout", "", 0, true, SendOptions{HeadTimeout: 5 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newAdoptUpstream(t, writeAnswer(tc.partial))
			pc := adoptConn(t, u, adoptRequest, tc.k)
			ctx, cancel := context.WithCancelCause(adoptCtx(t))
			defer cancel(nil)
			if tc.before {
				cancel(gone)
			} else {
				time.AfterFunc(50*time.Millisecond, func() { cancel(gone) })
			}
			adoptFails(t, ctx, tr, u, pc, adoptHead(u, "GET", adoptRequest), tc.opts, gone, 2*time.Second, true)
		})
	}
}

// TestAdoptInvalidHead: a Head that fails SendHead's checks fails Adopt
// with ErrInvalidRequest, and the connection is closed unread.
func TestAdoptInvalidHead(t *testing.T) {
	checkNoLeak(t)
	tr := newTransport(t, Config{})
	for _, tc := range []struct {
		name string
		h    func(u *adoptUpstream) Head
	}{
		{"bad method", func(u *adoptUpstream) Head { return adoptHead(u, "G T", "G T /x HTTP/1.1\r\nHost: a\r\n\r\n") }},
		{"empty method", func(u *adoptUpstream) Head { return adoptHead(u, "", adoptRequest) }},
		{"method not the request line's", func(u *adoptUpstream) Head { return adoptHead(u, "POST", adoptRequest) }},
		{"connect", func(u *adoptUpstream) Head {
			return adoptHead(u, "CONNECT", "CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n")
		}},
		{"no address", func(u *adoptUpstream) Head { return Head{Method: "GET", Bytes: []byte(adoptRequest)} }},
		{"bare lf", func(u *adoptUpstream) Head { return adoptHead(u, "GET", "GET /x HTTP/1.1\nHost: a\n\n") }},
		{"http/1.0", func(u *adoptUpstream) Head { return adoptHead(u, "GET", "GET /x HTTP/1.0\r\nHost: a\r\n\r\n") }},
		{"bytes after the head", func(u *adoptUpstream) Head { return adoptHead(u, "GET", adoptRequest+"x") }},
		{"no empty line", func(u *adoptUpstream) Head { return adoptHead(u, "GET", "GET /x HTTP/1.1\r\nHost: a\r\n") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newAdoptUpstream(t, writeAnswer("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
			pc := adoptConn(t, u, adoptRequest, 3)
			adoptFails(t, adoptCtx(t), tr, u, pc, tc.h(u), SendOptions{}, ErrInvalidRequest, time.Second, true)
		})
	}
}
