package intercept

import (
	"container/list"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"

	"github.com/seed-a07d1050/portcullis/internal/upstream"
)

// connPool bounds the idle target connections of an [Upstream] over every
// target, HTTP/2 included: net/http's Transport caps its idle HTTP/1.1
// connections (MaxIdleConns) but keeps every HTTP/2 connection it made
// until its idle timeout, so that clients reaching many names (a wildcard
// DNS) could make the proxy hold one socket per name. The pool sees every
// connection the Transports dial, learns which one each request runs on
// (httptrace's GotConn) and when it ends (its body closed or read to the
// end), and when more than maxIdle are idle, or more than maxPerHost of
// one target, closes those idle longest. A connection is idle from its
// dial until its first request, and between requests; one that switched
// protocols (101) stays busy until it closes.
//
// So the sockets an Upstream holds are bounded by the requests in
// progress plus maxIdle.
type connPool struct {
	dial       func(ctx context.Context, network, addr string) (net.Conn, error)
	maxIdle    int // ≥ 0
	maxPerHost int // ≥ 0

	mu    sync.Mutex
	idle  list.List      // of *poolConn, most recently idle first
	per   map[string]int // idle connections per target
	open  int
	evict uint64
}

func newConnPool(dial func(context.Context, string, string) (net.Conn, error), maxIdle, maxPerHost int) *connPool {
	return &connPool{dial: dial, maxIdle: maxIdle, maxPerHost: maxPerHost, per: make(map[string]int)}
}

// A poolConn is a target connection the pool tracks.
type poolConn struct {
	net.Conn
	p      *connPool
	host   string
	active int           // requests running on it (under p.mu)
	elem   *list.Element // in p.idle while idle; nil otherwise
	closed bool
}

// DialContext dials addr and tracks the connection, idle until a request
// takes it.
func (p *connPool) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := p.dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	pc := &poolConn{Conn: c, p: p, host: addr}
	p.mu.Lock()
	p.open++
	p.putIdle(pc)
	victims := p.over(pc)
	p.mu.Unlock()
	closeAll(victims)
	return pc, nil
}

func (c *poolConn) Close() error {
	p := c.p
	p.mu.Lock()
	if !c.closed {
		c.closed = true
		p.open--
		p.takeIdle(c)
	}
	p.mu.Unlock()
	return c.Conn.Close()
}

// putIdle and takeIdle move c in and out of the idle list; p.mu held.
func (p *connPool) putIdle(c *poolConn) {
	if c.elem == nil && !c.closed {
		c.elem = p.idle.PushFront(c)
		p.per[c.host]++
	}
}

func (p *connPool) takeIdle(c *poolConn) {
	if c.elem != nil {
		p.idle.Remove(c.elem)
		c.elem = nil
		if p.per[c.host]--; p.per[c.host] <= 0 {
			delete(p.per, c.host)
		}
	}
}

// over takes out of the idle list, and returns for closing, the
// connections idle longest beyond the bounds, never keep; p.mu held.
func (p *connPool) over(keep *poolConn) []*poolConn {
	var out []*poolConn
	for e := p.idle.Back(); e != nil && (p.idle.Len() > p.maxIdle || p.per[keep.host] > p.maxPerHost); {
		prev := e.Prev()
		c := e.Value.(*poolConn)
		if c != keep && (p.idle.Len() > p.maxIdle || c.host == keep.host) {
			p.takeIdle(c)
			out = append(out, c)
			p.evict++
		}
		e = prev
	}
	return out
}

func closeAll(cs []*poolConn) {
	for _, c := range cs {
		_ = c.Close()
	}
}

// busy marks the connection a request got.
func (p *connPool) busy(c *poolConn) {
	p.mu.Lock()
	c.active++
	p.takeIdle(c)
	p.mu.Unlock()
}

// release marks the end of a request on c; when none is left on it, c is
// idle and the bounds are applied.
func (p *connPool) release(c *poolConn) {
	p.mu.Lock()
	c.active--
	var victims []*poolConn
	if c.active == 0 {
		p.putIdle(c)
		victims = p.over(c)
	}
	p.mu.Unlock()
	closeAll(victims)
}

// Open returns the target connections open now.
func (p *connPool) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open
}

// roundTrip sends req with rt, recording which connection it runs on, and
// releases that connection when the response's body is done (at once for
// an error; never for a 101, whose connection is the client's until it
// closes).
func (p *connPool) roundTrip(rt http.RoundTripper, req *http.Request) (*http.Response, error) {
	var mu sync.Mutex
	var got []*poolConn
	var tap *upstream.TapConn
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		c := info.Conn
		if t, ok := c.(*upstream.TapConn); ok {
			t.Arm()
			mu.Lock()
			if tap != nil && tap != t {
				tap.Disarm()
			}
			tap = t
			mu.Unlock()
			c = t.Conn
		}
		if tc, ok := c.(*tls.Conn); ok {
			c = tc.NetConn()
		}
		if pc, ok := c.(*poolConn); ok {
			p.busy(pc)
			mu.Lock()
			got = append(got, pc)
			mu.Unlock()
		}
	}}
	resp, err := rt.RoundTrip(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
	mu.Lock()
	conns := got
	got = nil
	t := tap
	mu.Unlock()
	if t != nil {
		b := t.Disarm()
		if resp != nil && resp.Close {
			for _, name := range upstream.FinalCloseNamed(b) {
				delete(resp.Header, name)
			}
		}
	}
	done := func() {
		for _, c := range conns {
			p.release(c)
		}
	}
	switch {
	case err != nil || resp == nil:
		done()
	case resp.StatusCode == http.StatusSwitchingProtocols:
		// busy until the connection closes
	default:
		resp.Body = &releaseBody{ReadCloser: resp.Body, done: sync.OnceFunc(done)}
	}
	return resp, err
}

// releaseBody calls done once, at EOF, at an error or at Close.
type releaseBody struct {
	io.ReadCloser
	done func()
}

func (b *releaseBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.done()
	}
	return n, err
}

func (b *releaseBody) Close() error {
	err := b.ReadCloser.Close()
	b.done()
	return err
}
