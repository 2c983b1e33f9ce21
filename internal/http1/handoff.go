package http1

import (
	"crypto/tls"
	"net"
	"sync"
)

// Handoff is a net.Listener whose connections are handed to it, for
// serving the TLS connections that negotiated HTTP/2 with an
// [http.Server] beside a [Server]:
//
//	h := http1.NewHandoff(ln.Addr())
//	h1 := &http1.Server{Handler: hnd, TLSNextProto: map[string]func(*tls.Conn){"h2": h.Deliver}}
//	h2 := &http.Server{Handler: hnd} // its HTTP/2 support is configured by Serve
//	go h2.Serve(h)
//	h1.Serve(tls.NewListener(ln, cfg)) // cfg.NextProtos = {"h2", "http/1.1"}
//
// http.Server finds the handshake done and the protocol chosen, and
// serves the connection as it would one it accepted itself.
type Handoff struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

// NewHandoff returns a Handoff whose Addr is addr.
func NewHandoff(addr net.Addr) *Handoff {
	return &Handoff{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

// Deliver passes c to the goroutine blocked in Accept, waiting for one; if
// the Handoff is closed first, it closes c.
func (h *Handoff) Deliver(c *tls.Conn) {
	select {
	case h.conns <- c:
	case <-h.done:
		_ = c.Close()
	}
}

// Accept returns the next delivered connection, or net.ErrClosed once the
// Handoff is closed.
func (h *Handoff) Accept() (net.Conn, error) {
	select {
	case c := <-h.conns:
		return c, nil
	case <-h.done:
		return nil, net.ErrClosed
	}
}

// Close makes Accept fail and later deliveries close their connection.
// Connections already accepted are not touched.
func (h *Handoff) Close() error {
	h.once.Do(func() { close(h.done) })
	return nil
}

// Addr returns the address given to NewHandoff.
func (h *Handoff) Addr() net.Addr { return h.addr }

var _ net.Listener = (*Handoff)(nil)
