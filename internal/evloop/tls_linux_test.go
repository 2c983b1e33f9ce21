//go:build linux

package evloop

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/testcert"
	"github.com/seed-a07d1050/portcullis/internal/waitfor"
)

// tlsRig is a rig whose front runs the TLS handshake of each accepted
// connection (made by TLSServer over a wrapped connection, whose closes
// it counts) on a goroutine, and gives it to Serve once it is done.
type tlsRig struct {
	*rig
	client *tls.Config
	mu     sync.Mutex
	owners []*wrapped
	served atomic.Int32 // connections Serve took
}

func newTLSRig(t *testing.T, cfg Config, h *testHandler, tune func(*net.TCPConn)) *tlsRig {
	t.Helper()
	cert, err := testcert.New()
	if err != nil {
		t.Fatal(err)
	}
	server := &tls.Config{Certificates: []tls.Certificate{cert.TLS}, NextProtos: []string{"http/1.1"}}
	tr := &tlsRig{client: &tls.Config{RootCAs: cert.Pool, ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}}}
	var handshakes sync.WaitGroup
	t.Cleanup(handshakes.Wait) // after the rig's own cleanup, which closes the server
	tr.rig = newRigServing(t, cfg, h, func(srv *Server, c net.Conn) {
		if tune != nil {
			tune(c.(*net.TCPConn))
		}
		owner := &wrapped{TCPConn: c.(*net.TCPConn)}
		tr.mu.Lock()
		tr.owners = append(tr.owners, owner)
		tr.mu.Unlock()
		tc := TLSServer(owner, server)
		handshakes.Go(func() {
			_ = tc.SetDeadline(time.Now().Add(testTimeout))
			if err := tc.Handshake(); err != nil {
				tc.Close()
				return
			}
			_ = tc.SetDeadline(time.Time{})
			if !srv.Serve(tc) {
				tc.Close()
				return
			}
			tr.served.Add(1)
		})
	})
	return tr
}

func (tr *tlsRig) dial(t *testing.T) *tls.Conn {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: testTimeout}, "tcp", tr.addr, tr.client)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(testTimeout))
	t.Cleanup(func() { c.Close() })
	return c
}

// ownersClosed waits until each accepted connection was closed exactly
// once: what a connection cap holds for it is given back.
func (tr *tlsRig) ownersClosed(t *testing.T, n int) {
	t.Helper()
	waitfor.Cond(t, fmt.Sprintf("%d accepted connections closed", n), func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		if len(tr.owners) != n {
			return false
		}
		for _, o := range tr.owners {
			if o.closes.Load() == 0 {
				return false
			}
		}
		return true
	})
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for i, o := range tr.owners {
		if k := o.closes.Load(); k != 1 {
			t.Errorf("accepted connection %d closed %d times, want 1", i, k)
		}
	}
}

func TestTLSRelayKeepAlive(t *testing.T) {
	for _, version := range []uint16{tls.VersionTLS13, tls.VersionTLS12} {
		t.Run(tls.VersionName(version), func(t *testing.T) { relayKeepAliveTLS(t, version) })
	}
}

func relayKeepAliveTLS(t *testing.T, version uint16) {
	be := newBackend(t, nil)
	var versions []uint16
	h := &testHandler{backend: be.addr, onBegin: func(c *Conn) {
		st := c.TLS()
		if st == nil || !st.HandshakeComplete {
			t.Errorf("Begin: TLS() = %v, want a done handshake", st)
			return
		}
		versions = append(versions, st.Version) // the loop's goroutine alone
	}}
	r := newTLSRig(t, Config{}, h, nil)
	r.client.MaxVersion = version

	c := r.dial(t)
	br := bufio.NewReader(c)
	var sent []string
	for i, p := range []string{"/a", "/b", "/c"} {
		req := get(p)
		sent = append(sent, req)
		write(t, c, req)
		code, body := readAnswer(t, br)
		if want := echoBody(1, i+1, p); code != 200 || body != want {
			t.Fatalf("answer %d: %d %q, want 200 %q", i, code, body, want)
		}
	}
	if got := be.recorded(); fmt.Sprint(got) != fmt.Sprint(sent) {
		t.Errorf("backend got heads %q, want %q", got, sent)
	}
	if n := r.served.Load(); n != 1 {
		t.Errorf("Serve took %d connections, want 1", n)
	}
	if st := h.stats(); st.begins != 3 || st.handBacks != 0 || len(st.resumes) != 0 {
		t.Errorf("begins %d, handBacks %d, resumes %v; want 3, 0, none", st.begins, st.handBacks, st.resumes)
	}
	c.Close()
	r.waitGone(t, 1)
	r.ownersClosed(t, 1)
	if fmt.Sprint(versions) != fmt.Sprint([]uint16{version, version, version}) {
		t.Errorf("TLS versions seen by Begin: %v", versions)
	}
}

// TestTLSRecordsAndHeads checks heads however the records cut them:
// two requests in one record, and one request over many records sent
// apart, which the loop reads record by record as they come.
func TestTLSRecordsAndHeads(t *testing.T) {
	be := newBackend(t, nil)
	h := &testHandler{backend: be.addr}
	r := newTLSRig(t, Config{}, h, nil)

	c := r.dial(t)
	br := bufio.NewReader(c)
	write(t, c, get("/one")+get("/two")) // one record
	for i, p := range []string{"/one", "/two"} {
		if code, body := readAnswer(t, br); code != 200 || body != echoBody(1, i+1, p) {
			t.Fatalf("pipelined answer %d: %d %q", i, code, body)
		}
	}
	// Two records in one segment: the loop's first read takes both, and
	// crypto/tls returns the first's plaintext alone, the second waiting
	// in its buffer with the socket empty.
	raw, err := net.DialTimeout("tcp", r.addr, testTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	bc := &batchConn{Conn: raw}
	c2 := tls.Client(bc, r.client)
	_ = c2.SetDeadline(time.Now().Add(testTimeout))
	if err := c2.Handshake(); err != nil {
		t.Fatal(err)
	}
	bc.hold = true
	write(t, c2, get("/first"))
	write(t, c2, get("/second"))
	if err := bc.flush(); err != nil {
		t.Fatal(err)
	}
	br2 := bufio.NewReader(c2)
	for i, p := range []string{"/first", "/second"} {
		if code, body := readAnswer(t, br2); code != 200 || body != echoBody(2, i+1, p) {
			t.Fatalf("batched answer %d: %d %q", i, code, body)
		}
	}
	c2.Close()

	req := get("/split")
	for i := 0; i < len(req); i += 7 {
		write(t, c, req[i:min(i+7, len(req))]) // a record each
		time.Sleep(time.Millisecond)
	}
	if code, body := readAnswer(t, br); code != 200 || body != echoBody(1, 3, "/split") {
		t.Fatalf("split answer: %d %q", code, body)
	}
	if st := h.stats(); st.begins != 5 || st.handBacks != 0 {
		t.Errorf("begins %d, handBacks %d; want 5, 0", st.begins, st.handBacks)
	}
	c.Close()
	r.waitGone(t, 2)
	r.ownersClosed(t, 2)
}

// TestTLSLargeAnswerSlowClient writes an answer of many records to a
// client that reads it slowly through small buffers: the records wait in
// the transport for the socket's EPOLLOUT edges, and come out whole and
// in order, followed by the next answer.
func TestTLSLargeAnswerSlowClient(t *testing.T) {
	body := strings.Repeat("0123456789abcdef", (maxAnswer-1024)/16)
	be := newBackend(t, func(be *backend, c net.Conn, br *bufio.Reader, idx int) {
		for {
			head, err := readHead(br)
			if err != nil {
				return
			}
			b := body
			if requestPath(head) == "/small" {
				b = "small"
			}
			if _, err := io.WriteString(c, okAnswer(b)); err != nil {
				return
			}
		}
	})
	h := &testHandler{backend: be.addr}
	r := newTLSRig(t, Config{}, h, smallSendBuffer)

	c := r.dial(t)
	slow := &slowReader{r: c, every: 4 << 10, pause: time.Millisecond}
	br := bufio.NewReaderSize(slow, 4<<10)
	// Alone: its last records go out with no answer after them to push
	// them; then one after it; then one the connection ends with.
	write(t, c, get("/large"))
	if code, got := readAnswer(t, br); code != 200 || got != body {
		t.Fatalf("large answer: %d, %d bytes, want 200 and %d", code, len(got), len(body))
	}
	write(t, c, get("/large")+get("/small"))
	if code, got := readAnswer(t, br); code != 200 || got != body {
		t.Fatalf("second large answer: %d, %d bytes, want 200 and %d", code, len(got), len(body))
	}
	if code, got := readAnswer(t, br); code != 200 || got != "small" {
		t.Fatalf("next answer: %d %q", code, got)
	}
	write(t, c, strings.Replace(get("/large"), "\r\n\r\n", "\r\nConnection: close\r\n\r\n", 1))
	if code, got := readAnswer(t, br); code != 200 || got != body {
		t.Fatalf("last large answer: %d, %d bytes, want 200 and %d", code, len(got), len(body))
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("after the last answer: %v, want EOF", err)
	}
	if dones := r.waitDones(t, 4); !allNil(dones) {
		t.Errorf("Done: %v", dones)
	}
	r.waitGone(t, 1)
	r.ownersClosed(t, 1)
}

// slowReader pauses after every so many bytes.
type slowReader struct {
	r     io.Reader
	every int
	pause time.Duration
	n     int
}

func (s *slowReader) Read(p []byte) (int, error) {
	if len(p) > s.every {
		p = p[:s.every]
	}
	n, err := s.r.Read(p)
	if s.n += n; s.n >= s.every {
		s.n = 0
		time.Sleep(s.pause)
	}
	return n, err
}

// TestTLSHandBack checks a connection the Handler declines: the server it
// goes back to reads the plaintext the loop read and what follows on the
// TLS stream, sees the connection's TLS state, writes through the same
// session, and closing it gives back what the accepted connection held.
func TestTLSHandBack(t *testing.T) {
	h := &testHandler{backend: closedPort(t)}
	post := "POST /p HTTP/1.1\r\nHost: backend.test\r\nContent-Length: 5\r\n\r\n"
	type handed struct {
		b     []byte
		err   error
		state bool
	}
	got := make(chan handed, 1)
	h.onHandBack = func(c net.Conn) {
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(testTimeout))
		b := make([]byte, len(post)+5)
		_, err := io.ReadFull(c, b)
		cs, ok := c.(interface{ ConnectionState() tls.ConnectionState })
		got <- handed{b, err, ok && cs.ConnectionState().HandshakeComplete}
		_, _ = io.WriteString(c, okAnswer("served back"))
	}
	r := newTLSRig(t, Config{}, h, nil)

	c := r.dial(t)
	write(t, c, post)
	time.Sleep(20 * time.Millisecond) // the body after the loop gave the connection back
	write(t, c, "hello")
	hb := recv(t, got, "HandBack")
	if hb.err != nil || string(hb.b) != post+"hello" {
		t.Errorf("handed back %q (%v), want %q", hb.b, hb.err, post+"hello")
	}
	if !hb.state {
		t.Errorf("the connection handed back has no TLS state")
	}
	br := bufio.NewReader(c)
	if code, body := readAnswer(t, br); code != 200 || body != "served back" {
		t.Errorf("answer %d %q", code, body)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("after the server closed: %v, want EOF (its close_notify)", err)
	}
	r.waitGone(t, 1)
	r.ownersClosed(t, 1)
}

// TestTLSResume checks an exchange handed over: the client's connection
// goes with the request's plaintext, and the answer written to it
// reaches the client through the same session.
func TestTLSResume(t *testing.T) {
	answer := "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
	be := newBackend(t, func(be *backend, c net.Conn, br *bufio.Reader, idx int) {
		if _, err := readHead(br); err != nil {
			return
		}
		_, _ = io.WriteString(c, answer)
		_, _ = io.Copy(io.Discard, c)
	})
	h := &testHandler{backend: be.addr}
	req := get("/chunked")
	resumed := captureResume(h, len(req), len(answer), okAnswer("resumed"))
	r := newTLSRig(t, Config{}, h, nil)

	c := r.dial(t)
	write(t, c, req)
	rc := recv(t, resumed, "Resume")
	if rc.cause != nil || string(rc.clientHead) != req || string(rc.upBytes) != answer {
		t.Errorf("Resume: cause %v, client %q, up %q", rc.cause, rc.clientHead, rc.upBytes)
	}
	if code, body := readAnswer(t, bufio.NewReader(c)); code != 200 || body != "resumed" {
		t.Errorf("answer %d %q", code, body)
	}
	r.waitGone(t, 1)
	r.ownersClosed(t, 1)
}

// TestTLSClientLeaves checks each way a TLS client goes: a close_notify
// between requests, a reset during an exchange, a close in the middle of
// a record. Each connection ends on the loop and gives back what it held.
func TestTLSClientLeaves(t *testing.T) {
	got := make(chan string, 1)
	release := make(chan struct{})
	be := holdingBackend(t, got, release, nil)
	defer close(release)
	h := &testHandler{backend: be.addr}
	r := newTLSRig(t, Config{}, h, nil)

	// close_notify, then nothing.
	c1 := r.dial(t)
	if err := c1.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := c1.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("after close_notify: %v, want EOF", err)
	}

	// A reset while the request is upstream.
	c2 := r.dial(t)
	write(t, c2, get("/held"))
	recv(t, got, "the held request")
	tcp := c2.NetConn().(*net.TCPConn)
	_ = tcp.SetLinger(0)
	tcp.Close()

	// Half a record, then the end.
	raw, err := net.DialTimeout("tcp", r.addr, testTimeout)
	if err != nil {
		t.Fatal(err)
	}
	hc := &halfConn{Conn: raw}
	c3 := tls.Client(hc, r.client)
	_ = c3.SetDeadline(time.Now().Add(testTimeout))
	if err := c3.Handshake(); err != nil {
		t.Fatal(err)
	}
	hc.cut.Store(true)
	if _, err := c3.Write([]byte(get("/half"))); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("the cut write: %v", err)
	}

	r.waitGone(t, 3)
	r.ownersClosed(t, 3)
	st := h.stats()
	if len(st.resumes) != 1 || !errors.Is(st.resumes[0], ErrClientGone) {
		t.Errorf("resumes %v, want one ErrClientGone (the reset)", st.resumes)
	}
	if st.begins != 1 || st.handBacks != 0 {
		t.Errorf("begins %d, handBacks %d; want 1, 0", st.begins, st.handBacks)
	}
}

// batchConn keeps what is written while hold is set, for flush to send
// in one write.
type batchConn struct {
	net.Conn
	hold bool
	buf  []byte
}

func (b *batchConn) Write(p []byte) (int, error) {
	if !b.hold {
		return b.Conn.Write(p)
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *batchConn) Read(p []byte) (int, error) {
	if b.hold && len(b.buf) > 0 {
		if err := b.flush(); err != nil {
			return 0, err
		}
	}
	return b.Conn.Read(p)
}

func (b *batchConn) flush() error {
	_, err := b.Conn.Write(b.buf)
	b.buf = nil
	return err
}

// halfConn sends half of each write, then closes, once cut is set.
type halfConn struct {
	net.Conn
	cut atomic.Bool
}

func (h *halfConn) Write(p []byte) (int, error) {
	if !h.cut.Load() {
		return h.Conn.Write(p)
	}
	n, _ := h.Conn.Write(p[:len(p)/2])
	h.Conn.Close()
	return n, net.ErrClosed
}

func TestTLSServeRejects(t *testing.T) {
	h := &testHandler{backend: closedPort(t)}
	r := newRig(t, Config{}, h, nil)
	cert, err := testcert.New()
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert.TLS}}

	_, s1 := tcpPair(t)
	if r.srv.Serve(tls.Server(s1, cfg)) {
		t.Errorf("Serve of a TLS connection tls.Server made = true")
	}
	_, s2 := tcpPair(t)
	if r.srv.Serve(TLSServer(s2, cfg)) {
		t.Errorf("Serve of a TLS connection before its handshake = true")
	}
	if n := r.srv.Conns(); n != 0 {
		t.Errorf("Conns() = %d", n)
	}
	if st := h.stats(); st.lefts != 0 || st.begins != 0 || st.handBacks != 0 {
		t.Errorf("the handler heard of rejected conns: %+v", st)
	}
}

// TestTLSShutdown checks that Shutdown closes an idle TLS connection, with
// a close_notify, and lets the one whose request is upstream finish.
func TestTLSShutdown(t *testing.T) {
	got := make(chan string, 1)
	release := make(chan struct{})
	be := holdingBackend(t, got, release, nil)
	h := &testHandler{backend: be.addr}
	r := newTLSRig(t, Config{}, h, nil)

	idle := r.dial(t)
	busy := r.dial(t)
	write(t, busy, get("/held"))
	recv(t, got, "the held request")
	waitfor.Cond(t, "both served", func() bool { return r.srv.Conns() == 2 })
	done := make(chan error, 1)
	go func() { done <- r.srv.Shutdown(t.Context()) }()
	if _, err := idle.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("idle connection at shutdown: %v, want EOF (close_notify)", err)
	}
	close(release)
	if code, _ := readAnswer(t, bufio.NewReader(busy)); code != 200 {
		t.Errorf("the answer under way: %d", code)
	}
	if err := recv(t, done, "Shutdown"); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	r.ownersClosed(t, 2)
}

// recordStream builds a stream of TLS-like records whose bodies have the
// given lengths (each byte of a body is its record's index).
func recordStream(lengths []int) (stream []byte, ends []int) {
	for i, n := range lengths {
		stream = append(stream, 23, 3, 3, byte(n>>8), byte(n))
		for range n {
			stream = append(stream, byte(i))
		}
		ends = append(ends, len(stream))
	}
	return stream, ends
}

// readRecords reads stream through a loop-side transport, sent to its
// socket in pieces of the given sizes, with Reads of at most readSize, and
// checks that no Read goes past a record's end, that the bytes come whole
// and in order, and that the transport says nothing more waits once the
// socket is empty.
func readRecords(t *testing.T, stream []byte, ends []int, pieces []int, readSize int) {
	t.Helper()
	client, server := tcpPair(t)
	fd, err := adoptSocket(server)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	tr := &tlsTransport{Conn: server, owner: server, fd: fd}
	boundary := map[int]bool{}
	for _, e := range ends {
		boundary[e] = true
	}
	go func() {
		for sent, i := 0, 0; sent < len(stream); i++ {
			k := len(stream) - sent
			if i < len(pieces) {
				k = min(k, pieces[i])
			}
			if _, err := client.Write(stream[sent : sent+k]); err != nil {
				return
			}
			sent += k
			time.Sleep(200 * time.Microsecond)
		}
	}()
	var got []byte
	buf := make([]byte, readSize)
	deadline := time.Now().Add(testTimeout)
	for len(got) < len(stream) {
		n, err := tr.Read(buf)
		if err == errWouldBlock {
			if time.Now().After(deadline) {
				t.Fatalf("read %d of %d bytes", len(got), len(stream))
			}
			time.Sleep(50 * time.Microsecond)
			continue
		}
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		start := len(got)
		got = append(got, buf[:n]...)
		for b := start + 1; b < start+n; b++ {
			if boundary[b] {
				t.Fatalf("a Read of [%d, %d) crosses the record boundary at %d", start, start+n, b)
			}
		}
	}
	if !bytes.Equal(got, stream) {
		t.Fatalf("read bytes differ from the stream")
	}
	if _, err := tr.Read(buf); err != errWouldBlock || tr.more() {
		t.Errorf("after the stream: Read %v, more %v; want errWouldBlock and false", err, tr.more())
	}
}

func TestTLSTransportReadsRecordByRecord(t *testing.T) {
	for _, tc := range []struct {
		name     string
		lengths  []int
		pieces   []int
		readSize int
	}{
		{"one record per piece", []int{100, 200, 300}, []int{105, 205, 305}, 4096},
		{"all in one piece", []int{100, 0, 200, 300, 1}, []int{1 << 20}, 4096},
		{"pieces cut inside headers", []int{50, 60, 70}, []int{3, 4, 55, 2, 64, 1, 1, 1, 1, 1, 70}, 4096},
		{"reads smaller than a record", []int{5000, 3000}, []int{1 << 20}, 512},
		{"a record of the largest length", []int{65535, 10}, []int{1 << 20}, 4096},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stream, ends := recordStream(tc.lengths)
			readRecords(t, stream, ends, tc.pieces, tc.readSize)
		})
	}
}

// FuzzRecordsTake feeds a stream, cut where cuts say, to records.take and
// checks each answer against the boundaries a plain walk of the stream
// finds: take stops at a record's end and only there, or at the end of
// what it was given.
func FuzzRecordsTake(f *testing.F) {
	s, _ := recordStream([]int{3, 0, 10})
	f.Add(s, []byte{2, 7, 1})
	f.Add([]byte{23, 3, 3, 0, 0, 23, 3, 3, 0, 1, 9}, []byte{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1})
	f.Fuzz(func(t *testing.T, stream, cuts []byte) {
		boundary := map[int]bool{}
		for i := 0; i+5 <= len(stream); {
			i += 5 + (int(stream[i+3])<<8 | int(stream[i+4]))
			boundary[i] = true
		}
		var r records
		for pos, i := 0, 0; pos < len(stream); i++ {
			k := len(stream) - pos
			if i < len(cuts) {
				k = min(k, int(cuts[i])+1)
			}
			n := r.take(stream[pos : pos+k])
			if n <= 0 || n > k {
				t.Fatalf("take of %d bytes at %d: %d", k, pos, n)
			}
			for b := pos + 1; b < pos+n; b++ {
				if boundary[b] {
					t.Fatalf("take of [%d, %d) went past the record's end at %d", pos, pos+n, b)
				}
			}
			if n < k && !boundary[pos+n] {
				t.Fatalf("take of %d bytes at %d stopped at %d, not a record's end", k, pos, pos+n)
			}
			pos += n
		}
	})
}

// TestTLSRequestWithTheHandshake sends a request in the same segment as
// the client's Finished: the server's handshake reads part of the
// request's record with it, and the loop must go on from inside that
// record. The request is long, so that the handshake's read takes only
// its start.
func TestTLSRequestWithTheHandshake(t *testing.T) {
	be := newBackend(t, nil)
	h := &testHandler{backend: be.addr}
	r := newTLSRig(t, Config{}, h, nil)

	for _, size := range []int{0, 600, 6000, 15000} {
		raw, err := net.DialTimeout("tcp", r.addr, testTimeout)
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		// Every write waits for the client's next read: the Finished
		// goes out with the request.
		bc := &batchConn{Conn: raw, hold: true}
		c := tls.Client(bc, r.client)
		_ = c.SetDeadline(time.Now().Add(testTimeout))
		if err := c.Handshake(); err != nil {
			t.Fatal(err)
		}
		req := get("/with")
		req = strings.Replace(req, "\r\n\r\n", "\r\nX-Pad: "+strings.Repeat("p", size)+"\r\n\r\n", 1)
		write(t, c, req)
		write(t, c, get("/also")) // a second record in the same segment
		br := bufio.NewReader(c)
		if code, body := readAnswer(t, br); code != 200 || !strings.HasSuffix(body, "path=/with") {
			t.Fatalf("request of %d bytes sent with the Finished: %d %q", len(req), code, body)
		}
		if code, body := readAnswer(t, br); code != 200 || !strings.HasSuffix(body, "path=/also") {
			t.Fatalf("the request sent with it: %d %q", code, body)
		}
		write(t, c, get("/next"))
		if code, body := readAnswer(t, br); code != 200 || !strings.HasSuffix(body, "path=/next") {
			t.Fatalf("the request after it: %d %q", code, body)
		}
		c.Close()
	}
	r.waitGone(t, 4)
	r.ownersClosed(t, 4)
	if st := h.stats(); st.begins != 12 || st.handBacks != 0 {
		t.Errorf("begins %d, handBacks %d; want 12, 0", st.begins, st.handBacks)
	}
}
