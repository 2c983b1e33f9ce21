package http1

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

// This file holds the differential harness: the same bytes are served by
// net/http's server and by ours, each over an in-memory connection that
// delivers them (in pieces of a given size) and then EOF, with the same
// recording handler. What each handler saw, and every byte each server
// wrote (Date values masked), must be equal.

// memConn is a net.Conn that reads from a fixed input, at most chunk bytes
// per Read (0: all), then io.EOF, and records what is written to it.
type memConn struct {
	in     []byte
	pos    int
	chunk  int
	mu     sync.Mutex
	out    bytes.Buffer
	closed chan struct{}
	once   sync.Once
}

func newMemConn(in []byte, chunk int) *memConn {
	return &memConn{in: in, chunk: chunk, closed: make(chan struct{})}
}

func (c *memConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pos >= len(c.in) {
		return 0, io.EOF
	}
	if c.chunk > 0 && len(p) > c.chunk {
		p = p[:c.chunk]
	}
	n := copy(p, c.in[c.pos:])
	c.pos += n
	return n, nil
}

func (c *memConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.closed:
		return 0, net.ErrClosed
	default:
	}
	return c.out.Write(p)
}

func (c *memConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

func (c *memConn) output() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.out.Bytes())
}

var memAddr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4242}

func (c *memConn) LocalAddr() net.Addr              { return memAddr }
func (c *memConn) RemoteAddr() net.Addr             { return memAddr }
func (c *memConn) SetDeadline(time.Time) error      { return nil }
func (c *memConn) SetReadDeadline(time.Time) error  { return nil }
func (c *memConn) SetWriteDeadline(time.Time) error { return nil }

// chanListener hands connections to an http.Server.
type chanListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newChanListener() *chanListener {
	return &chanListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return memAddr }

// seen is what a handler saw of one request.
type seen struct {
	Method, RequestURI, Proto string
	ProtoMajor, ProtoMinor    int
	URL                       string
	Host                      string
	Header                    string
	ContentLength             int64
	TransferEncoding          []string
	Close                     bool
	TrailerBefore             string
	Body                      string
	BodyErr                   string
	TrailerAfter              string
}

func (s seen) String() string { type plain seen; return fmt.Sprintf("%+v", plain(s)) }

// record is the handler both servers run: it reads the whole body and
// answers "ok".
type recorder struct {
	closeBody bool // close the body after reading it (see harnessOpts)
	mu        sync.Mutex
	seen      []seen
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := seen{
		Method: r.Method, RequestURI: r.RequestURI, Proto: r.Proto,
		ProtoMajor: r.ProtoMajor, ProtoMinor: r.ProtoMinor,
		URL:           describeURL(r),
		Host:          r.Host,
		Header:        describeHeader(r.Header),
		ContentLength: r.ContentLength, TransferEncoding: r.TransferEncoding,
		Close:         r.Close,
		TrailerBefore: describeHeader(r.Trailer),
	}
	b, err := io.ReadAll(r.Body)
	if rec.closeBody {
		_ = r.Body.Close()
	}
	s.Body = string(b)
	s.BodyErr = errClass(err)
	s.TrailerAfter = describeHeader(r.Trailer)
	rec.mu.Lock()
	rec.seen = append(rec.seen, s)
	rec.mu.Unlock()
	_, _ = io.WriteString(w, "ok")
}

func (rec *recorder) take() []seen {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	s := rec.seen
	rec.seen = nil
	return s
}

func describeURL(r *http.Request) string {
	if r.URL == nil {
		return "<nil>"
	}
	u := *r.URL
	user := ""
	if u.User != nil {
		user = u.User.String()
	}
	u.User = nil
	return fmt.Sprintf("%#v user=%q", u, user)
}

func describeHeader(h http.Header) string {
	if h == nil {
		return "<nil>"
	}
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%q=%q;", k, h[k])
	}
	return b.String()
}

// errClass groups body errors: the two servers word them differently.
func errClass(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "unexpected EOF"
	default:
		return "error"
	}
}

var dateLine = regexp.MustCompile(`(?m)^Date: [^\r\n]*\r$`)

func maskDate(b []byte) string { return dateLine.ReplaceAllString(string(b), "Date: *\r") }

// outcome is what one server did with one input.
type outcome struct {
	seen   []seen
	output string
}

// stdServer is net/http's server behind a chanListener.
type stdServer struct {
	srv *http.Server
	ln  *chanListener
	rec *recorder
}

// harnessOpts shape both servers of a differential run alike.
type harnessOpts struct {
	// noOptions passes "OPTIONS *" to the handler.
	noOptions bool
	// closeBody makes the handler close the body it read. A body that
	// ended before its Content-Length then leaves nothing "unread", and
	// net/http does not sleep 500 ms before closing the connection, which
	// would starve the fuzzer.
	closeBody bool
}

func newStdServer(o harnessOpts) *stdServer {
	rec := &recorder{closeBody: o.closeBody}
	srv := &http.Server{Handler: rec, ErrorLog: discardLog, DisableGeneralOptionsHandler: o.noOptions}
	s := &stdServer{srv: srv, ln: newChanListener(), rec: rec}
	go func() { _ = s.srv.Serve(s.ln) }()
	return s
}

func (s *stdServer) close() { _ = s.srv.Close() }

func (s *stdServer) serve(in []byte, chunk int) outcome {
	c := newMemConn(in, chunk)
	select {
	case s.ln.conns <- c:
	case <-time.After(10 * time.Second):
		panic("net/http server does not accept")
	}
	select {
	case <-c.closed:
	case <-time.After(10 * time.Second):
		buf := make([]byte, 1<<20)
		panic("net/http server did not close a connection:\n" + string(buf[:runtime.Stack(buf, true)]))
	}
	// The handler ran before the connection closed.
	return outcome{seen: s.rec.take(), output: maskDate(c.output())}
}

// ourServer is ours, serving each connection with ServeConn.
type ourServer struct {
	srv *Server
	rec *recorder
}

func newOurServer(o harnessOpts) *ourServer {
	rec := &recorder{closeBody: o.closeBody}
	return &ourServer{srv: &Server{Handler: rec, Logger: discardSlog, DisableGeneralOptionsHandler: o.noOptions}, rec: rec}
}

func (s *ourServer) serve(in []byte, chunk int) outcome {
	c := newMemConn(in, chunk)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.srv.ServeConn(c)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		buf := make([]byte, 1<<20)
		panic("our server did not finish a connection:\n" + string(buf[:runtime.Stack(buf, true)]))
	}
	<-c.closed
	return outcome{seen: s.rec.take(), output: maskDate(c.output())}
}

// compare returns "" when both outcomes match, else what differs.
func compare(std, ours outcome) string {
	var b strings.Builder
	if std.output != ours.output {
		fmt.Fprintf(&b, "output differs:\n net/http: %q\n ours:     %q\n", std.output, ours.output)
	}
	n := max(len(std.seen), len(ours.seen))
	for i := range n {
		var a, o string
		if i < len(std.seen) {
			a = std.seen[i].String()
		}
		if i < len(ours.seen) {
			o = ours.seen[i].String()
		}
		if a != o {
			fmt.Fprintf(&b, "request %d differs:\n net/http: %s\n ours:     %s\n", i, a, o)
		}
	}
	return b.String()
}

var _ = context.Background
