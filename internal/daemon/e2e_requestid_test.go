package daemon_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"testing"
	"time"
)

// newID is the form of an id the daemon makes: nginx's $request_id.
var newID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// idExchange is one request of the request-id tests: who sends it, the
// id field it carries ("" for none), and whether the upstream must see
// that same id (else a new one).
type idExchange struct {
	from, sent string
	kept       bool
}

// sendOnOneConn sends GET /headers for each exchange of xs from its
// address, the exchanges from one address on one keep-alive connection
// with heads that repeat byte for byte when the ids do, and returns the
// id the upstream saw for each, in order, read from the field header.
func sendOnOneConn(t *testing.T, addr, header string, xs []idExchange) []string {
	t.Helper()
	ids := make([]string, len(xs))
	conns := map[string]*bufio.ReadWriter{}
	for i, x := range xs {
		rw := conns[x.from]
		if rw == nil {
			c := dialFrom(t, x.from, addr)
			_ = c.SetDeadline(time.Now().Add(waitLimit))
			rw = bufio.NewReadWriter(bufio.NewReader(c), bufio.NewWriter(c))
			conns[x.from] = rw
		}
		fmt.Fprintf(rw, "GET /headers HTTP/1.1\r\nHost: app.test\r\n")
		if x.sent != "" {
			fmt.Fprintf(rw, "%s: %s\r\n", header, x.sent)
		}
		fmt.Fprintf(rw, "\r\n")
		if err := rw.Flush(); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(rw.Reader, nil)
		if err != nil {
			t.Fatalf("exchange %d: %v", i, err)
		}
		var seen map[string]string
		err = json.NewDecoder(resp.Body).Decode(&seen)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("exchange %d: %d %v", i, resp.StatusCode, err)
		}
		ids[i] = seen[header]
	}
	return ids
}

// TestRequestID gives every request an id on the default settings: a
// client's own X-Request-Id is replaced, a trusted proxy's kept when well
// formed; each id reaches the upstream once, in X-Request-Id, and its
// access line as request_id; a keep-alive connection sending the same
// head again (whose upstream head the event loop keeps) still gets a new
// id for each request; a request no route takes gets one too.
func TestRequestID(t *testing.T) { bothServers(t, testRequestID) }

func testRequestID(t *testing.T) {
	srv, _, stop := startLoggedFields(t, `
log: {format: json, level: info}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    trusted_proxies: [127.0.0.5/32]
    request_id: {}
    routes:
      - path_prefix: /headers
        upstreams: ["{{backend}}"]
`)
	xs := []idExchange{
		{from: "127.0.0.2"},
		{from: "127.0.0.2"},
		{from: "127.0.0.2"},
		{from: "127.0.0.2", sent: "client-chosen"},
		{from: "127.0.0.2", sent: "client-chosen"},
		{from: "127.0.0.5", sent: "lb-4f2a-01", kept: true},
		{from: "127.0.0.5", sent: "lb-4f2a-01", kept: true},
		{from: "127.0.0.5", sent: `bad"quote`},
		{from: "127.0.0.5"},
	}
	addr := srv.Addr("web").String()
	ids := sendOnOneConn(t, addr, "X-Request-Id", xs)
	checkIDs(t, xs, ids)
	if st, _, _ := get(t, clientFrom("127.0.0.3"), "http://"+addr+"/elsewhere"); st != http.StatusNotFound {
		t.Fatalf("a request no route takes: %d, want 404", st)
	}
	logged := map[string]int{}
	var notFound string
	for _, l := range stop() {
		id, _ := l.fields["request_id"].(string)
		if l.fields["path"] == "/elsewhere" {
			notFound = id
			continue
		}
		logged[id]++
	}
	for i, id := range ids {
		want := 1
		if xs[i].kept {
			want = 2 // both requests of the trusted proxy carried it
		}
		if logged[id] != want {
			t.Errorf("id %q of exchange %d: in %d access lines, want %d (lines: %v)", id, i, logged[id], want, logged)
		}
	}
	if !newID.MatchString(notFound) {
		t.Errorf("the 404's access line: request_id %q, want a new id", notFound)
	}
}

// checkIDs checks that the upstream saw, for each exchange of xs, the id
// it sent when kept, and otherwise a new id of its own.
func checkIDs(t *testing.T, xs []idExchange, ids []string) {
	t.Helper()
	seen := map[string]int{}
	for i, x := range xs {
		id := ids[i]
		switch {
		case x.kept && id != x.sent:
			t.Errorf("exchange %d from %s: upstream saw id %q, want the one sent, %q", i, x.from, id, x.sent)
		case !x.kept && !newID.MatchString(id):
			t.Errorf("exchange %d from %s (sent %q): upstream saw id %q, want a new one", i, x.from, x.sent, id)
		case !x.kept:
			if j, dup := seen[id]; dup {
				t.Errorf("exchanges %d and %d: the same new id %q", j, i, id)
			}
			seen[id] = i
		}
	}
}

// TestRequestIDAcceptAny keeps every client's well-formed id in the
// configured field, X-Correlation-Id, and names the others.
func TestRequestIDAcceptAny(t *testing.T) {
	srv, _, stop := startLoggedFields(t, `
log: {format: json, level: info}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    request_id: {header: x-correlation-id, accept: any}
    routes:
      - upstreams: ["{{backend}}"]
`)
	xs := []idExchange{
		{from: "127.0.0.2", sent: "corr-1", kept: true},
		{from: "127.0.0.2"},
		{from: "127.0.0.3", sent: "0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789"},
	}
	ids := sendOnOneConn(t, srv.Addr("web").String(), "X-Correlation-Id", xs)
	checkIDs(t, xs, ids)
	// Lines of different connections may be written in either order.
	logged := map[any]int{}
	for _, l := range stop() {
		logged[l.fields["request_id"]]++
	}
	for i, id := range ids {
		if logged[id] != 1 {
			t.Errorf("id %q of exchange %d: in %d access lines, want 1 (lines: %v)", id, i, logged[id], logged)
		}
	}
	if len(logged) != len(ids) {
		t.Errorf("access lines name %d ids, want %d: %v", len(logged), len(ids), logged)
	}
}
