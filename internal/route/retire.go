package route

import (
	"context"
	"log/slog"
	"sync"
)

// Background is where [Table.Retire] waits for the parts it retires.
type Background struct {
	// Group counts each part being retired until it is closed; the server
	// waits on it when it stops. Required.
	Group *sync.WaitGroup

	// Stop ends every wait when it is done (the server stops): what is
	// still in use is closed then. Required.
	Stop context.Context

	// Log receives the line of an interceptor whose sessions had to be
	// cut. Nil means slog.Default().
	Log *slog.Logger
}

// Retire retires t, which next replaced (next nil: t's listener is gone),
// in the background: each part of t that next does not hold is closed
// once what uses it has ended, or at the latest when bg.Stop is done, so
// that the exchanges in progress finish under the limits they started
// with. A limiter closes when its last permit comes back (its queue does
// not fail its waiters with 503), a rate when no exchange is inside it, an
// authenticator when no request is being checked, a forward proxy when
// its last tunnel has closed, and a replaced interceptor's sessions run on
// for Config.Drain, then are cut. It returns at once.
func (t *Table) Retire(next *Table, bg Background) {
	if bg.Log == nil {
		bg.Log = slog.Default()
	}
	for _, l := range next.retiredLimiters(t) {
		bg.retireLimiter(l)
	}
	for _, r := range t.rates() {
		if !next.ownsRate(r) {
			bg.retireRate(r)
		}
	}
	if a := t.authenticator(); a != nil && a != next.authenticator() {
		bg.Group.Add(1)
		idle := a.Idle()
		go func() {
			defer bg.Group.Done()
			defer a.Close()
			select {
			case <-idle:
			case <-bg.Stop.Done():
			}
		}()
	}
	if p := t.forwardProxy(); p != nil && p != next.forwardProxy() {
		bg.Group.Add(1)
		go func() {
			defer bg.Group.Done()
			// Its tunnels run on under the settings they opened with; the
			// server's stop cuts them.
			_ = p.Shutdown(bg.Stop)
		}()
	}
	t.retireIntercept(next, bg)
}

// retireLimiter closes l, in the background, once its last permit has
// come back or bg.Stop is done. It waits without polling. (Its own
// function, apart from retireRate, so that a goroutine dump tells what
// each waiting goroutine retires.)
func (bg Background) retireLimiter(l *limiter) {
	bg.Group.Add(1)
	idle := l.lim.Idle()
	go func() {
		defer bg.Group.Done()
		defer l.close()
		select {
		case <-idle:
		case <-bg.Stop.Done():
		}
	}()
}

// retireRate closes r, in the background, once no exchange is inside it
// or bg.Stop is done.
func (bg Background) retireRate(r *rateLimiter) {
	bg.Group.Add(1)
	idle := r.retire()
	go func() {
		defer bg.Group.Done()
		defer r.close()
		select {
		case <-idle:
		case <-bg.Stop.Done():
		}
	}()
}
