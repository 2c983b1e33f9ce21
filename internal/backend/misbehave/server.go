package misbehave

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Server is a misbehaving HTTP/1.1 server on a TCP listener of its own. Each
// connection is served on its own goroutine, one request after another, with
// no timeouts: the server leaves a connection open until the client closes
// it or a fault does.
type Server struct {
	cfg      Config
	ln       net.Listener
	wg       sync.WaitGroup
	accepted atomic.Uint64
	requests atomic.Uint64
	answers  atomic.Uint64

	mu     sync.Mutex
	open   map[*serverConn]struct{}
	closed bool
}

// Start listens on the TCP address addr (for example "127.0.0.1:0") and
// serves cfg. It returns once the listener is open; on error nothing is left
// open, and a bad cfg gives an error wrapping [ErrInvalidConfig].
func Start(addr string, cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("misbehave: listen: %w", err)
	}
	s := &Server{cfg: cfg, ln: ln, open: make(map[*serverConn]struct{})}
	s.wg.Add(1)
	go s.acceptLoop()
	return s, nil
}

// Addr is the listener's address, "host:port".
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL is "http://" followed by [Server.Addr].
func (s *Server) URL() string { return "http://" + s.Addr() }

// Accepted reports how many connections the server accepted.
func (s *Server) Accepted() uint64 { return s.accepted.Load() }

// Requests reports how many requests the server read, on every connection.
func (s *Server) Requests() uint64 { return s.requests.Load() }

// Pending reports how many late faults have not acted yet, on every
// connection. A fault acting now (by [Config.LateAfter]) counts until what
// it sent was delivered.
func (s *Server) Pending() int {
	s.mu.Lock()
	conns := make([]*serverConn, 0, len(s.open))
	for c := range s.open {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	n := 0
	for _, c := range conns {
		c.wmu.Lock()
		n += len(c.late)
		c.wmu.Unlock()
	}
	return n
}

// Release makes every pending late fault act now, on every connection at
// once, and returns how many did once each has been delivered: the
// bytes and the FIN it sent were acknowledged by the client's kernel (on
// Linux; elsewhere it returns once they were written), so that they are in
// the client's receive queue before Release returns. A reset cannot be
// waited for; it is sent before Release returns.
func (s *Server) Release() int {
	s.mu.Lock()
	conns := make([]*serverConn, 0, len(s.open))
	for c := range s.open {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	// In parallel: a delivered FIN may wait for a delayed ACK (40 ms).
	var n atomic.Int64
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.Add(int64(c.runLate()))
		}()
	}
	wg.Wait()
	return int(n.Load())
}

// Close closes the listener and every connection, and waits for their
// goroutines. Pending late faults are dropped. It always returns nil; later
// calls do nothing.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	conns := make([]*serverConn, 0, len(s.open))
	for c := range s.open {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	s.ln.Close()
	for _, c := range conns {
		c.drop()
	}
	s.wg.Wait()
	return nil
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.accepted.Add(1)
		c := &serverConn{s: s, nc: nc.(*net.TCPConn)}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			return
		}
		s.open[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go c.serve()
	}
}

// serverConn is one accepted connection.
type serverConn struct {
	s  *Server
	nc *net.TCPConn

	// wmu serialises the answers and the late faults written on the
	// connection, and guards the fields below.
	wmu   sync.Mutex
	late  []Fault  // pending late faults, oldest first
	stray [][]byte // what each pending LateResponse writes
	timer *time.Timer
	gone  bool // closed by a fault or by Close
}

func (c *serverConn) serve() {
	defer c.s.wg.Done()
	defer func() {
		c.drop()
		c.s.mu.Lock()
		delete(c.s.open, c)
		c.s.mu.Unlock()
	}()
	br := bufio.NewReader(c.nc)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		c.s.requests.Add(1)
		fault := None
		n := c.s.answers.Add(1)
		if every := uint64(c.s.cfg.Every); every <= 1 || n%every == 0 {
			fault = c.s.cfg.Fault
		}
		if !c.answer(req.Method, req.RequestURI, fault) {
			return
		}
	}
}

// response returns a complete response with status, the AnswerHeader of
// method and target, and the proper answer's body unless withBody is false
// (the head still declares its length).
func response(status int, method, target string, withBody bool) []byte {
	body := Answer(method, target)
	b := fmt.Appendf(nil, "HTTP/1.1 %d %s\r\n%s: %s %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n",
		status, http.StatusText(status), AnswerHeader, method, target, len(body))
	if withBody {
		b = append(b, body...)
	}
	return b
}

// answer writes the answer to one request as fault says, and reports
// whether the connection stays open.
func (c *serverConn) answer(method, target string, fault Fault) bool {
	proper := response(200, method, target, method != "HEAD")
	stray := response(200, method, target, true)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.gone {
		return false
	}
	var err error
	switch fault {
	case HeadWithBody:
		if method == "HEAD" {
			head := fmt.Appendf(nil, "HTTP/1.1 200 OK\r\n%s: %s %s\r\nContent-Length: %d\r\n\r\n", AnswerHeader, method, target, len(stray))
			proper = append(head, stray...)
		}
		err = c.write(proper)
	case NoContentWithBody, NotModifiedWithBody:
		st := fault.Status()
		b := fmt.Appendf(nil, "HTTP/1.1 %d %s\r\n%s: %s %s\r\nContent-Length: %d\r\n\r\n", st, http.StatusText(st), AnswerHeader, method, target, len(stray))
		err = c.write(append(b, stray...))
	case TwoResponses:
		err = c.write(append(proper, stray...))
	case EarlyClose:
		body := Answer(method, target)
		b := fmt.Appendf(nil, "HTTP/1.1 200 OK\r\n%s: %s %s\r\nContent-Length: %d\r\n\r\n", AnswerHeader, method, target, len(body)+64)
		if method != "HEAD" {
			b = append(b, body...)
		}
		_ = c.write(b)
		c.dropLocked(false)
		return false
	case SplitHead:
		err = c.writeSplit(proper)
	case ChunkedTrailingGarbage:
		b := fmt.Appendf(nil, "HTTP/1.1 200 OK\r\n%s: %s %s\r\nTransfer-Encoding: chunked\r\n\r\n", AnswerHeader, method, target)
		if method != "HEAD" {
			body := Answer(method, target)
			half := len(body) / 2
			b = fmt.Appendf(b, "%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n", half, body[:half], len(body)-half, body[half:])
		}
		err = c.write(append(b, stray...))
	default: // None and the late faults answer properly
		err = c.write(proper)
	}
	if err != nil {
		return false
	}
	if fault.IsLate() {
		c.late = append(c.late, fault)
		c.stray = append(c.stray, stray)
		if c.s.cfg.LateAfter > 0 && c.timer == nil {
			c.timer = time.AfterFunc(c.s.cfg.LateAfter, func() { c.runLate() })
		}
	}
	return true
}

func (c *serverConn) write(b []byte) error {
	_, err := c.nc.Write(b)
	return err
}

// writeSplit writes a response's head in three pieces, the first two cut
// inside the status line and inside a header field, waiting for each to be
// delivered and a millisecond more, so that a reader is likely to have
// consumed it before the next arrives.
func (c *serverConn) writeSplit(resp []byte) error {
	cuts := []int{len("HTTP/1.1 20"), len("HTTP/1.1 200 OK\r\n") + len(AnswerHeader) + 3, len(resp)}
	prev := 0
	for _, cut := range cuts {
		if err := c.write(resp[prev:cut]); err != nil {
			return err
		}
		if cut < len(resp) {
			waitDelivered(c.nc)
			time.Sleep(time.Millisecond)
		}
		prev = cut
	}
	return nil
}

// runLate makes the pending late faults act, and returns how many did.
func (c *serverConn) runLate() int {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	n := 0
	for i, f := range c.late {
		if c.gone {
			break
		}
		n++
		switch f {
		case LateResponse:
			if c.write(c.stray[i]) == nil {
				waitDelivered(c.nc)
			}
		case IdleTimeout:
			_ = c.write([]byte("HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"))
			c.dropLocked(false)
		case IdleClose:
			c.dropLocked(false)
		case IdleReset:
			c.dropLocked(true)
		}
	}
	c.late, c.stray = nil, nil
	return n
}

// drop closes the connection unless a fault already did.
func (c *serverConn) drop() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	c.late, c.stray = nil, nil
	c.dropLocked(true)
}

// dropLocked closes the connection once: with a reset, or with a FIN that
// it waits to see delivered.
func (c *serverConn) dropLocked(reset bool) {
	if c.gone {
		return
	}
	c.gone = true
	if reset {
		_ = c.nc.SetLinger(0)
	} else if c.nc.CloseWrite() == nil {
		waitDelivered(c.nc)
	}
	_ = c.nc.Close()
}
