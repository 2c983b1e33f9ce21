package upstream

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// FuzzReuse drives the Transport's response reader and its reuse of
// connections with a script of events read from the fuzz input: requests
// of every method, and an upstream that answers with valid responses of
// every framing, arbitrary bytes, copies of earlier responses (the desync
// attack), closes, resets and 408s, at every moment: before the client read
// what came before, after it settled, while a connection sits idle, while a
// response body is held unread. The connections are in memory (memConn),
// with immediate delivery and the same idle check verdicts as a socket, so
// that "arrived before the next request took the connection" is exact.
//
// It asserts, for every run:
//   - no byte the upstream wrote before a request arrived is read after it
//     (checked on every Read), so a response is made of bytes written in
//     answer to its own request, and a client whose response is tagged got
//     a tag written for it;
//   - a connection carries a new request only if the bytes of its previous
//     exchange were exactly one reusable response and nothing arrived
//     since (no byte, close or reset);
//   - a request that is not replayable reaches the upstream at most once, a
//     replayable one at most twice;
//   - a request answered by exactly one valid response, and not canceled,
//     gets that response;
//   - no connection is left open once the idle ones are closed.
func FuzzReuse(f *testing.F) {
	for _, seed := range reuseSeeds {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, script []byte) {
		runReuseScript(t, script, false)
	})
}

// FuzzSendHead is FuzzReuse with every request sent by SendHead, its head
// written out as a byte-level proxy would give it: the same upstream
// scripts, arbitrary response bytes among them, and the same invariants
// (no panic; a connection carries a new request only after exactly one
// reusable response; a request that is not replayable reaches the upstream
// at most once, the replayability decided from the head's bytes; a
// request answered by one valid response gets it; no connection left
// open). Its seeds are FuzzReuse's, and those in testdata/fuzz/FuzzSendHead.
func FuzzSendHead(f *testing.F) {
	for _, seed := range reuseSeeds {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, script []byte) {
		runReuseScript(t, script, true)
	})
}

// Script opcodes, for the seeds; an op byte is taken modulo opCount.
const (
	opFlight     = 0 // method, hold, action count, actions
	opIdle       = 3 // conn index, idle action
	opFinish     = 4 // let the oldest held flight read its body
	opDialFail   = 5 // refuse the next dial
	opExpire     = 6 // move the pool's clock past the idle timeout
	opCloseIdle  = 7 // Transport.CloseIdleConnections
	opCount      = 8
	maxOps       = 48
	maxFlights   = 16
	actionCount  = 10
	variantCount = 10
)

// Actions of the upstream during an exchange, taken modulo actionCount.
const (
	actValid       = 0 // variant
	actGarbage     = 1 // length, bytes
	actReplay      = 2 // index of an earlier valid response
	actClose       = 3
	actReset       = 4
	actSettle      = 5 // wait until the client read everything and waits, or finished
	actCancel      = 6 // cancel the request's context
	actSplit       = 7 // variant, cut: a valid response in two writes, settled between
	actTwoInOne    = 8 // variant, index: a valid response and a copy of another in one write
	actValidSettle = 9 // variant
)

// Response variants, taken modulo variantCount.
const (
	varLength    = 0 // 200, Content-Length
	varChunked   = 1
	varUntilEOF  = 2 // no length: the body ends with the connection, closed after it
	varClose     = 3 // Connection: close, then closed
	varHTTP10    = 4
	varNoContent = 5 // 204
	varNotMod    = 6 // 304 with a Content-Length, and no body
	varHints     = 7 // 103 Early Hints, then 200
	varEmpty     = 8 // 200, Content-Length: 0
	var408       = 9 // 408, Connection: close, then closed
)

var fuzzMethods = []struct {
	method string
	key    bool // sends an Idempotency-Key
}{{"GET", false}, {"HEAD", false}, {"POST", false}, {"DELETE", false}, {"OPTIONS", false}, {"POST", true}}

// fuzzScript reads the fuzz input; past its end it reads zeros.
type fuzzScript struct {
	b []byte
	i int
}

func (s *fuzzScript) next() int {
	if s.i >= len(s.b) {
		return 0
	}
	s.i++
	return int(s.b[s.i-1])
}

func (s *fuzzScript) bytes(n int) []byte {
	n = min(n, len(s.b)-s.i)
	b := s.b[s.i : s.i+n]
	s.i += n
	return b
}

// flight is one request, made on its own goroutine.
type flight struct {
	id         int
	method     string
	key        bool
	replayable bool
	hold       bool // read the body only when released
	cancel     context.CancelFunc
	release    chan struct{}

	// Guarded by memNet.mu.
	attempts int      // times the upstream received it
	conn     *memConn // where it was last received
	reused   bool     // conn had carried a request before
	held     bool     // has its head, waits for release
	released bool
	done     bool
	status   int
	tag      string
	body     string
	err      error
	final    []memWrite      // the events of its last window when it finished, or its connection went to another request
	frozen   bool            // final is set
	tags     map[string]bool // the tags of the responses written in its windows
	garbage  bool            // arbitrary bytes were written in one of its windows
	canceled bool            // its context was canceled
}

// reuseRun is one run of a script.
type reuseRun struct {
	t        *testing.T
	net      *memNet
	tr       *Transport
	clock    atomic.Int64 // added to the pool's clock
	current  *flight      // the flight not held, if any
	flights  []*flight
	held     []*flight
	writes   [][]byte // every valid response written, for replays
	tagOf    []string
	nextTag  int
	stuck    bool
	received map[int]int
	viaHead  bool // requests are sent by SendHead, not RoundTrip
}

func runReuseScript(t *testing.T, script []byte, viaHead bool) {
	r := &reuseRun{t: t, net: newMemNet(), received: map[int]int{}, viaHead: viaHead}
	tr, err := New(Config{
		DialContext:            r.net.dial,
		MaxIdleConnsPerHost:    2,
		IdleConnTimeout:        time.Hour,
		MaxResponseHeaderBytes: 1024,
	})
	if err != nil {
		t.Fatal(err)
	}
	tr.idle.now = func() time.Time { return time.Now().Add(time.Duration(r.clock.Load())) }
	r.tr = tr
	watchdog := time.AfterFunc(20*time.Second, func() {
		r.net.mu.Lock()
		r.stuck = true
		r.net.cond.Broadcast()
		r.net.mu.Unlock()
	})
	defer watchdog.Stop()

	s := &fuzzScript{b: script}
	for ops := 0; ops < maxOps && s.i < len(s.b); ops++ {
		switch op := s.next() % opCount; {
		case op < opIdle:
			if len(r.flights) < maxFlights {
				r.flight(s)
			}
		case op == opIdle:
			r.idleAction(s)
		case op == opFinish:
			r.finishOldest()
		case op == opDialFail:
			r.net.mu.Lock()
			r.net.dialFails = min(r.net.dialFails+1, 2)
			r.net.mu.Unlock()
		case op == opExpire:
			r.clock.Add(int64(2 * time.Hour))
		case op == opCloseIdle:
			r.tr.CloseIdleConnections()
		}
	}
	for len(r.held) > 0 {
		r.finishOldest()
	}
	r.tr.CloseIdleConnections()
	r.check()
}

// flight makes one request and scripts the upstream's side of it.
func (r *reuseRun) flight(s *fuzzScript) {
	m := fuzzMethods[s.next()%len(fuzzMethods)]
	f := &flight{
		id: len(r.flights), method: m.method, key: m.key, hold: s.next()&1 == 1,
		release: make(chan struct{}), tags: map[string]bool{},
	}
	switch {
	case m.key, m.method == "GET", m.method == "HEAD", m.method == "OPTIONS":
		f.replayable = true
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	r.flights = append(r.flights, f)
	nActions := s.next() % 5

	r.net.mu.Lock()
	defer r.net.mu.Unlock()
	r.current = f
	go r.fly(ctx, f)
	r.waitFor(func() bool { return f.done || f.attempts > 0 })
	for range nActions {
		if f.attempts == 0 {
			break // refused before any request left
		}
		r.action(f, s)
	}
	r.quiesce(f)
	r.current = nil
	if f.held && !f.released {
		r.held = append(r.held, f)
	}
}

// fly sends f's request and reads its response, on its own goroutine.
func (r *reuseRun) fly(ctx context.Context, f *flight) {
	defer f.cancel()
	req, err := http.NewRequestWithContext(ctx, f.method, "http://up.test/r/"+strconv.Itoa(f.id), nil)
	if err != nil {
		panic(err)
	}
	req.Header.Set("X-Req", strconv.Itoa(f.id))
	if f.key {
		req.Header.Set("Idempotency-Key", "k"+strconv.Itoa(f.id))
	}
	var status int
	var tag, body string
	var resp *http.Response
	if r.viaHead {
		resp, err = sendAsHead(ctx, r.tr, req, SendOptions{})
		if err == nil && resp.Request != nil {
			r.net.mu.Lock()
			r.net.violate("flight %d: SendHead's response has a Request", f.id)
			r.net.mu.Unlock()
		}
	} else {
		resp, err = r.tr.RoundTrip(req)
	}
	if err == nil {
		status, tag = resp.StatusCode, resp.Header.Get("X-Tag")
		if f.hold {
			r.net.mu.Lock()
			f.held = true
			r.net.cond.Broadcast()
			r.net.mu.Unlock()
			<-f.release
		}
		var b []byte
		b, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
	}
	r.net.mu.Lock()
	defer r.net.mu.Unlock()
	f.status, f.tag, f.body, f.err, f.done = status, tag, body, err, true
	if f.conn != nil && !f.frozen {
		f.final, f.frozen = slices.Clone(f.conn.events), true
	}
	r.net.cond.Broadcast()
}

// waitFor waits until cond holds, receiving the requests that arrive
// meanwhile. The caller holds net.mu.
func (r *reuseRun) waitFor(cond func() bool) {
	for {
		for _, c := range r.net.conns {
			if len(c.inbox) > 0 {
				r.receive(c)
			}
		}
		if cond() {
			return
		}
		if r.stuck {
			r.t.Fatalf("the script made no progress for 20s: %s", r.describe())
		}
		r.net.cond.Wait()
	}
}

// settled reports whether f finished, holds its head, or waits for bytes
// on a connection that has none for it.
func (r *reuseRun) settled(f *flight) bool {
	if f.done || (f.held && !f.released) {
		return true
	}
	c := f.conn
	return c != nil && c.blocked && len(c.pending) == 0 && !c.fin && !c.reset && !c.clientClosed
}

// quiesce waits until f finished or holds its head; a client waiting for
// bytes that will not come gets its connection closed.
func (r *reuseRun) quiesce(f *flight) {
	for {
		r.waitFor(func() bool { return r.settled(f) })
		if f.done || (f.held && !f.released) {
			return
		}
		f.conn.events = append(f.conn.events, memWrite{kind: "autoclose"})
		f.conn.fin = true
		r.net.cond.Broadcast()
	}
}

// receive takes the request that arrived on c. The caller holds net.mu.
func (r *reuseRun) receive(c *memConn) {
	in := c.inbox
	c.inbox = nil
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(in)))
	if err != nil || !bytes.HasSuffix(in, []byte("\r\n\r\n")) || bytes.Count(in, []byte("\r\n\r\n")) != 1 {
		r.net.violate("conn %d: the upstream received %q, not one bodyless request (%v)", c.id, in, err)
		return
	}
	f := r.current
	if id, _ := strconv.Atoi(req.Header.Get("X-Req")); f == nil || id != f.id {
		r.net.violate("conn %d: request %q arrived while flight %v was the current one", c.id, req.Header.Get("X-Req"), f)
		return
	}
	if c.requests > 0 {
		if len(c.pending) > 0 || c.fin || c.reset {
			r.net.violate("conn %d: reused with %d unread bytes, closed %v, reset %v", c.id, len(c.pending), c.fin, c.reset)
		}
		if !framedOnce(c.window, c.lastMethod) {
			r.net.violate("conn %d: reused after an exchange whose bytes were not one reusable response: %q", c.id, c.window)
		}
	}
	if prev := c.owner; prev != nil && !prev.frozen {
		// A response without body let the connection go before its flight
		// finished: its window ends here.
		prev.final, prev.frozen = slices.Clone(c.events), true
	}
	c.owner = f
	f.reused = c.requests > 0
	c.requests++
	c.lastMethod = req.Method
	c.windowStart, c.window, c.events = c.wrote, nil, nil
	r.received[f.id]++
	f.attempts++
	f.conn = c
	if f.attempts > 1 {
		// A retry on a new connection: answered properly at once.
		r.writeValid(f, varLength)
	}
}

// writeValid writes a valid response of variant for f's request on f's
// connection, and closes the connection if the variant says so.
func (r *reuseRun) writeValid(f *flight, variant int) {
	b, closes, tag := r.validResponse(variant, f.method)
	f.tags[tag] = true
	f.conn.srvWrite(b, memWrite{kind: "valid", tag: tag, variant: variant})
	if closes {
		f.conn.fin = true
		r.net.cond.Broadcast()
	}
}

// validResponse returns a valid response of variant to a request with
// method, tagged with a new tag in its X-Tag header and body, whether the
// upstream closes the connection after it, and the tag.
func (r *reuseRun) validResponse(variant int, method string) ([]byte, bool, string) {
	tag := "t" + strconv.Itoa(r.nextTag)
	r.nextTag++
	body := "body-" + tag + "\n"
	withBody := method != "HEAD"
	var b []byte
	closes := false
	lengthHead := func(proto, status string) {
		b = fmt.Appendf(b, "%s %s\r\nX-Tag: %s\r\nContent-Length: %d\r\n", proto, status, tag, len(body))
	}
	switch variant {
	case varLength:
		lengthHead("HTTP/1.1", "200 OK")
	case varChunked:
		b = fmt.Appendf(b, "HTTP/1.1 200 OK\r\nX-Tag: %s\r\nTransfer-Encoding: chunked\r\n", tag)
		if withBody {
			body = fmt.Sprintf("5\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n", body[:5], len(body)-5, body[5:])
		}
	case varUntilEOF:
		b = fmt.Appendf(b, "HTTP/1.1 200 OK\r\nX-Tag: %s\r\n", tag)
		closes = true
	case varClose:
		lengthHead("HTTP/1.1", "200 OK")
		b = append(b, "Connection: close\r\n"...)
		closes = true
	case varHTTP10:
		lengthHead("HTTP/1.0", "200 OK")
	case varNoContent:
		b = fmt.Appendf(b, "HTTP/1.1 204 No Content\r\nX-Tag: %s\r\n", tag)
		withBody = false
	case varNotMod:
		b = fmt.Appendf(b, "HTTP/1.1 304 Not Modified\r\nX-Tag: %s\r\nContent-Length: 10\r\n", tag)
		withBody = false
	case varHints:
		b = append(b, "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"...)
		lengthHead("HTTP/1.1", "200 OK")
	case varEmpty:
		b = fmt.Appendf(b, "HTTP/1.1 200 OK\r\nX-Tag: %s\r\nContent-Length: 0\r\n", tag)
		withBody = false
	case var408:
		b = fmt.Appendf(b, "HTTP/1.1 408 Request Timeout\r\nX-Tag: %s\r\nConnection: close\r\nContent-Length: 0\r\n", tag)
		withBody, closes = false, true
	}
	b = append(b, "\r\n"...)
	if withBody {
		b = append(b, body...)
	}
	r.writes = append(r.writes, b)
	r.tagOf = append(r.tagOf, tag)
	return b, closes, tag
}

// expected returns the status and body a client gets for a response of
// variant with tag to a request with method.
func expected(variant int, method, tag string) (int, string) {
	status := map[int]int{varNoContent: 204, varNotMod: 304, var408: 408}[variant]
	if status == 0 {
		status = 200
	}
	if method == "HEAD" || status != 200 || variant == varEmpty {
		return status, ""
	}
	return status, "body-" + tag + "\n"
}

// action runs one upstream action of f's exchange. The caller holds
// net.mu.
func (r *reuseRun) action(f *flight, s *fuzzScript) {
	c := f.conn
	switch s.next() % actionCount {
	case actValid:
		r.writeValid(f, s.next()%variantCount)
	case actValidSettle:
		r.writeValid(f, s.next()%variantCount)
		r.waitFor(func() bool { return r.settled(f) })
	case actGarbage:
		r.garbage(c, s, f)
	case actReplay:
		r.replay(c, s.next(), f)
	case actClose:
		c.srvClose()
	case actReset:
		c.srvReset()
	case actSettle:
		r.waitFor(func() bool { return r.settled(f) })
	case actCancel:
		c.events = append(c.events, memWrite{kind: "cancel"})
		f.canceled = true
		f.cancel()
	case actSplit:
		variant, cut := s.next()%variantCount, s.next()
		b, closes, tag := r.validResponse(variant, f.method)
		f.tags[tag] = true
		cut = 1 + cut%len(b)
		c.srvWrite(b[:cut], memWrite{kind: "split", tag: tag, variant: variant})
		r.waitFor(func() bool { return r.settled(f) })
		if f.conn == c {
			c.srvWrite(b[cut:], memWrite{kind: "split-rest"})
			if closes {
				c.fin = true
				r.net.cond.Broadcast()
			}
		}
	case actTwoInOne:
		variant, i := s.next()%variantCount, s.next()
		b, closes, tag := r.validResponse(variant, f.method)
		f.tags[tag] = true
		if len(r.writes) > 0 {
			k := i % len(r.writes)
			b = append(slices.Clip(b), r.writes[k]...)
			f.tags[r.tagOf[k]] = true
		}
		c.srvWrite(b, memWrite{kind: "two-in-one", tag: tag})
		if closes {
			c.fin = true
			r.net.cond.Broadcast()
		}
	}
}

// garbage writes arbitrary bytes from the script on c.
func (r *reuseRun) garbage(c *memConn, s *fuzzScript, f *flight) {
	n := s.next()
	b := s.bytes(n)
	if n >= 200 { // long enough to overflow a head bound
		b = bytes.Repeat(append([]byte(nil), b...), 8)
	}
	if f != nil {
		f.garbage = true
	}
	c.srvWrite(b, memWrite{kind: "garbage"})
}

// replay writes a copy of an earlier valid response on c: the stray
// response of the desync attack.
func (r *reuseRun) replay(c *memConn, i int, f *flight) {
	if len(r.writes) == 0 {
		return
	}
	k := i % len(r.writes)
	if f != nil {
		f.tags[r.tagOf[k]] = true
	}
	c.srvWrite(r.writes[k], memWrite{kind: "replay", tag: r.tagOf[k]})
}

// idleAction acts on a connection between exchanges: on an idle one, one
// closed already, or one whose held flight has not read its body.
func (r *reuseRun) idleAction(s *fuzzScript) {
	r.net.mu.Lock()
	defer r.net.mu.Unlock()
	idx, kind := s.next(), s.next()%6
	if len(r.net.conns) == 0 {
		return
	}
	c := r.net.conns[idx%len(r.net.conns)]
	owner := c.owner // bytes on a connection its flight still reads are in its window
	if owner != nil && owner.done {
		owner = nil
	}
	switch kind {
	case 0:
		r.garbage(c, s, owner)
	case 1:
		r.replay(c, s.next(), owner)
	case 2:
		b, closes, tag := r.validResponse(s.next()%variantCount, "GET")
		if owner != nil {
			owner.tags[tag] = true
		}
		c.srvWrite(b, memWrite{kind: "valid-idle", tag: tag})
		if closes {
			c.fin = true
		}
	case 3:
		b, _, tag := r.validResponse(var408, "GET")
		if owner != nil {
			owner.tags[tag] = true
		}
		c.srvWrite(b, memWrite{kind: "408-idle", tag: tag})
		c.fin = true
	case 4:
		c.srvClose()
	case 5:
		c.srvReset()
	}
	r.net.cond.Broadcast()
}

// finishOldest lets the oldest held flight read its body, and waits for it.
func (r *reuseRun) finishOldest() {
	if len(r.held) == 0 {
		return
	}
	f := r.held[0]
	r.held = r.held[1:]
	r.net.mu.Lock()
	defer r.net.mu.Unlock()
	f.released = true
	close(f.release)
	r.quiesce(f)
}

// check asserts the invariants once every flight finished.
func (r *reuseRun) check() {
	t := r.t
	r.net.mu.Lock()
	defer r.net.mu.Unlock()
	if v := r.net.violation; v != "" {
		t.Fatalf("%s\n%s", v, r.describe())
	}
	for _, c := range r.net.conns {
		if !c.clientClosed {
			t.Fatalf("conn %d left open after CloseIdleConnections\n%s", c.id, r.describe())
		}
	}
	if s := r.tr.Stats(); s.Idle != 0 {
		t.Fatalf("%d idle connections after CloseIdleConnections", s.Idle)
	}
	for _, f := range r.flights {
		if n := r.received[f.id]; n > 2 || (n > 1 && !f.replayable) {
			t.Fatalf("flight %d (%s, replayable %v) reached the upstream %d times\n%s", f.id, f.method, f.replayable, n, r.describe())
		}
		if f.err == nil && f.tag != "" && !f.garbage && !f.tags[f.tag] {
			t.Fatalf("flight %d got the response tagged %s, written for another request\n%s", f.id, f.tag, r.describe())
		}
		r.checkPrecise(f)
	}
}

// checkPrecise asserts that a request whose last window held exactly one
// valid response got it.
func (r *reuseRun) checkPrecise(f *flight) {
	if f.attempts == 0 || f.canceled || len(f.final) == 0 || f.final[0].kind != "valid" {
		return
	}
	first, rest := f.final[0], f.final[1:]
	for _, ev := range rest {
		if ev.kind != "autoclose" {
			return // something else happened: no precise expectation
		}
	}
	if len(rest) > 0 {
		r.t.Fatalf("flight %d waited for more bytes after a complete response\n%s", f.id, r.describe())
	}
	if first.variant == var408 && f.reused && f.replayable {
		return // sent again; that attempt has its own window
	}
	status, body := expected(first.variant, f.method, first.tag)
	if f.err != nil || f.status != status || f.tag != first.tag || f.body != body {
		r.t.Fatalf("flight %d (%s) answered by one valid response %s (variant %d) got status %d tag %q body %q err %v; want %d %q\n%s",
			f.id, f.method, first.tag, first.variant, f.status, f.tag, f.body, f.err, status, body, r.describe())
	}
}

// describe returns the state of the run, for failure messages.
func (r *reuseRun) describe() string {
	var b strings.Builder
	for _, f := range r.flights {
		fmt.Fprintf(&b, "flight %d %s replayable=%v hold=%v attempts=%d reused=%v done=%v status=%d tag=%q body=%q err=%v final=%v\n",
			f.id, f.method, f.replayable, f.hold, f.attempts, f.reused, f.done, f.status, f.tag, f.body, f.err, f.final)
	}
	for _, c := range r.net.conns {
		fmt.Fprintf(&b, "conn %d requests=%d wrote=%d read=%d pending=%q fin=%v reset=%v closed=%v events=%v\n",
			c.id, c.requests, c.wrote, c.read, c.pending, c.fin, c.reset, c.clientClosed, c.events)
	}
	fmt.Fprintf(&b, "stats %+v", r.tr.Stats())
	return b.String()
}

// framedOnce reports whether b is exactly one response to a request with
// method (informational heads, then a final head that keeps the
// connection open, and its whole body) and nothing more: the only bytes
// after which a connection may carry another request.
func framedOnce(b []byte, method string) bool {
	src := bytes.NewReader(b)
	br := bufio.NewReader(src)
	req := &http.Request{Method: method}
	for {
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			return false
		}
		if resp.StatusCode >= 100 && resp.StatusCode <= 199 {
			if resp.StatusCode == http.StatusSwitchingProtocols {
				return false
			}
			continue
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return false
		}
		return br.Buffered() == 0 && src.Len() == 0 && resp.ProtoAtLeast(1, 1) && !resp.Close
	}
}

// Seed scripts: one per misbehaviour of the issue, and the paths of the
// reuse state machine.
var reuseSeeds = func() [][]byte {
	const (
		get, head, post, del, options, postKey = 0, 1, 2, 3, 4, 5
	)
	act := func(kind int, args ...byte) []byte { return append([]byte{byte(kind)}, args...) }
	fl := func(method int, hold bool, acts ...[]byte) []byte {
		h := byte(0)
		if hold {
			h = 1
		}
		b := []byte{opFlight, byte(method), h, byte(len(acts))}
		for _, a := range acts {
			b = append(b, a...)
		}
		return b
	}
	idle := func(conn, kind int, args ...byte) []byte {
		return append([]byte{opIdle, byte(conn), byte(kind)}, args...)
	}
	ok := func(variant int) []byte { return act(actValidSettle, byte(variant)) }
	garbage := func(s string) []byte { return append([]byte{actGarbage, byte(len(s))}, s...) }
	idleGarbage := func(conn int, s string) []byte { return append([]byte{opIdle, byte(conn), 0, byte(len(s))}, s...) }
	seq := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	first := fl(get, false, ok(varLength))
	return [][]byte{
		// The reproduction: a second complete response while idle.
		seq(first, idle(0, 1, 0), fl(get, false, ok(varLength)), fl(get, false, ok(varLength))),
		// HEAD answered with a body that is itself a response.
		seq(first, fl(head, false, act(actTwoInOne, varLength, 0)), fl(get, false, ok(varLength))),
		// 204 and 304 with bodies.
		seq(first, fl(get, false, act(actTwoInOne, varNoContent, 0)), fl(get, false, ok(varLength))),
		seq(first, fl(get, false, act(actTwoInOne, varNotMod, 0)), fl(head, false, ok(varNotMod))),
		// An idle 408 then close, before requests of every kind.
		seq(first, idle(0, 3), fl(post, false, ok(varLength)), idle(1, 3), fl(get, false, ok(varLength))),
		// Two responses in one write.
		seq(first, fl(get, false, act(actTwoInOne, varLength, 0)), fl(get, false, ok(varLength))),
		// An early close, mid-body.
		seq(first, fl(get, false, garbage("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"), act(actClose)), fl(get, false, ok(varLength))),
		// A head split across reads, cut in the status line and in a field.
		seq(fl(get, false, act(actSplit, varLength, 5)), fl(get, false, act(actSplit, varChunked, 30)), fl(get, false, ok(varLength))),
		// A chunked body followed by a stray response.
		seq(first, fl(get, false, act(actTwoInOne, varChunked, 0)), fl(get, false, ok(varLength))),
		// Informational heads, Connection: close, HTTP/1.0, empty bodies.
		seq(fl(get, false, ok(varHints)), fl(get, false, ok(varHints)), fl(get, false, ok(varClose)), fl(get, false, ok(varHTTP10)), fl(get, false, ok(varEmpty)), fl(get, false, ok(varLength))),
		// A connection idle past the timeout.
		seq(first, []byte{opExpire}, fl(get, false, ok(varLength))),
		// Bytes on a connection whose body is held unread, then released.
		seq(fl(get, true, ok(varLength)), fl(get, false, ok(varLength)), idle(0, 1, 1), []byte{opFinish}, fl(get, false, ok(varLength))),
		// Stale connections: closed as the request arrives; replayed or not.
		seq(first, fl(get, false, act(actClose)), fl(post, false, ok(varLength)), fl(post, false, act(actClose)), fl(postKey, false, ok(varLength)), fl(postKey, false, act(actReset))),
		// A 408 as the first response on a reused connection.
		seq(first, fl(get, false, act(actValid, var408)), fl(post, false, ok(varLength)), fl(post, false, act(actValid, var408)), fl(options, false, ok(varLength))),
		// Cancel, reset while idle, a refused dial.
		seq(fl(get, false, act(actCancel)), first, idle(0, 5), fl(del, false, ok(varLength)), []byte{opDialFail}, fl(get, false, ok(varLength))),
		// Arbitrary bytes while idle, and a head too large.
		seq(first, idleGarbage(0, "x"), fl(get, false, ok(varLength)), fl(get, false, garbage(strings.Repeat("h", 210)))),
		// A response that asks to close, on a connection the upstream
		// leaves open: it must not carry the next request.
		seq(first, fl(get, false, garbage("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok")), fl(get, false, ok(varLength))),
		// Bytes that arrive before the client read the response.
		seq(first, fl(get, false, act(actValid, varLength), garbage("HTTP/1.1 200 OK\r\n\r\n")), fl(get, false, ok(varUntilEOF)), fl(get, false, ok(varLength))),
	}
}()
