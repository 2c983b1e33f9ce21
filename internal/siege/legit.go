package siege

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"
)

// maxInterim bounds the 1xx responses skipped before a final one.
const maxInterim = 4

// errUpgrade is returned when a server switches protocols on a plain GET.
var errUpgrade = errors.New("siege: unexpected 101 Switching Protocols")

// loopStats is what one request loop counted; loops merge theirs at the end,
// so the hot path touches no shared memory.
type loopStats struct {
	requests, successes, connsOpened uint64
	errors                           ErrorCounts
	latency                          histogram
}

func (s *loopStats) merge(o *loopStats) {
	s.requests += o.requests
	s.successes += o.successes
	s.connsOpened += o.connsOpened
	s.errors.add(o.errors)
	s.latency.merge(&o.latency)
}

// legitLoop is one legitimate client connection sending requests one after
// another until its context ends.
type legitLoop struct {
	s      *settings
	dialer *net.Dialer
	tls    *tls.Config // nil for http
	req    []byte
	stats  loopStats
	live   liveCounts // requests and successes, for the progress line

	conn *countingConn // nil between connections
	br   *bufio.Reader

	// abort lets ctx's end interrupt a blocked read or write at once.
	mu      sync.Mutex
	current net.Conn
	aborted bool
}

func newLegitLoop(s *settings, client int, tlsCfg *tls.Config) *legitLoop {
	return &legitLoop{
		s:      s,
		dialer: newDialer(s.clientAddrs[client]),
		tls:    tlsCfg,
		req:    buildRequest(s.requestPath, s.host, !s.keepAlive),
		br:     bufio.NewReaderSize(nil, 4096),
	}
}

// buildRequest returns the bytes of a GET request, sent as they are.
func buildRequest(path, host string, close bool) []byte {
	b := []byte("GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\nUser-Agent: portcullis-siege\r\n")
	if close {
		b = append(b, "Connection: close\r\n"...)
	}
	return append(b, "\r\n"...)
}

// run sends requests until ctx ends or end passes, pacing them if
// Config.Rate is set. The loop watches end itself because ctx's own deadline
// is noticed a moment late, and in that moment a dial under the expired
// deadline fails at once, again and again.
func (l *legitLoop) run(ctx context.Context, end time.Time) {
	aborted := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(aborted)
		l.abort()
	})
	defer func() {
		if !stop() {
			<-aborted // no goroutine of ours may outlive Run
		}
	}()
	defer l.closeConn()
	var interval time.Duration
	if l.s.Rate > 0 {
		interval = time.Duration(float64(time.Second) / l.s.Rate)
	}
	next := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for ctx.Err() == nil && time.Now().Before(end) {
		if interval > 0 {
			if !waitUntil(ctx, timer, next) {
				return
			}
			// No catch-up burst after a slow request: the next slot is one
			// interval after now at the earliest.
			next = maxTime(next.Add(interval), time.Now())
		}
		l.request(ctx, end)
	}
}

// request makes one request and counts its outcome if it ended before end
// and before ctx did: a request cut off by the end of the run is no result.
func (l *legitLoop) request(ctx context.Context, end time.Time) {
	begin := time.Now()
	status, err := l.exchange(ctx, begin.Add(l.s.Timeout))
	finished := time.Now()
	if ctx.Err() != nil || !finished.Before(end) {
		return
	}
	l.stats.requests++
	l.live.requests.Add(1)
	switch {
	case err != nil:
		l.stats.errors.count(classify(err))
	case status < 400:
		l.stats.successes++
		l.live.successes.Add(1)
		l.stats.latency.record(finished.Sub(begin))
	case status == 429:
		l.stats.errors.Status429++
	case status >= 500:
		l.stats.errors.Status5xx++
	default:
		l.stats.errors.Other++
	}
}

// exchange sends the request and reads the response, on the kept connection
// or a new one. As browsers and net/http do, a request that fails on a reused
// connection before any response byte is retried once on a new connection:
// the server may have closed the idle connection just as it was reused.
func (l *legitLoop) exchange(ctx context.Context, deadline time.Time) (int, error) {
	for attempt := 0; ; attempt++ {
		reused := l.conn != nil
		if !reused {
			if err := l.dial(ctx, deadline); err != nil {
				return 0, err
			}
		}
		resp, err := l.roundTrip(deadline)
		if err == nil {
			if resp.mustClose || !l.s.keepAlive {
				l.closeConn()
			}
			return resp.status, nil
		}
		silent := l.conn.read == 0
		l.closeConn()
		k := classify(err)
		if !reused || !silent || attempt > 0 || (k != kindEOF && k != kindReset) {
			return 0, err
		}
	}
}

func (l *legitLoop) roundTrip(deadline time.Time) (response, error) {
	c := l.conn
	c.read = 0
	if err := l.arm(deadline); err != nil {
		return response{}, err
	}
	if _, err := c.Write(l.req); err != nil {
		return response{}, err
	}
	for range maxInterim + 1 {
		resp, err := readResponse(l.br)
		switch {
		case err != nil:
			return resp, err
		case resp.status == 101:
			return resp, errUpgrade
		case resp.status >= 200:
			return resp, nil
		}
	}
	return response{}, errors.New("siege: too many 1xx responses")
}

func (l *legitLoop) dial(ctx context.Context, deadline time.Time) error {
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	raw, err := l.dialer.DialContext(dctx, "tcp", l.s.target.String())
	if err != nil {
		return err
	}
	l.stats.connsOpened++
	var c net.Conn = raw
	if l.tls != nil {
		tc := tls.Client(raw, l.tls)
		if err := tc.HandshakeContext(dctx); err != nil {
			_ = raw.Close()
			return err
		}
		c = tc
	}
	if !l.setCurrent(c) {
		_ = c.Close()
		return context.Canceled
	}
	l.conn = &countingConn{Conn: c}
	l.br.Reset(l.conn)
	return nil
}

func (l *legitLoop) closeConn() {
	if l.conn == nil {
		return
	}
	_ = l.conn.Close()
	l.conn = nil
	l.setCurrent(nil)
}

// setCurrent records the connection abort must interrupt, and reports false
// if the loop has been aborted already.
func (l *legitLoop) setCurrent(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.current = c
	return !l.aborted
}

// arm sets the current connection's deadline for one request, unless abort
// has run: its deadline in the past must not be overwritten.
func (l *legitLoop) arm(deadline time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.aborted {
		return context.Canceled
	}
	return l.current.SetDeadline(deadline)
}

// abort runs on ctx's end, on a goroutine of its own.
func (l *legitLoop) abort() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.aborted = true
	if l.current != nil {
		_ = l.current.SetDeadline(longAgo)
	}
}

// countingConn counts bytes read, so a retry can tell whether any response
// had begun.
type countingConn struct {
	net.Conn
	read int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read += int64(n)
	return n, err
}

// waitUntil waits for t or ctx's end and reports whether t came first.
func waitUntil(ctx context.Context, timer *time.Timer, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer.Reset(d)
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
