package httplimit

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/net/http/httpguts"

	"github.com/seed-a07d1050/portcullis/limit"
)

// isTunnel reports whether r asks for a connection that outlives the
// exchange: a CONNECT (HTTP/1 or HTTP/2, with or without the :protocol of
// extended CONNECT, RFC 8441) or an HTTP/1.1 upgrade (RFC 9110 §7.8: an
// Upgrade header and the "upgrade" token in Connection).
func isTunnel(r *http.Request) bool {
	if r.Method == http.MethodConnect {
		return true
	}
	if len(r.Header["Upgrade"]) == 0 {
		return false
	}
	return httpguts.HeaderValuesContainsToken(r.Header["Connection"], "upgrade")
}

// A tunnel tracks the permit of one tunnel request from admission to the
// close of the connection. Its permit is released exactly once: by the
// handler's return when the connection was not hijacked (or the handler
// panicked), by the hijacked connection's Close otherwise, or at
// establishment with Config.ReleaseTunnels. With Config.TunnelPermits it
// also holds an exchange permit until the answer is known: released at
// establishment, kept until the handler returns otherwise, while the
// tunnel permit of a request that was not switched is released at once.
type tunnel struct {
	permit    limit.Permit[string]
	exchange  limit.Permit[string] // zero without Config.TunnelPermits
	connect   bool                 // a CONNECT: any 2xx establishes it; otherwise only 101 does
	releaseUp bool                 // Config.ReleaseTunnels

	decidedFast atomic.Bool // decided, readable without mu, for the many writes after

	mu          sync.Mutex
	decided     bool // the status of the answer is known
	established bool
	hijacked    bool
	handedBack  bool // ReleaseTunnelPermits gave the permits back
}

// handBack releases the tunnel's permits now, for ReleaseTunnelPermits. It
// reports whether this call released them: false after an earlier call,
// and after the exchange or the tunnel ended (their releases happened
// already, and another release would do nothing).
func (t *tunnel) handBack() bool {
	t.mu.Lock()
	first := !t.handedBack
	t.handedBack = true
	t.mu.Unlock()
	if !first {
		return false
	}
	// Permit.Release is a no-op for a permit released already: the close
	// of a hijacked connection, the handler's return and a reclaim stay
	// harmless after this.
	t.exchange.Release()
	t.permit.Release()
	return true
}

// ReleaseTunnelPermits releases, at once, the permits that the Limiters
// wrapping a handler hold for the tunnel request answered through w (a
// CONNECT or an upgrade; see [Limiter.Wrap]), instead of keeping them until
// the tunnel closes. It is for a handler that turns a tunnel into
// exchanges the Limiters count one by one, such as an intercepting proxy
// that serves the requests inside a CONNECT's TLS session, each under its
// own permits: the CONNECT then stops counting once interception starts.
//
// w is the ResponseWriter the handler received; every Limiter between the
// server and the handler is found through the Unwrap method of the writers
// (the one [http.ResponseController] uses), so a middleware in between
// whose writer has no Unwrap hides the Limiters outside it. It works
// before and after Hijack, over HTTP/1.1 and HTTP/2. The tunnel itself is
// untouched: the connection stays open, and a later Close (of a hijacked
// connection) or return of the handler releases nothing more.
//
// It returns how many Limiters gave permits back: 0 when w answers no
// tunnel request of a Limiter (an ordinary exchange keeps its permit until
// it ends), and 0 for a second call.
func ReleaseTunnelPermits(w http.ResponseWriter) int {
	n := 0
	for w != nil {
		switch tw := w.(type) {
		case *hijackWriter:
			if tw.t.handBack() {
				n++
			}
		case *tunnelWriter:
			if tw.t.handBack() {
				n++
			}
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			break
		}
		w = u.Unwrap()
	}
	return n
}

// answered records the status code of the answer to the tunnel request. A
// 1xx other than 101 is informational and decides nothing.
func (t *tunnel) answered(code int) {
	if t.decidedFast.Load() || (code >= 100 && code < 200 && code != http.StatusSwitchingProtocols) {
		return
	}
	t.mu.Lock()
	if t.decided {
		t.mu.Unlock()
		return
	}
	t.decided = true
	t.decidedFast.Store(true)
	t.established = code == http.StatusSwitchingProtocols || (t.connect && code >= 200 && code < 300)
	established := t.established
	t.mu.Unlock()
	if !established {
		if t.exchange.Valid() {
			// Not a tunnel after all: an ordinary exchange, counted by
			// its exchange permit alone.
			t.permit.Release()
		}
		return
	}
	t.exchange.Release()
	if t.releaseUp {
		t.permit.Release()
	} else {
		t.permit.Exempt() // an open tunnel is not a leak: never reclaim it
	}
}

func (t *tunnel) isDecided() bool { return t.decidedFast.Load() }

// handlerDone is deferred around the handler. A hijacked connection keeps
// the permit until its Close, unless the handler did not return normally:
// a panic or Goexit ends the exchange and releases it.
func (t *tunnel) handlerDone(returned bool) {
	t.mu.Lock()
	keep := t.hijacked && returned
	t.mu.Unlock()
	t.exchange.Release()
	if !keep {
		t.permit.Release()
	}
}

// tunnelWriter wraps the ResponseWriter of a tunnel request to see the
// status of the answer. It is used only for tunnel requests, so ordinary
// exchanges keep their writer and allocate nothing.
type tunnelWriter struct {
	http.ResponseWriter
	t *tunnel
}

var (
	_ http.ResponseWriter = (*tunnelWriter)(nil)
	_ http.Flusher        = (*tunnelWriter)(nil)
	_ io.ReaderFrom       = (*tunnelWriter)(nil)
	_ http.Hijacker       = (*hijackWriter)(nil)
)

func (w *tunnelWriter) WriteHeader(code int) {
	w.t.answered(code)
	w.ResponseWriter.WriteHeader(code)
}

func (w *tunnelWriter) Write(b []byte) (int, error) {
	w.t.answered(http.StatusOK) // no-op once decided
	return w.ResponseWriter.Write(b)
}

// ReadFrom keeps the underlying writer's io.ReaderFrom fast path.
func (w *tunnelWriter) ReadFrom(r io.Reader) (int64, error) {
	w.t.answered(http.StatusOK)
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(writerOnly{w.ResponseWriter}, r)
}

// writerOnly hides every method but Write, so io.Copy does not loop back
// into ReadFrom.
type writerOnly struct{ io.Writer }

// Flush flushes the underlying writer, as http.Flusher; a writer that
// cannot flush is left alone.
func (w *tunnelWriter) Flush() { _ = w.FlushError() }

// FlushError flushes the underlying writer and reports its error, as
// [http.ResponseController.Flush] expects.
func (w *tunnelWriter) FlushError() error {
	w.t.answered(http.StatusOK) // flushing commits the implicit 200
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets [http.ResponseController] reach the underlying writer for
// deadlines and full duplex.
func (w *tunnelWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// hijackWriter is a tunnelWriter over a writer that can be hijacked
// (HTTP/1). HTTP/2 writers cannot, and their wrapper must not claim to.
type hijackWriter struct {
	tunnelWriter
	hj http.Hijacker
}

// Hijack takes over the connection as the underlying Hijacker does and
// returns it wrapped: its Close releases the tunnel's permit, and the
// status line the handler writes on it (101, or 2xx for CONNECT) tells
// whether the tunnel is established. On error the permit stays with the
// exchange and is released when the handler returns.
func (w *hijackWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := w.hj.Hijack()
	if err != nil {
		return conn, brw, err
	}
	t := w.t
	t.mu.Lock()
	t.hijacked = true
	t.mu.Unlock()
	hc := &hijackedConn{Conn: conn, t: t}
	// A permit stays with a connection the handler forgets to close;
	// collect it with the connection.
	runtime.AddCleanup(hc, func(p limit.Permit[string]) { p.Release() }, t.permit)
	if brw != nil && brw.Writer.Buffered() == 0 {
		// net/http hands out a fresh writer onto the raw connection; ours
		// writes through hc so that the status line is seen.
		brw = bufio.NewReadWriter(brw.Reader, bufio.NewWriterSize(hc, brw.Writer.Size()))
	}
	return hc, brw, nil
}

// hijackedConn is a hijacked tunnel connection. Close releases the permit.
type hijackedConn struct {
	net.Conn
	t *tunnel

	statusMu sync.Mutex
	head     []byte // the start of the answer, until its status is known
}

// Write passes b on and, until the tunnel's status is known, reads the
// status line from the start of what the handler writes.
func (c *hijackedConn) Write(b []byte) (int, error) {
	if !c.t.isDecided() {
		c.sniff(b)
	}
	return c.Conn.Write(b)
}

func (c *hijackedConn) sniff(b []byte) {
	c.statusMu.Lock()
	defer c.statusMu.Unlock()
	need := statusLineMin - len(c.head)
	c.head = append(c.head, b[:min(need, len(b))]...)
	if len(c.head) < statusLineMin {
		return
	}
	code, ok := parseStatusLine(c.head)
	if !ok {
		code = 0 // not an HTTP answer: the tunnel is not established
	}
	c.t.answered(code)
}

// statusLineMin is the length of "HTTP/1.1 101".
const statusLineMin = len("HTTP/1.1 101")

// parseStatusLine reads the status code from the start of an HTTP/1.x
// status line ("HTTP/1.1 101 ..."). It needs the first 12 bytes.
func parseStatusLine(b []byte) (int, bool) {
	if len(b) < statusLineMin || string(b[:7]) != "HTTP/1." || b[7] < '0' || b[7] > '9' || b[8] != ' ' {
		return 0, false
	}
	code := 0
	for _, c := range b[9:12] {
		if c < '0' || c > '9' {
			return 0, false
		}
		code = code*10 + int(c-'0')
	}
	if code < 100 {
		return 0, false
	}
	return code, true
}

// Close closes the connection and releases the tunnel's permit; only the
// first call releases, and it releases even when closing fails.
func (c *hijackedConn) Close() error {
	err := c.Conn.Close()
	c.t.permit.Release()
	return err
}

// CloseWrite half-closes the connection when it supports it (TCP, TLS),
// as tunnels relaying both ways need.
func (c *hijackedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// ReadFrom keeps the connection's io.ReaderFrom (splice on Linux) once the
// status is known; before, bytes go through Write to be sniffed.
func (c *hijackedConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok && c.t.isDecided() {
		return rf.ReadFrom(r)
	}
	return io.Copy(writerOnly{c}, r)
}

// WriteTo keeps the connection's io.WriterTo.
func (c *hijackedConn) WriteTo(w io.Writer) (int64, error) {
	if wt, ok := c.Conn.(io.WriterTo); ok {
		return wt.WriteTo(w)
	}
	return io.Copy(w, readerOnly{c.Conn})
}

type readerOnly struct{ io.Reader }

// wrapTunnel returns the writer the handler of a tunnel request gets.
func wrapTunnel(w http.ResponseWriter, t *tunnel) http.ResponseWriter {
	if hj, ok := w.(http.Hijacker); ok {
		return &hijackWriter{tunnelWriter{w, t}, hj}
	}
	return &tunnelWriter{w, t}
}
