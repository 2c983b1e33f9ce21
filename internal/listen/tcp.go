package listen

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// tcpDialTimeout bounds connecting to a tcp listener's upstream.
const tcpDialTimeout = 10 * time.Second

// tcpProxy copies the bytes of each admitted connection to a new connection
// to the upstream and back, until both directions end or no byte has moved
// for the idle timeout.
type tcpProxy struct {
	upstream  string
	idle      time.Duration // > 0
	log       *slog.Logger
	accessLog bool

	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{} // client and upstream conns, for closeAll
}

func newTCPProxy(upstream string, idle time.Duration, log *slog.Logger, accessLog bool) *tcpProxy {
	return &tcpProxy{upstream: upstream, idle: idle, log: log, accessLog: accessLog, conns: make(map[net.Conn]struct{})}
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
	w := newIdleWatch(client, up, p.idle)
	defer w.stop()
	var in, out int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		out, _ = io.Copy(w.writer(up), client)
		closeWrite(up)
	}()
	in, _ = io.Copy(w.writer(client), up)
	closeWrite(client)
	<-done
	idle := w.stop()
	if idle {
		p.log.Debug("tcp connection closed: idle", "client", client.RemoteAddr().String(), "idle_timeout", p.idle)
	}
	if p.accessLog {
		p.log.Info("access", "client", client.RemoteAddr().String(), "upstream", p.upstream,
			"bytes_in", out, "bytes_out", in, "duration", time.Since(start), "idle_timeout", idle)
	}
}

// An idleWatch closes both ends of a proxied connection once no byte has
// moved in either direction for its timeout, so that the connection's
// slot comes back: a copy blocked on a silent peer never ends by itself,
// not even after the other direction reached EOF. The copies write through
// activityWriters, which note the time of each write once it completed; a
// write that makes no progress (a peer that stopped reading) is no
// activity, and neither is one that takes longer than the timeout to
// place io.Copy's 32 KiB buffer (a peer reading under about 32 KiB per
// timeout, some 100 bytes a second at the default of 5 minutes).
//
// The copies then go through a buffer rather than splice(2), which
// io.Copy would use between two TCP sockets. That cost nothing measurable:
// BenchmarkTCPProxy moved 1 MiB in a median 0.92 ms this way and 1.17 ms
// with splice and the idle time read from the kernel (TCP_INFO) instead,
// six interleaved runs each on the shared 2-core machine (benchstat: no
// significant difference, p=0.39), so the simpler way stays.
type idleWatch struct {
	client, up net.Conn
	timeout    time.Duration
	last       atomic.Int64 // Unix nanoseconds of the last write that moved bytes
	mu         sync.Mutex
	timer      *time.Timer // nil once stopped
	cut        bool        // the watch closed the connection
}

func newIdleWatch(client, up net.Conn, timeout time.Duration) *idleWatch {
	w := &idleWatch{client: client, up: up, timeout: timeout}
	w.last.Store(time.Now().UnixNano())
	w.mu.Lock()
	w.timer = time.AfterFunc(timeout, w.check)
	w.mu.Unlock()
	return w
}

// writer returns dst as the copy toward it writes to it.
func (w *idleWatch) writer(dst net.Conn) io.Writer { return activityWriter{dst, &w.last} }

// check runs on the watch's timer: it closes both ends when the connection
// has been idle for the timeout, and otherwise looks again when it would
// be.
func (w *idleWatch) check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer == nil {
		return
	}
	idle := time.Since(time.Unix(0, w.last.Load()))
	if idle < w.timeout {
		w.timer.Reset(w.timeout - idle)
		return
	}
	w.cut = true
	w.timer = nil
	// Closing both ends makes both copies return, and handle gives the
	// slot back.
	_ = w.client.Close()
	_ = w.up.Close()
}

// stop ends the watch and reports whether it had closed the connection.
func (w *idleWatch) stop() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
	return w.cut
}

// activityWriter notes the time of every write that moved bytes.
type activityWriter struct {
	w    io.Writer
	last *atomic.Int64
}

func (a activityWriter) Write(b []byte) (int, error) {
	n, err := a.w.Write(b)
	if n > 0 {
		a.last.Store(time.Now().UnixNano())
	}
	return n, err
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
