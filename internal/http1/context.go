package http1

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// requestContext is the context of one request. It is cancelled, with
// context.Canceled, when the handler returns, when the connection's
// context ends, when a write to the connection fails, and when the client
// goes away while the handler runs (see the package documentation for
// exactly when that is seen). It is its own type rather than a
// context.WithCancel child so that the client-gone watch can be armed
// without a goroutine, and it implements the AfterFunc method that
// context.AfterFunc and context.WithCancel use, so that contexts derived
// from it start no goroutine either.
type requestContext struct {
	c *conn

	done atomic.Value // chan struct{}, made by the first Done
	err  atomic.Value // error, once cancelled

	mu       sync.Mutex
	afters   []func()
	afterBuf [2]func()
	watched  bool // the fallback watch was asked for (Done, Err or AfterFunc called)
}

// closedChan is the Done channel of a context cancelled before anyone
// asked for it.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

func newRequestContext(c *conn) *requestContext {
	x := &requestContext{c: c}
	x.afters = x.afterBuf[:0]
	return x
}

func (x *requestContext) Deadline() (time.Time, bool) { return x.c.ctx.Deadline() }

func (x *requestContext) Done() <-chan struct{} {
	if d, ok := x.done.Load().(chan struct{}); ok {
		return d
	}
	x.mu.Lock()
	d, ok := x.done.Load().(chan struct{})
	if !ok {
		if x.err.Load() != nil {
			d = closedChan
		} else {
			d = make(chan struct{})
		}
		x.done.Store(d)
	}
	x.mu.Unlock()
	x.c.watchWanted(x)
	return d
}

func (x *requestContext) Err() error {
	if err, ok := x.err.Load().(error); ok {
		return err
	}
	x.c.watchWanted(x)
	if err, ok := x.err.Load().(error); ok {
		return err
	}
	return nil
}

// Value answers http.LocalAddrContextKey with the connection's local
// address and passes every other key to the connection's context. It
// answers nil for the key through which context.Cause and context's own
// types look for a *cancelCtx parent: this context is not one, so Cause
// falls back to Err and derived contexts to AfterFunc.
func (x *requestContext) Value(key any) any {
	switch key {
	case http.LocalAddrContextKey:
		return x.c.localAddr
	case cancelCtxKey:
		return nil
	}
	return x.c.ctx.Value(key)
}

// AfterFunc arranges for f to run in its own goroutine once x is
// cancelled (at once if it is), as context.AfterFunc promises; the
// returned stop reports whether it kept f from running.
func (x *requestContext) AfterFunc(f func()) (stop func() bool) {
	x.mu.Lock()
	if x.err.Load() != nil {
		x.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	i := len(x.afters)
	x.afters = append(x.afters, f)
	x.mu.Unlock()
	x.c.watchWanted(x)
	return func() bool {
		x.mu.Lock()
		defer x.mu.Unlock()
		if x.err.Load() != nil || x.afters[i] == nil {
			return false
		}
		x.afters[i] = nil
		return true
	}
}

// cancel ends x with err; later calls do nothing.
func (x *requestContext) cancel(err error) {
	x.mu.Lock()
	if x.err.Load() != nil {
		x.mu.Unlock()
		return
	}
	x.err.Store(err)
	if d, ok := x.done.Load().(chan struct{}); ok {
		close(d)
	} else {
		x.done.Store(closedChan)
	}
	afters := x.afters
	x.mu.Unlock()
	for _, f := range afters {
		if f != nil {
			go f()
		}
	}
}

func (x *requestContext) String() string { return "http1.requestContext" }

// cancelCtxKey is the key context.Cause and context's cancelCtx ask their
// parents' Value for. It is unexported; a Context that records the key it
// is asked for learns it.
var cancelCtxKey = func() any {
	var s keySpy
	_ = context.Cause(&s)
	return s.key
}()

type keySpy struct {
	context.Context
	key any
}

func (s *keySpy) Value(key any) any { s.key = key; return nil }
func (s *keySpy) Err() error        { return nil }

var _ context.Context = (*requestContext)(nil)
