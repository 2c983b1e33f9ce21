package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/seed-a07d1050/portcullis/limit"
)

// A Limiter caps how many HTTP exchanges run at once per key, as a
// middleware ([Limiter.Wrap]). It counts only the requests that pass
// through the handlers it wraps: a Limiter mounted on one route limits that
// route. A Limiter is safe for concurrent use.
type Limiter struct {
	s         settings
	exchanges *limit.Limiter[string]
	tunnels   *limit.Limiter[string] // nil: tunnels count in exchanges
	log       refusalLog
}

// New returns a Limiter configured by cfg, or an error naming the first
// invalid field; on error nothing is started. The Limiter runs background
// reclaim work until [Limiter.Close].
func New(cfg Config) (*Limiter, error) {
	s, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	l := &Limiter{s: s}
	l.log.init(&l.s)
	l.exchanges, err = limit.New(s.limitConfig(false))
	if err != nil {
		return nil, fmt.Errorf("httplimit: exchange limiter: %w", err)
	}
	if s.TunnelPermits != 0 {
		l.tunnels, err = limit.New(s.limitConfig(true))
		if err != nil {
			l.exchanges.Close()
			return nil, fmt.Errorf("httplimit: tunnel limiter: %w", err)
		}
	}
	return l, nil
}

// MaxConcurrentPerClient returns a middleware that lets each client
// address (IPv4 /32, IPv6 /64, the peer address: no proxy headers are
// trusted) run at most n exchanges at once and answers the others with
// 429 and Retry-After: 1 at once: the library form of the daemon's
// --max-concurrent-per-client N. n must be at least 1. Every handler the
// middleware wraps shares the one count; its limiter lives as long as the
// process. For anything more, use [New].
func MaxConcurrentPerClient(n int) (func(http.Handler) http.Handler, error) {
	if n < 1 {
		return nil, errors.New("httplimit: MaxConcurrentPerClient needs n ≥ 1")
	}
	l, err := New(Config{Policy: Policy{Permits: n}, Name: "max-concurrent-per-client"})
	if err != nil {
		return nil, err
	}
	return l.Wrap, nil
}

// Wrap returns a handler that admits each request under the Limiter before
// calling next. The permit is taken when the handler is entered, so a
// middleware placed before it (authentication) refuses first and its
// refusals are never counted. It is released exactly once when the
// exchange ends: next returns, next panics (released, then the panic goes
// on, http.ErrAbortHandler included), or, for a tunnel, the tunnel closes
// (see [Config.ReleaseTunnels]). A request over the limit waits in its
// key's queue, blocking only its own goroutine, and leaves it as soon as
// its context ends; a refused request gets the refusal response and next
// is not called. Handlers from several Wrap calls on one Limiter share its
// counts. A nil next is treated as http.NotFoundHandler(). A handler that
// hijacks a request that is not a tunnel request (see [Config.TunnelPermits])
// gives its permit back when it returns, as for any other exchange.
func (l *Limiter) Wrap(next http.Handler) http.Handler {
	if next == nil {
		next = http.NotFoundHandler()
	}
	return &handler{l: l, next: next}
}

type handler struct {
	l    *Limiter
	next http.Handler
}

var _ http.Handler = (*handler)(nil)

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l := h.l
	key := l.s.Key(r)
	if key == "" {
		h.next.ServeHTTP(w, r)
		return
	}
	if isTunnel(r) {
		h.serveTunnel(w, r, key)
		return
	}
	// The exchange ends if the permit is reclaimed: arranged as it is
	// granted, under the same lock.
	p, ok := l.admit(w, r, l.exchanges, key, l.reclaimEnd(w))
	if !ok {
		return
	}
	defer p.Release()
	h.next.ServeHTTP(w, r)
}

// admit takes a permit of key from lim, with onReclaim (nil: none) set on
// it, or answers the refusal.
func (l *Limiter) admit(w http.ResponseWriter, r *http.Request, lim *limit.Limiter[string], key string, onReclaim func()) (limit.Permit[string], bool) {
	// Without a queue to wait in and a Store to ask, the context is not
	// needed. With a Store, a request that may wait gets the Store's
	// authoritative answer, bounded by the context; one that may not would
	// settle for its cached view.
	ctx := context.Background()
	noWait := l.s.QueueSize == 0 && l.s.Store == nil
	if !noWait {
		ctx = r.Context()
	}
	p, err := lim.AcquireWith(ctx, key, limit.AcquireOptions{NoWait: noWait, OnReclaim: onReclaim})
	if err != nil {
		l.refuse(w, r, key, err)
		return p, false
	}
	if p.Shadowed() {
		l.shadowRefused(r, key)
	}
	if l.s.OnAdmit != nil {
		l.s.OnAdmit(w, r, key, p.Waited(), p.Shadowed())
	}
	return p, true
}

// TryAdmit does for r what the handler [Limiter.Wrap] returns does before
// it calls next, for a caller that serves the requests it can by other
// means (a data path working on bytes) and sends the others through that
// handler: it takes r's permit if one is free now within the limit, and
// otherwise does nothing at all, so that the handler can then queue,
// refuse or admit r in shadow mode and count that once.
//
// It returns r's key and permit, to be released when the exchange ends,
// and true; "", no permit and true when the Limiter does not apply to r
// (its Key function returned ""); or false, with nothing counted: the key
// is at its limit or others wait for it, r asks for a tunnel (CONNECT, an
// upgrade), the Limiter shares its counts through a Store that holds no
// permit for this process it could grant without a round trip
// (limit.HeldStore), or it is closed. onReclaim, if not nil, runs if the
// permit is reclaimed (Config.ReclaimAfter), and should end the exchange
// as the handler's reclaim does: it cuts the connection's reads and
// writes.
// Config.OnAdmit is not called: the caller records the admission.
func (l *Limiter) TryAdmit(r *http.Request, onReclaim func()) (string, limit.Permit[string], bool) {
	key := l.s.Key(r)
	p, ok := l.TryAdmitKey(r, key, onReclaim)
	return key, p, ok
}

// TryAdmitKey is TryAdmit for a caller that has r's key already: key must
// be what the Limiter's Key function returns for r, for instance the key
// of r's connection remembered from its first request (see
// ClientIPConnKey).
func (l *Limiter) TryAdmitKey(r *http.Request, key string, onReclaim func()) (limit.Permit[string], bool) {
	if key == "" {
		return limit.Permit[string]{}, true
	}
	if isTunnel(r) {
		return limit.Permit[string]{}, false
	}
	p, err := l.exchanges.AcquireWith(context.Background(), key, limit.AcquireOptions{Quiet: true, OnReclaim: onReclaim})
	return p, err == nil
}

func (h *handler) serveTunnel(w http.ResponseWriter, r *http.Request, key string) {
	l := h.l
	p, ok := l.admit(w, r, l.exchanges, key, nil)
	if !ok {
		return
	}
	t := &tunnel{permit: p, connect: r.Method == http.MethodConnect, releaseUp: l.s.ReleaseTunnels}
	if l.tunnels != nil {
		// A request asking for a tunnel is an ordinary exchange until the
		// upstream switches: it holds an exchange permit, so that a fake
		// upgrade the upstream answers with 200 counts against the
		// exchange limit, and a tunnel permit, so that tunnels beyond
		// their own limit are never set up. The one it turns out not to
		// need is given back when the answer is known.
		tp, ok := l.admit(w, r, l.tunnels, key, nil)
		if !ok {
			p.Release()
			return
		}
		t.permit, t.exchange = tp, p
	}
	returned := false
	defer func() { t.handlerDone(returned) }()
	tw := wrapTunnel(w, t)
	// Until the tunnel is established its permits may be reclaimed like
	// any other; an established tunnel is exempt.
	l.endOnReclaim(tw, t.permit, t.exchange)
	h.next.ServeHTTP(tw, r)
	returned = true
}

// Snapshot is the state of a Limiter: its exchange limiter and, when
// Config.TunnelPermits is set, its tunnel limiter (otherwise Tunnels is
// empty and tunnels are in Exchanges).
type Snapshot struct {
	Exchanges limit.Snapshot[string] `json:"exchanges"`
	Tunnels   limit.Snapshot[string] `json:"tunnels"`
}

// Snapshot returns the busiest keys (in use, waiting, refused) of each
// limiter, at most top of each (top ≤ 0: all), and their totals.
func (l *Limiter) Snapshot(top int) Snapshot {
	s := Snapshot{Exchanges: l.exchanges.Snapshot(top)}
	if l.tunnels != nil {
		s.Tunnels = l.tunnels.Snapshot(top)
	}
	return s
}

// Totals returns the totals of exchanges and tunnels summed. Keys counts a
// key busy in both twice.
func (l *Limiter) Totals() limit.Totals {
	t := l.exchanges.Totals()
	if l.tunnels != nil {
		addTotals(&t, l.tunnels.Totals())
	}
	return t
}

func addTotals(t *limit.Totals, o limit.Totals) {
	t.Granted += o.Granted
	t.Refused += o.Refused
	t.ShadowRefused += o.ShadowRefused
	t.QueueFull += o.QueueFull
	t.QueueTimeouts += o.QueueTimeouts
	t.Abandoned += o.Abandoned
	t.Reclaimed += o.Reclaimed
	t.StoreFailed += o.StoreFailed
	t.InUse += o.InUse
	t.Waiting += o.Waiting
	t.Keys += o.Keys
}

// Idle returns a channel that is closed once the Limiter holds no permit
// and has no waiter, tunnels included, which may be at once. It is meant
// for retiring a Limiter: wait on it, then Close, so that the exchanges it
// admitted end under it and its waiters are served rather than refused.
// See limit.Limiter.Idle for its cost.
func (l *Limiter) Idle() <-chan struct{} {
	if l.tunnels == nil {
		return l.exchanges.Idle()
	}
	ch := make(chan struct{})
	ex, tu := l.exchanges.Idle(), l.tunnels.Idle()
	go func() {
		<-ex
		<-tu
		close(ch)
	}()
	return ch
}

// Close stops the Limiter's background work. Waiting requests and later
// ones are refused with 503 Service Unavailable (limit.ErrClosed); permits
// already held stay valid and are released as their exchanges end. Close
// is idempotent and returns nil.
func (l *Limiter) Close() error {
	l.exchanges.Close()
	if l.tunnels != nil {
		l.tunnels.Close()
	}
	return nil
}
