package quicadmit

import (
	"context"
	"crypto/tls"
	"errors"
	"net"

	"github.com/quic-go/quic-go"
)

// An Acceptor is what [*quic.Listener] and [*quic.EarlyListener] have in
// common; http3.QUICListener is the same interface.
type Acceptor interface {
	Accept(context.Context) (*quic.Conn, error)
	Addr() net.Addr
	Close() error
}

var (
	_ Acceptor = (*quic.Listener)(nil)
	_ Acceptor = (*quic.EarlyListener)(nil)
	_ Acceptor = (*Listener)(nil)
)

var errNilTransport = errors.New("quicadmit: nil transport")

// A Listener accepts connections from a quic-go listener and tells its
// Controller when each admitted attempt's handshake completes. It is an
// [Acceptor], so it can be passed to http3.Server.ServeListener.
type Listener struct {
	c     *Controller
	inner Acceptor
}

// WrapListener returns a Listener that accepts from ln. ln should belong to
// a transport attached to c; connections that c did not admit pass through
// untouched.
func (c *Controller) WrapListener(ln Acceptor) *Listener {
	return &Listener{c: c, inner: ln}
}

// Listen attaches c to tr unless it already is, starts tr.Listen, and wraps
// the result. Accept then returns connections whose handshake completed.
func (c *Controller) Listen(tr *quic.Transport, tlsConf *tls.Config, conf *quic.Config) (*Listener, error) {
	if err := c.attachOnce(tr); err != nil {
		return nil, err
	}
	ln, err := tr.Listen(tlsConf, conf)
	if err != nil {
		return nil, err
	}
	return c.WrapListener(ln), nil
}

// ListenEarly is Listen with tr.ListenEarly: Accept may return a
// connection before its handshake completes (0.5-RTT and 0-RTT data, as
// http3 uses), and the attempt ends when it completes or fails.
func (c *Controller) ListenEarly(tr *quic.Transport, tlsConf *tls.Config, conf *quic.Config) (*Listener, error) {
	if err := c.attachOnce(tr); err != nil {
		return nil, err
	}
	ln, err := tr.ListenEarly(tlsConf, conf)
	if err != nil {
		return nil, err
	}
	return c.WrapListener(ln), nil
}

func (c *Controller) attachOnce(tr *quic.Transport) error {
	if err := c.Attach(tr); err != nil && !errors.Is(err, ErrAlreadyAttached) {
		return err
	}
	return nil
}

// Accept returns the next connection, as the wrapped listener's Accept
// does, and its error unchanged. A connection whose handshake completed is
// counted as completed before it is returned; one still handshaking (from
// an early listener) is watched until it completes or closes. A completed
// connection whose client is over its per-client cap is closed with
// Config.PerClientCloseCode and not returned; Accept then waits for the
// next one.
func (l *Listener) Accept(ctx context.Context) (*quic.Conn, error) {
	for {
		conn, err := l.inner.Accept(ctx)
		if err != nil {
			return nil, err
		}
		if l.admitAccepted(conn) {
			return conn, nil
		}
	}
}

// admitAccepted reports whether conn goes to the application.
func (l *Listener) admitAccepted(conn *quic.Conn) bool {
	a := attemptOf(conn.Context())
	if a == nil {
		return true
	}
	select {
	case <-conn.HandshakeComplete():
		return a.complete(conn)
	default:
		go a.watch(conn)
		return true
	}
}

// watch waits for an early connection's handshake to complete. If the
// connection closes first, the context callback armed at admission counts
// it. The goroutine ends with the handshake or the connection.
func (a *attempt) watch(conn *quic.Conn) {
	select {
	case <-conn.HandshakeComplete():
		a.complete(conn)
	case <-conn.Context().Done():
	}
}

// Addr returns the wrapped listener's address.
func (l *Listener) Addr() net.Addr { return l.inner.Addr() }

// Close closes the wrapped listener and returns its error. quic-go then
// closes the connections still handshaking; their attempts end as
// abandoned.
func (l *Listener) Close() error { return l.inner.Close() }
