package upstream

import (
	"bufio"
	"context"
	"net"
	"net/http"
)

// Adopt reads the response to a request that another sender began: nc is
// a connection to h.Addr on which h.Bytes were sent whole, and whose next
// bytes, as nc returns them, are the response's from its first (a caller
// that read some of them already puts them back in front). It reads the
// response as SendHead would have, with opts as SendHead takes them, the
// head deadline counting from opts.Now (zero: now), and returns it. The
// connection then belongs to the transport, which closes it once the
// body ends: an adopted connection is never kept, as nothing vouches for
// what the other sender left on it. On error nc is closed.
func (t *Transport) Adopt(ctx context.Context, nc net.Conn, h Head, opts SendOptions) (*http.Response, error) {
	head, err := headOf(h)
	if err != nil {
		nc.Close()
		return nil, err
	}
	_, deadline := t.applyOptions(&head, opts)
	head.close = true
	c := newConn(nc, hostPort(h.Addr))
	x := &exchange{t: t, c: c, ctx: ctx}
	c.beginExchange(t.cfg.MaxResponseHeaderBytes)
	c.headDeadline(deadline, head.slack)
	x.deadline = !deadline.IsZero()
	x.stop = afterFunc(ctx, c.abort)
	x.br = readerPool.Get().(*bufio.Reader)
	x.br.Reset(c)
	resp, err := x.readHead(head)
	if err != nil {
		return nil, x.fail("read response head", err)
	}
	resp, _, err = x.headRead(resp, head)
	return resp, err
}
