package http1

import (
	"crypto/tls"
	"io"
	"net/http"
)

// A HeadParser parses request heads that its caller read itself, with the
// server's own parser and checks, into the request the server would offer
// to [Server.Exchanges]. An event loop that reads a connection's bytes
// outside the server uses one per connection, and hands the connection to
// [Server.ServeConnWith] for whatever it does not serve, so that the
// server answers it from the same bytes.
//
// Like a connection, a HeadParser reuses its request, Header and strings
// from one head to the next; it is for one goroutine at a time.
type HeadParser struct {
	rr   requestReader
	src  headSource
	tmpl http.Request
}

// headSource hands the reader the one head Parse was given.
type headSource struct{ b []byte }

func (s *headSource) Read(p []byte) (int, error) {
	if len(s.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.b)
	s.b = s.b[n:]
	return n, nil
}

// NewHeadParser returns a parser for the heads of a connection from
// remoteAddr (the request's RemoteAddr), taking heads of at most
// maxHeaderBytes (zero means http.DefaultMaxHeaderBytes) as a Server with
// that MaxHeaderBytes does.
func NewHeadParser(remoteAddr string, maxHeaderBytes int) *HeadParser {
	s := Server{MaxHeaderBytes: maxHeaderBytes}
	p := &HeadParser{}
	p.rr.init(&p.src, s.headLimit())
	p.tmpl = http.Request{Header: p.rr.header, URL: &p.rr.url, RemoteAddr: remoteAddr}
	return p
}

// SetTLS sets the TLS state of the connection whose heads p parses, as
// the requests' TLS; nil, the default, for a plain connection.
func (p *HeadParser) SetTLS(st *tls.ConnectionState) { p.tmpl.TLS = st }

// Parse parses head, one whole request head from its request line to the
// empty line that ends it, and returns the request as [Exchange.Head]
// would: read-only, reused by the next Parse, with context.Background()
// and http.NoBody. It returns false when the server would not offer the
// request to Exchanges: when it would answer the head with an error (or
// find it incomplete, or followed by more bytes), or when the request has
// a body or an Expect field, or is "OPTIONS *".
func (p *HeadParser) Parse(head []byte) (*http.Request, bool) {
	rr := &p.rr
	p.src.b = head
	rr.in.reset(&p.src)
	rr.lastPOST = false
	if err := rr.readHead(); err != nil || rr.in.buffered() != 0 || len(p.src.b) != 0 {
		return nil, false
	}
	if rr.contentLength != 0 || rr.chunked || rr.flags&keyExpect != 0 || rr.target == "*" && rr.method == "OPTIONS" || rr.h2Upgrade {
		return nil, false
	}
	fillRequest(&p.tmpl, rr, http.NoBody)
	return &p.tmpl, true
}

// Release returns the parser's buffer to the server's pool; the parser
// must not be used after.
func (p *HeadParser) Release() {
	if p.rr.in.buf != nil {
		putReadBuf(p.rr.in.buf)
		p.rr.in.buf = nil
	}
}
