//lint:file-ignore SA1019 net/http serves HTTP/2 only on a *tls.Conn it accepted itself; x/net/http2's Server.ServeConn is the one well-kept server that takes the checked net.Conn.

// Package h2check serves HTTP/2 over TLS with golang.org/x/net/http2 as a
// net/http server's HTTP/2, behind a thin layer that reads the client's
// frames first and makes the server meet the three requirements of RFC
// 9113 it otherwise misses (h2spec 4.2/3, 6.5.3/1, 8.1.2.2/1 and /2):
//
//   - a frame longer than SETTINGS_MAX_FRAME_SIZE fails the connection
//     with FRAME_SIZE_ERROR: the server advertises 16384, the protocol's
//     default (Go's own default, 1 MiB, lets a 20 KB HEADERS frame in);
//   - a SETTINGS frame may name a setting more than once, the last value
//     counting (Go's server hangs up on it);
//   - a request whose header block holds a connection-specific field
//     (Connection, Keep-Alive, Proxy-Connection, Transfer-Encoding,
//     Upgrade, or TE other than "trailers") fails the connection with
//     PROTOCOL_ERROR instead of getting a 400 response.
//
// Everything else is the x/net server's: the layer hands every other byte
// on as it came, reading only HEADERS, CONTINUATION and SETTINGS frames
// whole before it does.
//
// The server's writes go out batched (internal/writebatch): the frames the
// connection's streams produce in one turn of the scheduler leave in one
// TLS record and one system call, where x/net/http2 alone flushes a
// response's HEADERS and its DATA apart.
package h2check

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"

	"golang.org/x/net/http2"

	"github.com/seed-a07d1050/portcullis/internal/writebatch"
)

// MaxFrameSize is the SETTINGS_MAX_FRAME_SIZE a configured server
// advertises, and the longest frame it reads: 16384, the initial value of
// RFC 9113 §6.5.2.
const MaxFrameSize = 16384

// defaultTableSize is the HPACK dynamic table size the server decodes with
// when http.HTTP2Config.MaxDecoderHeaderTableSize is zero (RFC 7541's
// initial 4096, as x/net/http2 uses).
const defaultTableSize = 4096

// maxHeaderString bounds one decoded header string in the layer's own HPACK
// decoder; a block that goes over it is no longer inspected (the server's
// decoder, with a bound no larger, fails the connection for it).
const maxHeaderString = 1 << 20

// Configure makes srv serve HTTP/2 over TLS connections with
// golang.org/x/net/http2 (ConfigureServer) behind the checking layer, and
// sets srv.HTTP2.MaxReadFrameSize to MaxFrameSize (creating srv.HTTP2 when
// nil); the other HTTP2 settings are the server's. Call it before srv
// serves, with the handler, timeouts and HTTP2 settings already set.
// srv.Shutdown then ends HTTP/2 connections gracefully, as it does with
// net/http's own HTTP/2.
//
// The server's writes are batched (writebatch.Conn), so its own
// WriteByteTimeout, which sets a deadline around each of its writes,
// would no longer bound them: Configure takes srv.HTTP2.WriteByteTimeout
// as the batches' writebatch.Config.WriteTimeout and leaves the server's
// unset. A connection whose writes make no progress for that long (a
// client that stops reading) ends with every stream on it; zero means
// no bound.
//
// Configure sets srv.TLSConfig to a new tls.Config when it is nil, and adds
// "h2" and "http/1.1" to its NextProtos. It returns ConfigureServer's error,
// which it has only for a TLSConfig whose CipherSuites, below TLS 1.3, lack
// the ones HTTP/2 requires; srv is then left unchanged but for
// MaxReadFrameSize.
func Configure(srv *http.Server) error {
	if srv.HTTP2 == nil {
		srv.HTTP2 = &http.HTTP2Config{}
	}
	srv.HTTP2.MaxReadFrameSize = MaxFrameSize
	out := writebatch.Config{WriteTimeout: srv.HTTP2.WriteByteTimeout}
	srv.HTTP2.WriteByteTimeout = 0
	h2 := &http2.Server{}
	if err := http2.ConfigureServer(srv, h2); err != nil {
		return fmt.Errorf("h2check: %w", err)
	}
	tableSize := uint32(srv.HTTP2.MaxDecoderHeaderTableSize)
	if tableSize == 0 {
		tableSize = defaultTableSize
	}
	srv.TLSNextProto[http2.NextProtoTLS] = func(hs *http.Server, c *tls.Conn, h http.Handler) {
		h2.ServeConn(NewConn(c, tableSize, out), &http2.ServeConnOpts{
			Context:    baseContext(h),
			Handler:    h,
			BaseConfig: hs,
		})
	}
	return nil
}

// baseContext returns the per-connection context net/http hands to a
// TLSNextProto function through the handler's BaseContext method (as
// x/net/http2's own TLSNextProto function reads it), or nil without one.
func baseContext(h http.Handler) context.Context {
	if bc, ok := h.(interface{ BaseContext() context.Context }); ok {
		return bc.BaseContext()
	}
	return nil
}

// Conn is a TLS connection whose reads pass through the checking layer and
// whose writes are batched (writebatch.Conn: Close sends what is pending
// first). Deadlines and ConnectionState are the TLS connection's. Use it
// for the server side of an HTTP/2 connection only, from its first byte
// (the client preface) on.
type Conn struct {
	*tls.Conn
	in  *inspector
	out *writebatch.Conn
}

var _ net.Conn = (*Conn)(nil)

// NewConn returns c behind the checking layer, for a server that reads
// frames of at most MaxFrameSize bytes and decodes HPACK with a dynamic
// table of at most tableSize bytes, with its writes batched as out says.
func NewConn(c *tls.Conn, tableSize uint32, out writebatch.Config) *Conn {
	return &Conn{Conn: c, in: newInspector(c, MaxFrameSize, tableSize, maxHeaderString), out: writebatch.NewConn(c, out)}
}

// Write queues p for the connection's next batch (writebatch.Conn.Write).
func (c *Conn) Write(p []byte) (int, error) { return c.out.Write(p) }

// Close sends what is pending and closes the TLS connection.
func (c *Conn) Close() error { return c.out.Close() }

// Read reads the client's bytes as the checking layer hands them on.
func (c *Conn) Read(p []byte) (int, error) { return c.in.Read(p) }
