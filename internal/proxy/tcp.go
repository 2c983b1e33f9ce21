package proxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// tcpDialTimeout bounds connecting to a tcp listener's upstream.
const tcpDialTimeout = 10 * time.Second

// tcpProxy copies the bytes of each admitted connection to a new connection
// to the upstream and back, until both directions end.
type tcpProxy struct {
	upstream  string
	log       *slog.Logger
	accessLog bool

	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{} // client and upstream conns, for closeAll
}

func newTCPProxy(upstream string, log *slog.Logger, accessLog bool) *tcpProxy {
	return &tcpProxy{upstream: upstream, log: log, accessLog: accessLog, conns: make(map[net.Conn]struct{})}
}

// serve accepts from ln until it is closed. Temporary accept errors are
// retried after a short pause; connlimit already backs off on them.
func (p *tcpProxy) serve(ctx context.Context, ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			p.log.Warn("accept failed", "error", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if !p.track(c) {
			_ = c.Close()
			continue
		}
		p.wg.Add(1)
		go p.handle(ctx, c)
	}
}

// track registers c so that closeAll can cut it; it reports false once
// closeAll has run.
func (p *tcpProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *tcpProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// handle proxies one client connection and closes it, which releases its
// connection slot.
func (p *tcpProxy) handle(ctx context.Context, client net.Conn) {
	defer p.wg.Done()
	defer p.untrack(client)
	defer client.Close()
	start := time.Now()
	d := net.Dialer{Timeout: tcpDialTimeout}
	up, err := d.DialContext(ctx, "tcp", p.upstream)
	if err != nil {
		p.log.Warn("upstream dial failed", "client", client.RemoteAddr().String(), "upstream", p.upstream, "error", err)
		return
	}
	if !p.track(up) {
		_ = up.Close()
		return
	}
	defer p.untrack(up)
	defer up.Close()
	var in, out int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		out, _ = io.Copy(up, client)
		closeWrite(up)
	}()
	in, _ = io.Copy(client, up)
	closeWrite(client)
	<-done
	if p.accessLog {
		p.log.Info("access", "client", client.RemoteAddr().String(), "upstream", p.upstream,
			"bytes_in", out, "bytes_out", in, "duration", time.Since(start))
	}
}

// closeWrite half-closes c when it can, so the peer sees the end of the
// other direction; otherwise it closes c.
func closeWrite(c net.Conn) {
	type closeWriter interface{ CloseWrite() error }
	if u, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = u.NetConn() // a connlimit conn: half-close the socket under it
	}
	if cw, ok := c.(closeWriter); ok {
		if cw.CloseWrite() == nil {
			return
		}
	}
	_ = c.Close()
}

// shutdown waits for the proxied connections to end until ctx ends, then
// closes those left. The listener must be closed already.
func (p *tcpProxy) shutdown(ctx context.Context) error {
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		p.closeAll()
		<-done
		return ctx.Err()
	}
}

// closeAll closes every connection and refuses new ones.
func (p *tcpProxy) closeAll() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for c := range conns {
		_ = c.Close()
	}
}
