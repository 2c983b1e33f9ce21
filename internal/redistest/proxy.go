package redistest

import (
	"net"
	"sync"
	"testing"
	"time"
)

// A Proxy is a TCP proxy on 127.0.0.1 in front of one address, for tests
// that need Redis to be slow, cut off or refusing: [Proxy.SetDelay] delays
// every byte by a one-way latency in each direction, [Proxy.Blackhole]
// keeps connections open but forwards nothing (every call times out),
// [Proxy.Down] closes the listener and every connection (new dials are
// refused) and [Proxy.Up] opens it again on the same port. Its methods are
// safe for concurrent use. It stops with the test.
type Proxy struct {
	t      testing.TB
	target string
	addr   string

	mu        sync.Mutex
	ln        net.Listener
	conns     map[net.Conn]struct{}
	delay     time.Duration
	blackhole bool
	closed    bool
	wg        sync.WaitGroup
}

// NewProxy starts a proxy to target on a free loopback port and registers
// its stop with t.Cleanup.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: proxy listen: %v", err)
	}
	p := &Proxy{t: t, target: target, addr: ln.Addr().String(), conns: make(map[net.Conn]struct{})}
	p.serve(ln)
	t.Cleanup(p.close)
	return p
}

// Addr returns the proxy's address; it stays the same across Down and Up.
func (p *Proxy) Addr() string { return p.addr }

// SetDelay sets the one-way latency added to every chunk of bytes in each
// direction, on connections open now and later (a round trip then costs
// 2 × d more). Zero forwards at once.
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// Blackhole, when on, drops every byte in both directions while keeping
// connections (and new dials) open, as a network that loses packets
// does: calls through the proxy time out.
func (p *Proxy) Blackhole(on bool) {
	p.mu.Lock()
	p.blackhole = on
	p.mu.Unlock()
}

// Down closes the proxy's listener and every connection through it: dials
// are refused until Up.
func (p *Proxy) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		_ = c.Close()
	}
}

// Up listens again on the proxy's address after Down. It fails the test
// if the port was taken meanwhile.
func (p *Proxy) Up() {
	p.t.Helper()
	p.mu.Lock()
	if p.ln != nil || p.closed {
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	var ln net.Listener
	var err error
	for i := 0; i < 50; i++ { // the port may linger for a moment
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		p.t.Fatalf("redistest: proxy listen again on %s: %v", p.addr, err)
	}
	p.serve(ln)
}

func (p *Proxy) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.Down()
	p.wg.Wait()
}

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.DialTimeout("tcp", p.target, time.Second)
			if err != nil {
				_ = c.Close()
				continue
			}
			if !p.track(c, up) {
				return
			}
			p.wg.Add(2)
			go p.pipe(c, up)
			go p.pipe(up, c)
		}
	}()
}

// track records c and up as open, or closes them when the proxy went down
// meanwhile.
func (p *Proxy) track(c, up net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		_ = c.Close()
		_ = up.Close()
		return false
	}
	p.conns[c] = struct{}{}
	p.conns[up] = struct{}{}
	return true
}

type chunk struct {
	b  []byte
	at time.Time // when to write it
}

// pipe copies from src to dst, each chunk delayed by the delay in force
// when it was read, in order; it closes both when either side ends.
func (p *Proxy) pipe(src, dst net.Conn) {
	defer p.wg.Done()
	q := make(chan chunk, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range q {
			if d := time.Until(c.at); d > 0 {
				time.Sleep(d)
			}
			if _, err := dst.Write(c.b); err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			delay, drop := p.delay, p.blackhole
			p.mu.Unlock()
			if !drop {
				select {
				case q <- chunk{b: append([]byte(nil), buf[:n]...), at: time.Now().Add(delay)}:
				case <-done:
				}
			}
		}
		if err != nil { // EOF, reset or closed by Down: the pipe ends
			break
		}
	}
	close(q)
	<-done
	_ = src.Close()
	_ = dst.Close()
	p.mu.Lock()
	delete(p.conns, src)
	delete(p.conns, dst)
	p.mu.Unlock()
}
