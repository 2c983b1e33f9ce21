package quicadmit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/quic-go/quic-go"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/limit"
	"github.com/seed-a07d1050/portcullis/rate"
)

// outcome is how an attempt left the in-progress count.
type outcome uint8

const (
	outcomeCompleted outcome = iota
	outcomeFailed
	outcomeTimedOut
	outcomeAbandoned
)

// attemptKey is the context key under which an admitted attempt travels
// from ConnContext to the connection's context.
type attemptKey struct{}

var errNilContext = errors.New("quicadmit: chained ConnContext returned a nil context")

// An attempt is one admitted connection attempt. Three things may end it
// (completion seen by the Listener, the connection's context ending, the
// backstop timer); the ended flag lets exactly one of them count. The
// per-client permit, if any, lives on until the connection closes.
//
// An attempt is also the context ConnContext returns: the context quic-go
// passed in, plus the attempt under attemptKey. That saves the allocation
// of a context.WithValue on every attempt.
type attempt struct {
	context.Context // the context quic-go passed to ConnContext

	c     *Controller
	key   clientkey.Key
	rated bool // counted in PerClientRate at admission; set before the attempt is shared
	ended atomic.Bool

	mu       sync.Mutex
	timer    Timer
	stopCtx  func() bool
	permit   limit.Permit[clientkey.Key]
	held     bool // permit is held and must be released
	connDone bool // the connection is over (or given up on): hold no permit
}

// admit is ConnContext, with an application's own ConnContext (next)
// chained after admission.
func (c *Controller) admit(ctx context.Context, info *quic.ClientInfo, next func(context.Context, *quic.ClientInfo) (context.Context, error)) (context.Context, error) {
	if info == nil {
		info = &quic.ClientInfo{}
	}
	if c.closed.Load() {
		c.refuse(ErrClosed, info)
		return nil, ErrClosed
	}
	if !c.enter() {
		c.refuse(ErrRefused, info)
		return nil, ErrRefused
	}
	a := &attempt{Context: ctx, c: c}
	if err := a.takeProvenPermit(info); err != nil {
		c.inProgress.Add(-1)
		return nil, err
	}
	var actx context.Context = a
	if next != nil {
		var err error
		if actx, err = a.runNext(actx, next, info); err != nil {
			return nil, err
		}
	}
	c.counts.admitted.Add(1)
	a.arm()
	c.retryOn(c.inProgress.Load(), c.threshold.Load())
	return actx, nil
}

// takeProvenPermit takes the per-client permit, and counts the handshake
// in the per-client rate, of an attempt whose address a token proved.
// Unproven attempts do both on completion.
func (a *attempt) takeProvenPermit(info *quic.ClientInfo) error {
	c := a.c
	if c.s.perClient == nil && c.s.perClientRate == nil {
		return nil
	}
	a.key = c.s.keyer.FromNetAddr(info.RemoteAddr)
	if !info.AddrVerified {
		return nil
	}
	if c.s.perClient != nil {
		p, err := c.s.perClient.TryAcquire(a.key)
		if err != nil {
			c.refusePerClient(a.key)
			return fmt.Errorf("%w: %w", ErrPerClient, err)
		}
		a.permit, a.held = p, true
	}
	if c.s.perClientRate != nil {
		a.rated = true
		if d := c.s.perClientRate.Allow(a.key); !d.Allowed() {
			a.dropPermit()
			c.refusePerClientRate(a.key, d.RetryAfter)
			return fmt.Errorf("%w: %w", ErrPerClientRate, rate.ErrLimited)
		}
	}
	return nil
}

// chargeRate counts a completed handshake whose address was not proven at
// admission in the per-client rate. Over it, the connection is closed
// with the per-client close code and chargeRate reports false.
func (a *attempt) chargeRate(conn *quic.Conn) bool {
	c := a.c
	if c.s.perClientRate == nil || a.rated {
		return true
	}
	d := c.s.perClientRate.Allow(a.key)
	if d.Allowed() {
		return true
	}
	c.refusePerClientRate(a.key, d.RetryAfter)
	_ = conn.CloseWithError(c.s.closeCode, "too many handshakes from this client")
	return false
}

// runNext calls the application's ConnContext. If it fails or panics, the
// attempt is undone and counted as refused (the panic goes on).
func (a *attempt) runNext(ctx context.Context, next func(context.Context, *quic.ClientInfo) (context.Context, error), info *quic.ClientInfo) (out context.Context, err error) {
	undo := true
	defer func() {
		if undo {
			a.c.inProgress.Add(-1)
			a.dropPermit()
			a.c.counts.refused.Add(1)
		}
	}()
	out, err = next(ctx, info)
	if err != nil {
		return nil, err
	}
	if out == nil {
		return nil, errNilContext
	}
	if out.Value(attemptKey{}) != a {
		// The application did not derive from our context; without the
		// attempt in it the Listener could not see the completion.
		out = context.WithValue(out, attemptKey{}, a)
	}
	undo = false
	return out, nil
}

// Value returns the attempt itself under attemptKey, and otherwise what
// the context quic-go passed in holds.
func (a *attempt) Value(key any) any {
	if key == (attemptKey{}) {
		return a
	}
	return a.Context.Value(key)
}

// arm starts watching the attempt's end: quic-go cancels the context it
// passed to ConnContext when the connection's run loop ends (handshake
// failure, timeout, close); the timer is the backstop.
func (a *attempt) arm() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.timer = a.c.clock.AfterFunc(a.c.s.handshakeTimeout, a.onBackstop)
	a.stopCtx = context.AfterFunc(a.Context, a.onCtxDone)
}

func (a *attempt) onCtxDone() { a.onConnDone(context.Cause(a.Context)) }

// end takes the attempt out of the in-progress count as o. Only the first
// call counts; it reports whether this call was it.
func (a *attempt) end(o outcome) bool {
	if !a.ended.CompareAndSwap(false, true) {
		return false
	}
	a.mu.Lock()
	t := a.timer
	a.mu.Unlock()
	if t != nil {
		t.Stop()
	}
	a.c.leave(o)
	return true
}

// onConnDone runs when the connection is over. Before completion that ends
// the attempt; in any case the connection's permit goes back.
func (a *attempt) onConnDone(cause error) {
	if !a.ended.Load() { // after completion there is nothing to classify
		a.end(classify(cause))
	}
	a.dropPermit()
}

// onBackstop ends an attempt nothing else ended in time. quic-go may still
// hold the connection; we stop counting it, permit included.
func (a *attempt) onBackstop() {
	if !a.end(outcomeTimedOut) {
		return
	}
	a.stopWatchingConn()
	a.dropPermit()
}

// stopWatchingConn unregisters the context callback armed at admission,
// for attempts that need nothing more from the connection's end.
func (a *attempt) stopWatchingConn() {
	a.mu.Lock()
	stop := a.stopCtx
	a.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// dropPermit releases the permit, if held, and makes sure none is taken
// later.
func (a *attempt) dropPermit() {
	a.mu.Lock()
	p, held := a.permit, a.held
	a.held, a.connDone = false, true
	a.mu.Unlock()
	if held {
		p.Release()
	}
}

// complete records that conn's handshake completed. It reports false if
// conn was closed because its client is over its per-client cap.
func (a *attempt) complete(conn *quic.Conn) bool {
	if !a.end(outcomeCompleted) {
		return true
	}
	if !a.chargeRate(conn) {
		return false
	}
	if a.c.s.perClient == nil {
		a.stopWatchingConn()
		return true
	}
	return a.holdPermitFor(conn)
}

// holdPermitFor makes sure a completed connection holds its client's
// permit until it closes. Its address is proven now, so it may count.
func (a *attempt) holdPermitFor(conn *quic.Conn) bool {
	a.mu.Lock()
	p, held, done := a.permit, a.held, a.connDone
	a.mu.Unlock()
	if held {
		p.Exempt() // released by onConnDone, not by reclaim
		return true
	}
	if done {
		return true
	}
	p, err := a.c.s.perClient.TryAcquire(a.key)
	if err != nil {
		a.c.refusePerClient(a.key)
		_ = conn.CloseWithError(a.c.s.closeCode, "too many connections from this client")
		return false
	}
	p.Exempt()
	a.mu.Lock()
	if a.connDone {
		a.mu.Unlock()
		p.Release()
		return true
	}
	a.permit, a.held = p, true
	a.mu.Unlock()
	return true
}

// attemptOf returns the attempt a connection's context carries, or nil for
// connections not admitted by a Controller.
func attemptOf(ctx context.Context) *attempt {
	a, _ := ctx.Value(attemptKey{}).(*attempt)
	return a
}

// classify names how an attempt ended from the cause quic-go gave its
// context.
func classify(cause error) outcome {
	var (
		handshakeTimeout *quic.HandshakeTimeoutError
		idleTimeout      *quic.IdleTimeoutError
		transportErr     *quic.TransportError
		appErr           *quic.ApplicationError
	)
	switch {
	case errors.As(cause, &handshakeTimeout), errors.As(cause, &idleTimeout):
		return outcomeTimedOut
	case errors.Is(cause, quic.ErrServerClosed), errors.Is(cause, quic.ErrTransportClosed):
		return outcomeAbandoned
	case errors.As(cause, &appErr):
		// Either side closed it on purpose before the handshake was done.
		return outcomeAbandoned
	case errors.As(cause, &transportErr):
		return classifyTransportError(transportErr)
	}
	return outcomeFailed
}

func classifyTransportError(e *quic.TransportError) outcome {
	switch {
	case e.ErrorCode.IsCryptoError():
		return outcomeFailed // TLS failed, on either side
	case e.Remote && e.ErrorCode == quic.NoError:
		return outcomeAbandoned // the peer gave up
	case !e.Remote && e.ErrorCode == quic.ConnectionRefused:
		// quic-go refuses a handshaking or completed connection when the
		// listener closes or its accept queue is full.
		return outcomeAbandoned
	}
	return outcomeFailed
}
