package rate

import (
	"context"
	"fmt"
	"hash/maphash"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed-a07d1050/portcullis/limit"
)

// sweepEvery is how often the limiter drops keys back in a fresh state.
const sweepEvery = time.Second

// sweepChunk bounds the slots swept under one lock hold, so that a sweep
// of a large shard never stalls that shard's requests for long.
const sweepChunk = 1024

// A Limiter is a keyed rate limiter: the generic cell rate algorithm
// (GCRA), one theoretical arrival time per busy key, with nginx
// limit_req's rate, burst and delay. It is safe for concurrent use. Its
// memory is bounded by the keys active within about one burst window: a
// key whose state is back to fresh is forgotten.
type Limiter[K comparable] struct {
	s      settings[K]
	hash   func(K) uint64
	shards []shard[K]
	mask   uint64
	clock  limit.Clock // nil: the real monotonic clock
	base   time.Time

	// delaying is the requests inside Wait's delay now (Totals.Delaying).
	delaying atomic.Int64

	done      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

// A shard holds the keys whose hash falls in it, under one mutex.
type shard[K comparable] struct {
	mu    sync.Mutex
	t     table[K]
	stats counters
	_     [64]byte // keep neighbouring shards' locks off this cache line
}

// counters are a shard's share of the limiter's totals, indexed by
// verdict (events included).
type counters [StoreFailed + 1]uint64

func (c *counters) add(o *counters) {
	for i := range c {
		c[i] += o[i]
	}
}

func (c *counters) count(v Verdict) { c[v]++ }

// New returns a Limiter configured by cfg, or an error naming the first
// invalid field. The Limiter runs one goroutine that forgets idle keys
// every second; [Limiter.Close] stops it.
func New[K comparable](cfg Config[K]) (*Limiter[K], error) {
	s, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	l := &Limiter[K]{s: s, clock: s.Clock, done: make(chan struct{})}
	l.hash = s.Hash
	if l.hash == nil {
		seed := maphash.MakeSeed()
		l.hash = func(k K) uint64 { return maphash.Comparable(seed, k) }
	}
	if l.clock != nil {
		l.base = l.clock.Now()
	} else {
		l.base = time.Now()
	}
	n := shardCount()
	l.shards = make([]shard[K], n)
	l.mask = uint64(n - 1)
	l.wg.Add(1)
	go l.sweepLoop()
	return l, nil
}

// shardCount is a power of two well above the number of CPUs, so that
// goroutines working on different keys seldom share a lock.
func shardCount() int {
	n := 16
	for n < 8*runtime.GOMAXPROCS(0) && n < 1024 {
		n <<= 1
	}
	return n
}

// now returns the limiter's time: nanoseconds since it was created, read
// from the monotonic clock (one vDSO call) unless a Clock was injected.
func (l *Limiter[K]) now() int64 {
	if l.clock == nil {
		return int64(time.Since(l.base))
	}
	return int64(l.clock.Now().Sub(l.base))
}

// policyOf returns the policy of key, and its limit when an override
// gave one (ok).
func (l *Limiter[K]) policyOf(key K) (policy, Limit, bool) {
	if l.s.LimitFor != nil {
		if lim, ok := l.s.LimitFor(key); ok && lim.Validate() == nil {
			return policyOf(lim), lim, true
		}
	}
	return l.s.policy, l.s.limit, false
}

// KeyLimit returns the limit key is judged by now: its override from
// Config.LimitFor, or the Config's.
func (l *Limiter[K]) KeyLimit(key K) Limit {
	_, lim, _ := l.policyOf(key)
	return lim
}

// Allow decides one request of key now and never blocks. The decision is
// counted in the key's state (unless refused) and in the totals; a Delayed
// verdict asks the caller to wait Decision.Delay before proceeding, which
// Allow does not do (see [Limiter.Wait]). A caller that cannot wait, such
// as an accept loop, may treat Delayed as admitted: the request was
// counted. With a Store it asks Store.TryReserve, which answers from what
// the Store already knows. Without a Store, Allow allocates nothing.
func (l *Limiter[K]) Allow(key K) Decision {
	if l.s.Store != nil {
		r, _ := l.reserve(context.Background(), key, false)
		return r.Decision
	}
	if l.s.LimitFor != nil {
		p, _, _ := l.policyOf(key)
		d, _ := l.decideLocal(key, &p)
		return d
	}
	d, _ := l.decideLocal(key, &l.s.policy)
	return d
}

// AllowQuiet decides one request of key now, as Allow does, but takes
// only a request that may proceed at once: then it is counted and
// reported as Allow would count it, and AllowQuiet returns its Decision
// and true. A request the limiter would delay, refuse or let through in
// shadow mode changes nothing, is neither counted nor reported, and
// AllowQuiet returns false. It is for a caller with a cheap way to serve a
// request and a full one that delays, refuses and counts: it asks quietly
// first and sends a refused request down the full way, which then decides
// it, and counts it, once. A Limiter with a Store answers false: its
// decisions are the Store's. After Close it answers false.
func (l *Limiter[K]) AllowQuiet(key K) (Decision, bool) {
	return l.quiet(key, true)
}

// WouldAllow reports whether AllowQuiet would take a request of key now,
// and changes nothing. A caller that must take other things first (the
// permits of concurrency limits, which it would have to give back) asks
// it before them, so that a request the rate leaves costs them nothing;
// AllowQuiet after them decides.
func (l *Limiter[K]) WouldAllow(key K) bool {
	_, ok := l.quiet(key, false)
	return ok
}

// quiet decides a request of key as AllowQuiet does, and with commit
// takes it.
func (l *Limiter[K]) quiet(key K, commit bool) (Decision, bool) {
	if l.s.Store != nil || l.closed() {
		return Decision{}, false
	}
	p := &l.s.policy
	if l.s.LimitFor != nil {
		kp, _, _ := l.policyOf(key)
		p = &kp
	}
	h := l.hash(key)
	sh := &l.shards[h&l.mask]
	tag := tagOf(h)
	sh.mu.Lock()
	now := l.now()
	i, tat := sh.t.tat(tag, key)
	d, next := p.decide(tat, now, l.s.Shadow)
	if d.Verdict != Admitted || d.Delay != 0 || !commit {
		sh.mu.Unlock()
		return d, d.Verdict == Admitted && d.Delay == 0
	}
	sh.t.advance(i, tag, key, tat, next, now)
	sh.stats.count(d.Verdict)
	sh.mu.Unlock()
	if l.s.Observer != nil {
		l.s.Observer.Observe(Event[K]{Kind: d.Verdict, Key: key})
	}
	return d, true
}

// closed reports whether Close was called.
func (l *Limiter[K]) closed() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// decideLocal decides one request of key from this process's state, counts
// it and reports it; it returns the decision and the time it was taken.
// The time is read under the shard's lock, so that the decisions of a key
// are taken in the order of their times and a sweep never forgets a key
// that a decision in progress still considers busy.
func (l *Limiter[K]) decideLocal(key K, p *policy) (Decision, int64) {
	h := l.hash(key)
	sh := &l.shards[h&l.mask]
	tag := tagOf(h)
	sh.mu.Lock()
	now := l.now()
	i, tat := sh.t.tat(tag, key)
	var d Decision
	var next int64
	if p.interval != 0 && tat+p.interval-now <= p.free && tat+p.interval-now <= p.window {
		// The common case, inline: admitted at once.
		next = max(tat, now) + p.interval
		d = Decision{Verdict: Admitted, Reset: time.Duration(next - now), window: p.window, interval: p.interval}
	} else {
		d, next = p.decide(tat, now, l.s.Shadow)
	}
	sh.t.advance(i, tag, key, tat, next, now)
	// With a Store, a request the local state admits is counted and
	// reported once the Store has answered.
	final := l.s.Store == nil || !d.Allowed() || d.Verdict == ShadowRefused || p.interval == 0
	if final {
		sh.stats.count(d.Verdict)
	}
	sh.mu.Unlock()
	if final && l.s.Observer != nil {
		l.s.Observer.Observe(Event[K]{Kind: d.Verdict, Key: key, Delay: d.Delay})
	}
	return d, now
}

// Reserve decides one request of key now, as Allow, and returns a
// Reservation through which a caller that gives up before the request
// proceeds (the client left while it was delayed) returns the request with
// [Reservation.Cancel]. With a Store it asks Store.Reserve, which may block
// until ctx ends. It returns the Reservation and nil when the request was
// admitted, delayed or let through in shadow mode; for a refusal, the
// Reservation (whose Decision says when to retry) and [ErrLimited]; when
// the Store could not decide, a refused Reservation and an error wrapping
// [ErrStore]. A refused Reservation holds nothing.
func (l *Limiter[K]) Reserve(ctx context.Context, key K) (Reservation[K], error) {
	return l.reserve(ctx, key, true)
}

// Wait decides one request of key as Reserve does and, when it is
// delayed, waits out the delay on the caller's goroutine. If ctx ends
// first, the request is given back as with [Reservation.Cancel] and Wait
// returns ctx.Err(), so a client that leaves while delayed costs its key
// nothing. Its other results are Reserve's.
func (l *Limiter[K]) Wait(ctx context.Context, key K) (Decision, error) {
	r, err := l.Reserve(ctx, key)
	if err != nil || r.Delay <= 0 {
		return r.Decision, err
	}
	l.delaying.Add(1)
	err = l.sleep(ctx, r.Delay)
	l.delaying.Add(-1)
	if err != nil {
		r.Cancel()
		return r.Decision, err
	}
	return r.Decision, nil
}

// sleep waits d on the limiter's clock, or until ctx ends.
func (l *Limiter[K]) sleep(ctx context.Context, d time.Duration) error {
	if l.clock == nil {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	t := l.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *Limiter[K]) reserve(ctx context.Context, key K, mayBlock bool) (Reservation[K], error) {
	p, lim, _ := l.policyOf(key)
	d, now := l.decideLocal(key, &p)
	if l.s.Store == nil || !d.Allowed() || d.Verdict == ShadowRefused || p.interval == 0 {
		r := Reservation[K]{Decision: d, l: l, key: key, lim: lim, proceed: now + int64(d.Delay)}
		if d.Verdict == Refused {
			return r, ErrLimited
		}
		return r, nil
	}
	return l.askStore(ctx, key, lim, &p, d, now, mayBlock)
}

// askStore asks the Store about a request the local state admitted (and
// counted, but not in the totals yet): local is the local decision. When
// the Store refuses or fails, the local count is given back.
func (l *Limiter[K]) askStore(ctx context.Context, key K, lim Limit, p *policy, local Decision, now int64, mayBlock bool) (Reservation[K], error) {
	var ok bool
	var ahead time.Duration
	var err error
	if mayBlock {
		ok, ahead, err = l.s.Store.Reserve(ctx, key, lim)
	} else {
		ok, ahead, err = l.s.Store.TryReserve(key, lim)
	}
	if err == nil && ok {
		d := p.fromAhead(int64(ahead), l.s.Shadow, true)
		if local.Delay > d.Delay {
			d.Verdict, d.Delay = Delayed, local.Delay
		}
		l.countEvent(key, d.Verdict, d.Delay)
		return Reservation[K]{Decision: d, l: l, key: key, lim: lim, proceed: now + int64(d.Delay), stored: true}, nil
	}
	l.giveBack(key, p.interval)
	if err != nil {
		l.countEvent(key, StoreFailed, 0)
		r := Reservation[K]{Decision: Decision{Verdict: Refused, window: p.window, interval: p.interval}}
		return r, fmt.Errorf("%w: %s: %w", ErrStore, l.s.Name, err)
	}
	d := p.fromAhead(int64(ahead), l.s.Shadow, false)
	l.countEvent(key, d.Verdict, 0)
	r := Reservation[K]{Decision: d, l: l, key: key, lim: lim}
	if d.Verdict == Refused {
		return r, ErrLimited
	}
	return r, nil
}

// giveBack moves key's TAT back by one interval, not before now: the
// request it counted did not proceed.
func (l *Limiter[K]) giveBack(key K, interval int64) bool {
	if interval == 0 {
		return false
	}
	h := l.hash(key)
	sh := &l.shards[h&l.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := sh.t.find(tagOf(h), key)
	if i < 0 {
		return false
	}
	now := l.now()
	e := &sh.t.entries[i]
	if e.tat <= now {
		return false
	}
	e.tat = max(e.tat-interval, now)
	return true
}

// countEvent counts an event outside the decision's lock and reports it.
func (l *Limiter[K]) countEvent(key K, v Verdict, delay time.Duration) {
	sh := &l.shards[l.hash(key)&l.mask]
	sh.mu.Lock()
	sh.stats.count(v)
	sh.mu.Unlock()
	if l.s.Observer != nil {
		l.s.Observer.Observe(Event[K]{Kind: v, Key: key, Delay: delay})
	}
}

// A Reservation is one request a [Limiter] decided, with the means to give
// it back before it proceeds. It is a small value; Cancel through one
// variable only (a copy would give the request back again).
type Reservation[K comparable] struct {
	Decision

	l         *Limiter[K]
	key       K
	lim       Limit
	proceed   int64 // limiter time at which the request proceeds
	stored    bool  // the Store counted it
	cancelled bool
}

// Cancel gives the request back if it has not proceeded yet (its delay has
// not run out): the key's state moves back one interval, as if the
// request had never come, and the Store (if any) is told. It reports
// whether it gave anything back. Only the first call counts; a refused
// request, one that proceeded at once, or one whose delay has passed gives
// nothing back. nginx keeps the slot of a delayed request whose client
// left; giving it back is exact for the GCRA, because the key's state has
// been ahead of now since that request arrived.
func (r *Reservation[K]) Cancel() bool {
	if r.l == nil || r.cancelled || !r.Allowed() || r.interval == 0 {
		return false
	}
	r.cancelled = true
	l := r.l
	if l.now() >= r.proceed || r.Verdict == ShadowRefused {
		return false
	}
	if !l.giveBack(r.key, r.interval) {
		return false
	}
	if r.stored {
		l.s.Store.Cancel(r.key, r.lim)
	}
	l.countEvent(r.key, Cancelled, 0)
	return true
}

// Key returns the key the request was decided for.
func (r *Reservation[K]) Key() K { return r.key }

// Limit returns the limit the request was judged by.
func (r *Reservation[K]) Limit() Limit { return r.lim }

// Sweep forgets every key whose state is back to fresh as of now and
// shrinks the shards' tables that became sparse; it returns how many keys
// it forgot. The limiter sweeps by itself every second; calling Sweep is
// useful with a fake Clock.
func (l *Limiter[K]) Sweep() int {
	dropped := 0
	for i := range l.shards {
		sh := &l.shards[i]
		for start := 0; ; start += sweepChunk {
			sh.mu.Lock()
			if start >= len(sh.t.tags) {
				sh.t.shrinkIfSparse()
				sh.mu.Unlock()
				break
			}
			dropped += sh.t.sweep(l.now(), start, sweepChunk)
			sh.mu.Unlock()
		}
	}
	return dropped
}

func (l *Limiter[K]) sweepLoop() {
	defer l.wg.Done()
	for {
		if !l.wait(sweepEvery) {
			return
		}
		l.Sweep()
	}
}

// wait waits d on the limiter's clock; it reports false when the limiter
// closed first.
func (l *Limiter[K]) wait(d time.Duration) bool {
	if l.clock == nil {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-l.done:
			return false
		}
	}
	t := l.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-l.done:
		return false
	}
}

// Close stops the limiter's background sweep. Decisions still work after
// it (idle keys are then dropped only when their slots are needed); it
// does not close the Store. Close is idempotent and returns nil.
func (l *Limiter[K]) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	l.wg.Wait()
	return nil
}
