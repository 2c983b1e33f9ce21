package quicadmit

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"weak"

	"github.com/quic-go/quic-go"
)

// A Controller decides, for every QUIC connection attempt on the transports
// it is attached to, whether to admit it, answer it with a Retry, or refuse
// it, and counts the attempts in progress over all of them, so that an
// IPv4 and an IPv6 socket share one budget. It is safe for concurrent use.
// Create one with [New].
type Controller struct {
	s     settings
	clock Clock

	inProgress atomic.Int64
	threshold  atomic.Int64 // the retry threshold last computed
	rate       rateEstimator
	gate       retryGate
	closed     atomic.Bool
	counts     counters
	logs       logThrottles

	attachMu sync.Mutex
	attached map[weak.Pointer[quic.Transport]]struct{}
}

// New returns a Controller configured by cfg. It fails, with an error
// wrapping [ErrConfig] and naming the field, if cfg is invalid.
func New(cfg Config) (*Controller, error) {
	s, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	c := &Controller{s: s, clock: s.clock, attached: map[weak.Pointer[quic.Transport]]struct{}{}}
	c.rate.start(c.clock.Now().UnixNano())
	c.threshold.Store(s.threshold(0))
	return c, nil
}

// Attach installs the Controller's hooks in tr: VerifySourceAddress,
// ConnContext and, if Config.TokenKey is set, TokenGeneratorKey. Hooks
// already set in tr are kept and chained: a Retry is sent if either
// VerifySourceAddress asks for one; the existing ConnContext runs after
// admission, receives a context that carries the attempt (derive from it,
// or completion cannot be tracked), and if it fails the attempt is refused
// and counted as refused.
//
// quic-go reads the hooks when Listen or ListenEarly is called, so Attach
// must come before, and the transport's connections must be accepted
// through [Controller.WrapListener]. Attach fails, changing nothing, if tr
// is nil, if it is already attached to this Controller
// ([ErrAlreadyAttached]), if its token key differs from Config.TokenKey
// ([ErrTokenKeyConflict]), or after Close ([ErrClosed]).
func (c *Controller) Attach(tr *quic.Transport) error {
	if tr == nil {
		return errNilTransport
	}
	c.attachMu.Lock()
	defer c.attachMu.Unlock()
	if c.closed.Load() {
		return ErrClosed
	}
	if _, ok := c.attached[weak.Make(tr)]; ok {
		return ErrAlreadyAttached
	}
	if err := c.installTokenKey(tr); err != nil {
		return err
	}
	c.installHooks(tr)
	c.forgetCollectedTransports()
	c.attached[weak.Make(tr)] = struct{}{}
	return nil
}

func (c *Controller) installTokenKey(tr *quic.Transport) error {
	switch {
	case c.s.tokenKey == nil:
	case tr.TokenGeneratorKey == nil:
		k := *c.s.tokenKey
		tr.TokenGeneratorKey = &k
	case *tr.TokenGeneratorKey != *c.s.tokenKey:
		return ErrTokenKeyConflict
	}
	return nil
}

func (c *Controller) installHooks(tr *quic.Transport) {
	if prev := tr.VerifySourceAddress; prev != nil {
		tr.VerifySourceAddress = func(addr net.Addr) bool {
			return c.VerifySourceAddress(addr) || prev(addr)
		}
	} else {
		tr.VerifySourceAddress = c.VerifySourceAddress
	}
	if prev := tr.ConnContext; prev != nil {
		tr.ConnContext = func(ctx context.Context, info *quic.ClientInfo) (context.Context, error) {
			return c.admit(ctx, info, prev)
		}
	} else {
		tr.ConnContext = c.ConnContext
	}
}

// forgetCollectedTransports drops the entries of transports that were
// garbage collected, so that a daemon that reloads does not grow the map.
func (c *Controller) forgetCollectedTransports() {
	for p := range c.attached {
		if p.Value() == nil {
			delete(c.attached, p)
		}
	}
}

// VerifySourceAddress is the [quic.Transport.VerifySourceAddress] hook. quic-go
// calls it on the transport's packet goroutine for an Initial that would
// open a connection and carries no valid token (an expired or unreadable
// NEW_TOKEN token counts as none). It reports true, and quic-go sends a
// stateless Retry, when the attempts in progress have reached the retry
// threshold, or are still at or above three quarters of it since Retry
// turned on. It reports false at MaxInProgress or after Close, so that
// ConnContext refuses the attempt rather than make the client pay a round
// trip first. It never blocks and does not allocate.
func (c *Controller) VerifySourceAddress(net.Addr) bool {
	if c.closed.Load() {
		return false
	}
	n := c.inProgress.Load()
	if n >= c.s.maxInProgress {
		return false
	}
	retry := c.retryOn(n, c.currentThreshold(c.clock.Now().UnixNano()))
	if retry {
		c.counts.retried.Add(1)
	}
	return retry
}

// ConnContext is the [quic.Transport.ConnContext] hook. quic-go calls it on
// the transport's packet goroutine for every attempt that is not sent a
// Retry, before any handshake work. It admits the attempt unless
// MaxInProgress attempts are in progress ([ErrRefused]), the Controller is
// closed ([ErrClosed]), or the address is proven (info.AddrVerified) and
// its client is over Config.PerClient's cap ([ErrPerClient]) or
// Config.PerClientRate ([ErrPerClientRate]); a refused
// attempt is answered with CONNECTION_REFUSED and leaves no state behind.
// An admitted attempt is counted in progress, and the returned context,
// derived from ctx, carries it to [Listener.Accept]. It never blocks.
func (c *Controller) ConnContext(ctx context.Context, info *quic.ClientInfo) (context.Context, error) {
	return c.admit(ctx, info, nil)
}

// Close stops admission: from now on every attempt on the attached
// transports is refused with CONNECTION_REFUSED, and Attach fails. Attempts
// in progress are not cut short; they end as they would have, so that the
// count returns to zero. Counters stay readable. Close is idempotent and
// returns nil.
func (c *Controller) Close() error {
	c.closed.Store(true)
	return nil
}

// currentThreshold computes the retry threshold at now (Unix nanoseconds)
// and remembers it for the paths that only need the latest value.
func (c *Controller) currentThreshold(now int64) int64 {
	t := c.s.threshold(c.rate.rate(now))
	c.threshold.Store(t)
	return t
}

// retryOn updates the Retry gate and logs a change of state.
func (c *Controller) retryOn(n, t int64) bool {
	on, changed := c.gate.check(n, t)
	if changed {
		c.logRetryChange(on, n, t)
	}
	return on
}

// enter counts one more attempt in progress unless MaxInProgress are.
func (c *Controller) enter() bool {
	for {
		n := c.inProgress.Load()
		if n >= c.s.maxInProgress {
			return false
		}
		if c.inProgress.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// leave takes an ended attempt out of the count, exactly once per attempt
// (the attempt guarantees that), and feeds a completion to the rate.
func (c *Controller) leave(o outcome) {
	n := c.inProgress.Add(-1)
	c.counts.ended(o)
	t := c.threshold.Load()
	if o == outcomeCompleted {
		now := c.clock.Now().UnixNano()
		c.rate.record(now)
		t = c.currentThreshold(now)
	}
	c.retryOn(n, t)
}
