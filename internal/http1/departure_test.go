package http1

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// Where our server departs from net/http on purpose (issue 35), because RFC
// 9112 tells a server to refuse or to close where net/http goes on. The
// differential tests hold every other input to net/http's behaviour and
// these to the behaviour below, exactly: compareWithNetHTTP accepts a
// difference only when departureOf explains it and ours did precisely what
// the departure says.
//
// Given the same bytes (see docs/daemon.md, "What the daemon refuses"),
// nginx 1.22 answers both with 400; HAProxy 2.6 forwards both with the body
// read as chunked and closes the connection after the answer.
const (
	departNone = iota
	// An HTTP/1.0 request with a Transfer-Encoding field: net/http ignores
	// the field (golang/go#12785), frames the body by Content-Length or as
	// empty, and reads a chunked body as the next request. RFC 9112 §6.1:
	// a server that receives it must treat the framing as faulty. Ours
	// answers 400 and closes.
	departTEOnHTTP10
	// A request with both Transfer-Encoding and Content-Length: both
	// servers frame the body as chunked and drop Content-Length; RFC 9112
	// §6.3 ¶3 then requires the connection closed after the answer, which
	// net/http keeps open. Ours serves it with Close set and closes.
	departCLAndTE
)

// departureOf reports which departure, if any, the first request head of
// in makes. It looks only at what decides one: the request line's
// version and the names of the fields, as net/http's reader splits them
// (lines ending in LF, a CR before it dropped; lines starting with a space
// or tab continue the one before).
func departureOf(in []byte) int {
	end := len(in)
	for _, sep := range []string{"\r\n\r\n", "\n\n", "\n\r\n"} {
		if i := bytes.Index(in, []byte(sep)); i >= 0 && i < end {
			end = i
		}
	}
	if end == len(in) {
		return departNone // no whole head
	}
	lines := strings.Split(string(in[:end]), "\n")
	var te, cl bool
	for _, l := range lines[1:] {
		l = strings.TrimSuffix(l, "\r")
		if l == "" || l[0] == ' ' || l[0] == '\t' {
			continue
		}
		name, _, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		te = te || strings.EqualFold(name, "Transfer-Encoding")
		cl = cl || strings.EqualFold(name, "Content-Length")
	}
	line0 := strings.TrimSuffix(lines[0], "\r")
	switch {
	case te && strings.HasSuffix(line0, " HTTP/1.0"):
		return departTEOnHTTP10
	case te && cl:
		return departCLAndTE
	}
	return departNone
}

// plain400 is the whole output of a connection whose first head our
// server refuses with a bare 400.
const plain400 = "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request"

// compareWithNetHTTP is compare, but for the departures from net/http's
// behaviour that in makes on purpose (departureOf): ours must then have
// done exactly what the departure says, given what net/http did.
func compareWithNetHTTP(in []byte, std, ours outcome) string {
	d := compare(std, ours)
	if d == "" {
		return ""
	}
	switch departureOf(in) {
	case departTEOnHTTP10:
		if ours.output == plain400 && len(ours.seen) == 0 {
			return ""
		}
		return "a Transfer-Encoding on HTTP/1.0 must be refused with a bare 400 and the connection closed\n" + d
	case departCLAndTE:
		want := outcome{output: closedAfterFirst(std.output)}
		if len(std.seen) > 0 {
			first := std.seen[0]
			first.Close = true
			want.seen = []seen{first}
		}
		if compare(want, ours) == "" {
			return ""
		}
		return fmt.Sprintf("Content-Length with Transfer-Encoding must be served as net/http does, then the connection closed:\n%s\nnet/http:\n%s", compare(want, ours), d)
	}
	return d
}

// closedAfterFirst returns output cut after the first answer of the
// recorder ("ok"), with "Connection: close" added to its head: net/http's
// answer to a request after which the connection closes.
func closedAfterFirst(output string) string {
	i := strings.Index(output, "\r\n\r\nok")
	if i < 0 {
		return output
	}
	head := output[:i]
	if strings.Contains(head[strings.LastIndex(head, "HTTP/1."):], "\r\nConnection: close") {
		return output[:i+len("\r\n\r\nok")]
	}
	return head + "\r\nConnection: close\r\n\r\nok"
}

// TestDepartures holds each departure from net/http on the hand-written
// inputs that make it: what net/http does (so that a Go release that
// changes it is noticed) and what ours does, over loopback TCP.
func TestDepartures(t *testing.T) {
	rec := &recorder{}
	addr := serve(t, &Server{Handler: rec, Logger: discardSlog})
	std := newStdServer(harnessOpts{})
	defer std.close()
	cases := []struct {
		name      string
		raw       string
		depart    int
		stdWant   string // net/http's statuses
		oursWant  string // ours
		oursSeen  int    // requests our handler saw
		oursClose bool   // ours closes after its last answer, with "Connection: close" on it
	}{
		{"te chunked on http/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n5\r\nhello\r\n0\r\n\r\n", departTEOnHTTP10, "200 400", "400", 0, true},
		{"te chunked on http/1.0 with cl", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\nhello", departTEOnHTTP10, "200", "400", 0, true},
		{"te gzip on http/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: gzip\r\nContent-Length: 2\r\n\r\nhi", departTEOnHTTP10, "200", "400", 0, true},
		{"te lowercase on http/1.0", "POST / HTTP/1.0\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n", departTEOnHTTP10, "200", "400", 0, true},
		{"cl then te, then a pipelined get", "POST / HTTP/1.1\r\n" + h + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nGET /2 HTTP/1.1\r\n" + h + "\r\n", departCLAndTE, "200 200", "200", 1, true},
		{"te then cl", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\nContent-Length: 100\r\n\r\n3\r\nabc\r\n0\r\n\r\n", departCLAndTE, "200", "200", 1, true},
		{"te and cl zero", "POST / HTTP/1.1\r\n" + h + "Content-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /2 HTTP/1.1\r\n" + h + "\r\n", departCLAndTE, "200 200", "200", 1, true},
		{"te on http/1.1 alone is no departure", "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /2 HTTP/1.1\r\n" + h + "\r\n", departNone, "200 200", "200 200", 2, false},
		{"cl on http/1.0 alone is no departure", "POST / HTTP/1.0\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nhiGET /2 HTTP/1.0\r\n\r\n", departNone, "200 200", "200 200", 2, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := departureOf([]byte(tc.raw)); got != tc.depart {
				t.Fatalf("departureOf = %d, want %d", got, tc.depart)
			}
			a := std.serve([]byte(tc.raw), 0)
			if got := statusesOf(a.output); got != tc.stdWant {
				t.Errorf("net/http answered %q, want %q: Go changed, update the departure", got, tc.stdWant)
			}
			c := dial(t, addr)
			if _, err := c.Write([]byte(tc.raw)); err != nil {
				t.Fatal(err)
			}
			if !tc.oursClose {
				_ = c.(*net.TCPConn).CloseWrite()
			}
			// Without a half-close, the server must close by itself.
			out, _ := waitClosed(t, c, 5*time.Second)
			o := outcome{seen: rec.take(), output: maskDate([]byte(out))}
			if got := statusesOf(o.output); got != tc.oursWant {
				t.Errorf("ours answered %q, want %q: %q", got, tc.oursWant, o.output)
			}
			if len(o.seen) != tc.oursSeen {
				t.Errorf("our handler saw %d requests, want %d", len(o.seen), tc.oursSeen)
			}
			if closes := strings.Contains(o.output, "\r\nConnection: close\r\n"); closes != tc.oursClose {
				t.Errorf("ours says Connection: close: %v, want %v: %q", closes, tc.oursClose, o.output)
			}
			if d := compareWithNetHTTP([]byte(tc.raw), a, ours(t, tc.raw)); d != "" {
				t.Errorf("in process: %s", d)
			}
		})
	}
}

// ours serves raw in process with our server, as the differential tests do.
func ours(t *testing.T, raw string) outcome {
	t.Helper()
	return newOurServer(harnessOpts{}).serve([]byte(raw), 0)
}
