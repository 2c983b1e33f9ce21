//go:build linux

package evloop

import (
	"crypto/tls"
	"io"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// TLS on the loops: Go's poller runs the handshake, as for any TLS
// connection; then a loop takes the socket and serves the connection's
// HTTP/1.x with crypto/tls's record layer over a transport of its own
// (tlsTransport), which reads and writes the loop's duplicate of the
// socket without waiting. crypto/tls keeps a connection usable after its
// transport fails a read with a net.Error whose Temporary() is true (its
// readRecordOrCCS keeps only other errors as the connection's), and
// keeps the part of a record it read, so the loop can read until the
// socket is empty and go on at the next edge. A failed write is the
// connection's end for crypto/tls, so the transport never fails one: it
// keeps the records the socket does not take and the loop writes them
// out at the next EPOLLOUT edge. Post-handshake messages (a client's
// KeyUpdate) stay crypto/tls's: it answers them through the same
// transport.

// TLSServer returns the server side of a TLS connection over c, as
// tls.Server does, over a transport a loop can take over once the
// handshake is done: Server.Serve serves only TLS connections made so.
func TLSServer(c net.Conn, config *tls.Config) *tls.Conn {
	return tls.Server(&tlsTransport{Conn: c, owner: c, fd: -1}, config)
}

// NewTLSListener returns a listener whose Accept returns the connections
// of inner as TLSServer makes them, as tls.NewListener does.
func NewTLSListener(inner net.Listener, config *tls.Config) net.Listener {
	return &tlsListener{Listener: inner, config: config}
}

type tlsListener struct {
	net.Listener
	config *tls.Config
}

func (l *tlsListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return TLSServer(c, l.config), nil
}

// tlsTransport is what a tls.Conn made by TLSServer reads and writes: the
// accepted connection while Go's poller serves it, the loop's socket
// while a loop does, and the socket given back to Go's poller after.
type tlsTransport struct {
	// Conn is the connection for I/O in Go's poller: owner until a loop
	// takes the socket, the socket it gives back after.
	net.Conn
	owner net.Conn // the accepted connection: its addresses, what its wrappers hold (a cap's slot)
	fd    int      // the loop's socket while a loop serves the connection; -1 otherwise
	out   []byte   // records for the socket, written while a loop served, not taken yet
	off   int      // out[off:] is left

	// On a loop, Read gives crypto/tls no byte past the end of the record
	// it is reading (see records), so that once it returns plaintext it
	// holds no ciphertext it read on the loop: whether more waits is then
	// the transport's to say (more), and a read that found the socket
	// drained spares the loop one more read to find it empty, as on plain
	// connections. (What crypto/tls read in Go's poller, before, it
	// processes first: drained stays false until the loop's first read
	// found the socket empty.)
	rec     records
	spill   []byte // bytes read past the record's end, for the next Reads
	drained bool   // the last read of the socket returned less than it asked for
}

// records follows the record boundaries of a stream of TLS records: a
// record is a 5-byte header whose last two bytes are the length of the
// body that follows.
type records struct {
	hdr  [5]byte
	hdrN int // bytes of the current record's header seen
	left int // bytes of its body not seen yet, once its header is whole
}

// take advances over b's first bytes up to the end of the current
// record, and returns how many that is: all of b when the record goes on
// past it.
func (r *records) take(b []byte) int {
	n := 0
	for n < len(b) {
		if r.hdrN < len(r.hdr) {
			r.hdr[r.hdrN] = b[n]
			r.hdrN++
			n++
			if r.hdrN == len(r.hdr) {
				r.left = int(r.hdr[3])<<8 | int(r.hdr[4])
				if r.left == 0 {
					r.hdrN = 0
					return n
				}
			}
			continue
		}
		k := min(r.left, len(b)-n)
		n += k
		if r.left -= k; r.left == 0 {
			r.hdrN = 0
			return n
		}
	}
	return n
}

// skip advances over b, whatever records it holds.
func (r *records) skip(b []byte) {
	for len(b) > 0 {
		b = b[r.take(b):]
	}
}

// more reports whether, on a loop, bytes may wait that crypto/tls has not
// been given: some were read past a record's end, or the last read of
// the socket filled what it was given.
func (t *tlsTransport) more() bool { return len(t.spill) > 0 || !t.drained }

// errWouldBlock is what the transport's Read returns on a loop when the
// socket has nothing more yet: temporary, so crypto/tls goes on after it.
var errWouldBlock error = wouldBlock{}

type wouldBlock struct{}

func (wouldBlock) Error() string   { return "evloop: no more bytes on the socket yet" }
func (wouldBlock) Timeout() bool   { return false }
func (wouldBlock) Temporary() bool { return true }

func (t *tlsTransport) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if len(t.spill) > 0 {
		n := t.rec.take(t.spill[:min(len(t.spill), len(p))])
		copy(p, t.spill[:n])
		t.spill = t.spill[n:]
		if len(t.spill) == 0 {
			t.spill = nil
		}
		return n, nil
	}
	n, err := t.readSocket(p)
	if n == 0 {
		return 0, err
	}
	if t.fd < 0 {
		// In Go's poller crypto/tls may hold what it likes; the records
		// are only counted, from the first byte, so that a loop that
		// takes the connection knows where the next one begins: the
		// read that took the client's Finished may have taken the start
		// of its first request's record too.
		t.rec.skip(p[:n])
		return n, err
	}
	if end := t.rec.take(p[:n]); end < n {
		t.spill = append([]byte(nil), p[end:n]...)
		return end, nil // err, if any, comes again after the spill
	}
	return n, err
}

// readSocket reads from the socket, the loop's or Go's poller's.
func (t *tlsTransport) readSocket(p []byte) (int, error) {
	if t.fd < 0 {
		if err := t.flushBlocking(); err != nil {
			return 0, err
		}
		return t.Conn.Read(p)
	}
	n, err := rawRead(t.fd, p)
	switch {
	case err == unix.EAGAIN:
		t.drained = true
		return 0, errWouldBlock
	case err != nil:
		return 0, &net.OpError{Op: "read", Net: "tcp", Addr: t.owner.RemoteAddr(), Err: err}
	case n == 0:
		return 0, io.EOF
	}
	t.drained = n < len(p)
	return n, nil
}

// Write, on a loop, keeps p for the socket: crypto/tls writes each
// record with its own Write, and the loop sends them together (flush).
func (t *tlsTransport) Write(p []byte) (int, error) {
	if t.fd < 0 {
		if err := t.flushBlocking(); err != nil {
			return 0, err
		}
		return t.Conn.Write(p)
	}
	t.out = append(t.out, p...)
	return len(p), nil
}

// flush writes what the socket takes of the records kept for it; it
// returns unix.EAGAIN when some are left.
func (t *tlsTransport) flush() error {
	for t.off < len(t.out) {
		k, err := rawWrite(t.fd, t.out[t.off:])
		if err != nil {
			return err
		}
		t.off += k
	}
	t.emptied()
	return nil
}

// maxKeptOut bounds the record buffer a connection keeps between
// answers; a larger one, grown by a large answer, goes with it.
const maxKeptOut = 16 << 10

func (t *tlsTransport) emptied() {
	t.off = 0
	t.out = t.out[:0]
	if cap(t.out) > maxKeptOut {
		t.out = nil
	}
}

// pending reports whether records wait for the socket.
func (t *tlsTransport) pending() bool { return t.off < len(t.out) }

// flushBlocking writes the records a loop left, once the connection is
// Go's poller's again.
func (t *tlsTransport) flushBlocking() error {
	if !t.pending() {
		return nil
	}
	_, err := t.Conn.Write(t.out[t.off:])
	t.emptied()
	return err
}

// takenBy hands the transport's I/O to a loop's socket fd.
func (t *tlsTransport) takenBy(fd int) { t.fd = fd }

// givenBack hands the transport's I/O to sock, the loop's socket in Go's
// poller again, once the loop let go of its own descriptor (bytes read
// past a record still come first). With a nil sock (none could be made, or
// the loop closed the connection) it stays with the accepted connection,
// whose socket is closed: I/O fails.
func (t *tlsTransport) givenBack(sock net.Conn) {
	t.fd = -1
	if sock != nil {
		t.Conn = sock
	}
}

// Close closes the socket and what the accepted connection holds. On a
// loop, whose socket the loop closes itself after, the records kept (a
// close_notify alert) get one try first.
func (t *tlsTransport) Close() error {
	if t.fd >= 0 {
		_ = t.flush()
		return t.owner.Close()
	}
	var err error
	if t.Conn != t.owner {
		err = t.Conn.Close()
	}
	if oerr := t.owner.Close(); err == nil {
		err = oerr
	}
	return err
}

func (t *tlsTransport) LocalAddr() net.Addr  { return t.owner.LocalAddr() }
func (t *tlsTransport) RemoteAddr() net.Addr { return t.owner.RemoteAddr() }

// The deadlines are Go's poller's: a loop keeps its own.
func (t *tlsTransport) SetDeadline(d time.Time) error {
	if t.fd >= 0 {
		return nil
	}
	return t.Conn.SetDeadline(d)
}

func (t *tlsTransport) SetReadDeadline(d time.Time) error {
	if t.fd >= 0 {
		return nil
	}
	return t.Conn.SetReadDeadline(d)
}

func (t *tlsTransport) SetWriteDeadline(d time.Time) error {
	if t.fd >= 0 {
		return nil
	}
	return t.Conn.SetWriteDeadline(d)
}

// NetConn returns the accepted connection, so that what finds a
// connection's origin through wrappers (connlimit.KeyOf) finds it.
func (t *tlsTransport) NetConn() net.Conn { return t.owner }

// tlsSession is a loop's TLS connection: crypto/tls over the transport.
type tlsSession struct {
	tc    *tls.Conn
	t     *tlsTransport
	state tls.ConnectionState
}

// maxRecordsPerWrite bounds the plaintext written into records at once:
// the records wait in the transport until the socket takes them all, so
// it bounds what a slow client makes the loop hold besides the answer.
const maxRecordsPerWrite = 16 << 10

// read returns plaintext as rawRead returns bytes: 0 with a nil error at
// the end of the stream (a close_notify alert, or the end without one at
// a record's boundary), unix.EAGAIN when no whole record is in yet.
func (s *tlsSession) read(b []byte) (int, error) {
	n, err := s.tc.Read(b)
	switch {
	case n > 0:
		return n, nil // err: at most the read looking for a close_notify after the record
	case err == errWouldBlock:
		return 0, unix.EAGAIN
	case err == io.EOF:
		return 0, nil
	case err == nil:
		return 0, io.ErrNoProgress // crypto/tls never returns it: read on, the loop would wait for an edge that may not come
	}
	return 0, err
}

// write writes the records of b's first bytes, up to maxRecordsPerWrite,
// and what the socket takes of them; it returns how much of b went into
// records. It first writes out the records left from before, and takes
// nothing of b (unix.EAGAIN) while some are left. An empty b only writes
// out what was left.
func (s *tlsSession) write(b []byte) (int, error) {
	if err := s.t.flush(); err != nil {
		return 0, err
	}
	if len(b) == 0 {
		return 0, nil
	}
	b = b[:min(len(b), maxRecordsPerWrite)]
	if _, err := s.tc.Write(b); err != nil {
		return 0, err
	}
	if err := s.t.flush(); err != nil && err != unix.EAGAIN {
		return 0, err
	}
	return len(b), nil
}

// tlsHanded is a TLS connection a loop gives back: the tls.Conn, its I/O
// in Go's poller again, with the plaintext the loop read first.
type tlsHanded struct {
	prefixConn // over the tls.Conn
}

// ConnectionState returns the TLS connection's, for the server it goes
// to (http.Request.TLS).
func (c *tlsHanded) ConnectionState() tls.ConnectionState {
	return c.Conn.(*tls.Conn).ConnectionState()
}
