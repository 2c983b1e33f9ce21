package forward

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// serveConnect opens a tunnel to t: dial under the policy, answer 200,
// relay both ways.
func (p *Proxy) serveConnect(w http.ResponseWriter, r *http.Request, t Target) {
	if p.isClosed() {
		p.refuse(w, r, errClosed)
		return
	}
	if r.ProtoMajor >= 2 {
		// http.Server's ReadTimeout and WriteTimeout bound each HTTP/2
		// stream from its start; a tunnel has its own bounds (the dial
		// timeout, then the idle watchdog and the lifetime). Over HTTP/1.1
		// the deadlines are cleared once the connection is taken over.
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Time{})
		_ = rc.SetWriteDeadline(time.Time{})
	}
	addr, err := dialAddress(r, t)
	if err != nil && err != errNoPin {
		p.targetFailed(w, r, err) // ResolveTargets found no address
		return
	}
	conn, err := p.dialer.DialContext(r.Context(), "tcp", addr)
	if err != nil {
		p.targetFailed(w, r, err)
		return
	}
	rl := newRelay(conn, p.idle)
	if !p.track(rl) {
		conn.Close()
		p.refuse(w, r, errClosed)
		return
	}
	defer p.untrack(rl)
	if p.lifetime > 0 {
		stop := time.AfterFunc(p.lifetime, func() { rl.abortFor("tunnel lifetime reached") })
		defer stop.Stop()
	}
	if r.ProtoMajor == 1 {
		p.tunnelHTTP1(w, r, rl)
	} else {
		p.tunnelHTTP2(w, r, rl)
	}
	rl.end("closed", true) // both sides closed, whatever ended the tunnel
	// An end begun elsewhere (watchdog, Close) may still be touching the
	// stream; it must be done before the handler returns and net/http
	// recycles the ResponseWriter.
	<-rl.ended
	p.log.LogAttrs(r.Context(), slog.LevelDebug, "tunnel closed",
		slog.String("target", t.String()),
		slog.String("client", r.RemoteAddr),
		slog.Int64("bytes_up", rl.up.Load()),
		slog.Int64("bytes_down", rl.down.Load()),
		slog.String("reason", rl.why()))
}

// establishedLine is the answer to a CONNECT over HTTP/1.1.
const establishedLine = "HTTP/1.1 200 Connection established\r\n\r\n"

// tunnelHTTP1 takes over the client's connection (through whatever
// middleware wraps it, so that a limiter sees the 200 and keeps its permit
// until the connection closes) and relays.
func (p *Proxy) tunnelHTTP1(w http.ResponseWriter, r *http.Request, rl *relay) {
	cc, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		rl.target.Close()
		writePlain(w, http.StatusInternalServerError, "internal server error: cannot take over the connection for the tunnel\n")
		return
	}
	if !rl.setClient(cc, nil) {
		return // the proxy closed meanwhile; setClient closed cc
	}
	// net/http may leave its read or write deadlines on a hijacked
	// connection; the relay has its own watchdog instead.
	_ = cc.SetDeadline(time.Time{})
	if _, err := io.WriteString(cc, establishedLine); err != nil {
		rl.abortFor("client gone before the tunnel opened")
		return
	}
	// Bytes the client sent right after its CONNECT head (a TLS
	// ClientHello, say) are in the server's buffer: they go first.
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		if _, err := rl.target.Write(b); err != nil {
			rl.abortFor("target gone before the tunnel opened")
			return
		}
		rl.up.Add(int64(n))
	}
	client := endpoint{r: cc, w: cc, closeWrite: closeWriter(cc)}
	rl.pump(client, endpoint{r: rl.target, w: rl.target, closeWrite: closeWriter(rl.target)})
}

// tunnelHTTP2 relays over the CONNECT stream: the request body carries the
// client's bytes, the response body the target's (RFC 9113 §8.5).
func (p *Proxy) tunnelHTTP2(w http.ResponseWriter, r *http.Request, rl *relay) {
	rc := http.NewResponseController(w)
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		rl.abortFor("client gone before the tunnel opened")
		return
	}
	// Ending must unblock a read of the request body, which only a
	// deadline can do on a stream; aborting must also unblock a write of
	// the response, and a past write deadline resets the stream.
	past := time.Unix(1, 0)
	stop := func(graceful bool) {
		_ = rc.SetReadDeadline(past)
		if !graceful {
			_ = rc.SetWriteDeadline(past)
		}
	}
	if !rl.setClient(nil, stop) {
		return
	}
	// The stream has no half-close short of the handler returning, so the
	// tunnel ends when the target closes its side (closeWrite nil).
	client := endpoint{r: r.Body, w: w, flush: rc.Flush}
	rl.pump(client, endpoint{r: rl.target, w: rl.target, closeWrite: closeWriter(rl.target)})
}

func closeWriter(c net.Conn) func() error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite
	}
	return nil
}

// An endpoint is one side of a tunnel.
type endpoint struct {
	r          io.Reader
	w          io.Writer
	flush      func() error // after each write; nil: none needed
	closeWrite func() error // half-close; nil: the side cannot half-close
}

// A relay is one open tunnel: the target connection, the client side, and
// the watchdog that ends it when idle.
type relay struct {
	target net.Conn
	idle   time.Duration // 0: no idle bound

	mu         sync.Mutex
	client     net.Conn   // HTTP/1.1: the hijacked connection
	stopClient func(bool) // HTTP/2: unblocks the stream's reads (and writes, unless graceful)
	aborted    bool
	reason     string
	ended      chan struct{} // closed once end has closed and stopped everything

	last     atomic.Int64    // Unix nanoseconds of the last byte either way
	writing  [2]atomic.Int64 // per direction, when the write in progress began; 0: none
	up, down atomic.Int64    // bytes client→target, target→client
	watchdog *time.Timer
}

func newRelay(target net.Conn, idle time.Duration) *relay {
	rl := &relay{target: target, idle: idle, ended: make(chan struct{})}
	rl.touch()
	if idle > 0 {
		rl.mu.Lock()
		rl.watchdog = time.AfterFunc(idle/2, rl.watch)
		rl.mu.Unlock()
	}
	return rl
}

func (rl *relay) touch() { rl.last.Store(time.Now().UnixNano()) }

// watch ends the tunnel when nothing moved for the idle time or a write
// has been stuck that long, and otherwise looks again later. It runs on
// the timer's goroutine, every idle/2, so a tunnel ends between 1 and 1.5
// idle times after it went quiet.
func (rl *relay) watch() {
	now := time.Now().UnixNano()
	bound := int64(rl.idle)
	for i := range rl.writing {
		if began := rl.writing[i].Load(); began != 0 && now-began >= bound {
			rl.abortFor("a write made no progress for the idle timeout")
			return
		}
	}
	if now-rl.last.Load() >= bound {
		rl.abortFor("idle timeout")
		return
	}
	rl.mu.Lock()
	if !rl.aborted {
		rl.watchdog.Reset(rl.idle / 2)
	}
	rl.mu.Unlock()
}

// setClient records the client side, or closes it and reports false when
// the tunnel was aborted already.
func (rl *relay) setClient(c net.Conn, stop func(graceful bool)) bool {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if rl.aborted {
		if c != nil {
			c.Close()
		}
		return false
	}
	rl.client, rl.stopClient = c, stop
	return true
}

func (rl *relay) abort() { rl.end("closed by the proxy", false) }

func (rl *relay) abortFor(reason string) { rl.end(reason, false) }

// end ends the tunnel at once: both connections are closed (a hijacked
// client connection's Close gives its limiter permit back) and blocked
// reads and writes return. An HTTP/2 stream ended gracefully finishes
// with END_STREAM when its handler returns; one aborted is reset. Only
// the first call does anything.
func (rl *relay) end(reason string, graceful bool) {
	rl.mu.Lock()
	if rl.aborted {
		rl.mu.Unlock()
		return
	}
	rl.aborted = true
	rl.reason = reason
	client, stop := rl.client, rl.stopClient
	if rl.watchdog != nil {
		rl.watchdog.Stop()
	}
	rl.mu.Unlock()
	rl.target.Close()
	if client != nil {
		client.Close()
	}
	if stop != nil {
		stop(graceful)
	}
	close(rl.ended)
}

func (rl *relay) why() string {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	return rl.reason
}

// pump copies client→target on a new goroutine and target→client on this
// one, and returns when both are done.
func (rl *relay) pump(client, target endpoint) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		rl.copy(target, client, 0, &rl.up)
	}()
	rl.copy(client, target, 1, &rl.down)
	<-done
}

// copy moves bytes from src to dst until src ends. At src's EOF it
// half-closes dst, so the other direction goes on; any other end (an
// error, a side that cannot half-close) aborts the whole tunnel.
func (rl *relay) copy(dst, src endpoint, dir int, count *atomic.Int64) {
	bp := bufferPool{}
	buf := bp.Get()
	defer bp.Put(buf)
	for {
		n, err := src.r.Read(buf)
		if n > 0 {
			rl.touch()
			rl.writing[dir].Store(time.Now().UnixNano())
			_, werr := dst.w.Write(buf[:n])
			if werr == nil && dst.flush != nil {
				werr = dst.flush()
			}
			rl.writing[dir].Store(0)
			if werr != nil {
				rl.abortFor("write failed: " + werr.Error())
				return
			}
			count.Add(int64(n))
			rl.touch()
		}
		if err == nil {
			continue
		}
		if errors.Is(err, io.EOF) {
			if dst.closeWrite != nil && dst.closeWrite() == nil {
				return // half-closed: the other direction goes on
			}
			rl.end("closed", true) // an HTTP/2 stream ends with its handler
			return
		}
		rl.abortFor("read failed: " + err.Error())
		return
	}
}
