package limit

import (
	"context"
	"fmt"
	"hash/maphash"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// A Limiter is a keyed counting semaphore: each key may hold a number of
// permits at once, and requests over that number wait in a bounded FIFO
// queue or are refused. A Limiter is safe for concurrent use. Its memory is
// bounded by the keys that hold or wait for a permit: a key is forgotten as
// soon as it has neither.
type Limiter[K comparable] struct {
	s      settings[K]
	hash   func(K) uint64
	shards []shard[K]
	mask   uint64

	global atomic.Int64 // permits held over all keys, kept only with a global cap
	now    atomic.Int64 // coarse clock for dating permits, Unix nanoseconds

	closed atomic.Bool
	done   chan struct{}

	idle         idleWatch
	watchingIdle atomic.Bool // set by the first call to Idle
	closeOnce    sync.Once
	wg           sync.WaitGroup
}

// New returns a Limiter configured by cfg, or an error naming the first
// invalid field. Unless cfg.ReclaimAfter is negative, the Limiter runs a
// goroutine that reclaims permits held too long; [Limiter.Close] stops it.
func New[K comparable](cfg Config[K]) (*Limiter[K], error) {
	s, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	l := &Limiter[K]{s: s, done: make(chan struct{})}
	l.hash = s.Hash
	if l.hash == nil {
		seed := maphash.MakeSeed()
		l.hash = func(k K) uint64 { return maphash.Comparable(seed, k) }
	}
	n := shardCount()
	l.shards = make([]shard[K], n)
	l.mask = uint64(n - 1)
	for i := range l.shards {
		l.shards[i].l = l
	}
	l.now.Store(s.Clock.Now().UnixNano())
	if n, ok := s.Store.(ReleaseNotifier[K]); ok {
		n.NotifyRelease(l.wake)
	}
	if s.reclaimNanos > 0 {
		l.wg.Add(1)
		go l.reclaimLoop()
	}
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

// shard returns the shard of key and the key's hash.
func (l *Limiter[K]) shard(key K) (*shard[K], uint64) {
	h := l.hash(key)
	return &l.shards[h&l.mask], h
}

// Acquire takes one permit of key, waiting in the key's queue when it is at
// its limit and Config.QueueSize allows. On success it returns a valid
// Permit that the caller must Release. On failure it returns the zero
// Permit and an error, and holds nothing: [ErrLimited] (or
// [ErrGlobalLimited]) when it could not wait, [ErrQueueFull],
// [ErrQueueTimeout], [ErrClosed], an error wrapping [ErrStore], or ctx.Err()
// when ctx ended while it waited (counted as abandoned). With a Store,
// Acquire also waits for the Store's answer, bounded by ctx.
func (l *Limiter[K]) Acquire(ctx context.Context, key K) (Permit[K], error) {
	return l.acquire(ctx, key, true)
}

// TryAcquire takes one permit of key if one is free now. It never waits in
// the queue and never blocks: with a Store it uses the Store's non-blocking
// answer. Its results are those of [Limiter.Acquire], except that it never
// returns ErrQueueTimeout or a context error.
func (l *Limiter[K]) TryAcquire(key K) (Permit[K], error) {
	return l.acquire(context.Background(), key, false)
}

// AcquireOptions are what [Limiter.AcquireWith] does besides taking a
// permit.
type AcquireOptions struct {
	// NoWait takes a permit only if one is free now, as TryAcquire does;
	// otherwise the request waits in the queue, as Acquire does.
	NoWait bool
	// OnReclaim, if not nil, is set on the permit as it is granted, as
	// [Permit.OnReclaim] sets it, but under the lock that grants it: a
	// holder that always arranges for its work to end on reclaim takes the
	// key's lock once per permit instead of twice.
	OnReclaim func()
	// Quiet asks only for a permit that is free now and within the limit,
	// and leaves no trace when there is none: NoWait is implied, a shadow
	// limiter refuses instead of granting over its limit, and a refusal is
	// neither counted (Snapshot, Stats) nor observed. A granted permit is
	// counted and observed as any other. It is for a caller that will send
	// a refused request down another path, which then asks again and
	// counts the refusal (or the queueing, or the shadow grant) once.
	// A limiter with a Store answers quietly only from permits its Store
	// holds for this process already ([HeldStore]); when there is none, or
	// the Store is not a HeldStore, the refusal is [ErrQuietStore].
	Quiet bool
}

// AcquireWith is Acquire, or with o.NoWait TryAcquire, that also does what
// o asks as the permit is granted. Its results are theirs; with o.Quiet a
// refusal is [ErrLimited] (or [ErrGlobalLimited]), [ErrClosed] or
// [ErrQuietStore].
func (l *Limiter[K]) AcquireWith(ctx context.Context, key K, o AcquireOptions) (Permit[K], error) {
	if o.Quiet {
		return l.acquireQuiet(key, o.OnReclaim)
	}
	if o.NoWait {
		ctx = context.Background()
	}
	return l.acquireWith(ctx, key, !o.NoWait, o.OnReclaim)
}

func (l *Limiter[K]) acquire(ctx context.Context, key K, mayWait bool) (Permit[K], error) {
	return l.acquireWith(ctx, key, mayWait, nil)
}

// acquireQuiet is AcquireWith for AcquireOptions.Quiet.
func (l *Limiter[K]) acquireQuiet(key K, onReclaim func()) (Permit[K], error) {
	if l.closed.Load() {
		return Permit[K]{}, ErrClosed
	}
	held, canHold := l.s.Store.(HeldStore[K])
	if l.s.Store != nil && !canHold {
		return Permit[K]{}, ErrQuietStore
	}
	limit := l.s.permits
	if l.s.permitsFor != nil {
		limit = l.s.limitFor(key)
	}
	sh, h := l.shard(key)
	sh.mu.Lock()
	e := sh.lookup(h, key, limit)
	if e.inUse >= e.limit || e.head != nil {
		sh.forgetIfIdle(e)
		sh.mu.Unlock()
		return Permit[K]{}, ErrLimited
	}
	if !l.takeGlobal() {
		sh.forgetIfIdle(e)
		sh.mu.Unlock()
		return Permit[K]{}, ErrGlobalLimited
	}
	// The Store is asked under the key's lock, so that the permit it
	// grants and the local count move together; it never blocks, and it
	// calls nothing of the limiter's.
	if canHold && e.limit != unlimited && !held.AcquireHeld(key, int(e.limit)) {
		l.giveGlobal()
		sh.forgetIfIdle(e)
		sh.mu.Unlock()
		return Permit[K]{}, ErrQuietStore
	}
	ph := sh.grantLocked(e, onReclaim).handle(false)
	sh.mu.Unlock()
	l.observe(key, Granted, 0)
	return ph, nil
}

func (l *Limiter[K]) acquireWith(ctx context.Context, key K, mayWait bool, onReclaim func()) (Permit[K], error) {
	if l.closed.Load() {
		return Permit[K]{}, ErrClosed
	}
	var start time.Time // set when the request first waits
	for {
		p, g, err := l.acquireLocal(ctx, key, mayWait, &start, onReclaim)
		if err == nil && !start.IsZero() {
			p.waited = l.s.Clock.Now().Sub(start)
		}
		if err != nil || !g.stored {
			return p, err
		}
		ok, err := l.askStore(ctx, key, g, mayWait)
		if ok && err == nil {
			return p, nil
		}
		l.release(p, false)
		if err != nil {
			l.count(key, StoreFailed)
			return Permit[K]{}, fmt.Errorf("%w: %w", ErrStore, err)
		}
		if err := l.waitForStore(ctx, key, mayWait, &start); err != nil {
			return Permit[K]{}, err
		}
	}
}

// grant records what the local count was when a permit was granted, for
// the Store's decision, and whether the Store is to be asked: read under
// the lock that granted it, since a reclaim may recycle the permit's record
// as soon as that lock is released.
type grant struct {
	limit, local int32
	stored       bool
}

func (l *Limiter[K]) askStore(ctx context.Context, key K, g grant, mayWait bool) (bool, error) {
	if !mayWait {
		return l.s.Store.TryAcquire(key, int(g.limit), int(g.local))
	}
	return l.s.Store.Acquire(ctx, key, int(g.limit), int(g.local))
}

// acquireLocal applies the limits this process knows: the key's permits,
// the global cap, shadow mode and the queue.
func (l *Limiter[K]) acquireLocal(ctx context.Context, key K, mayWait bool, start *time.Time, onReclaim func()) (Permit[K], grant, error) {
	limit := l.s.permits
	if l.s.permitsFor != nil {
		limit = l.s.limitFor(key) // called with no lock held, as documented
	}
	sh, h := l.shard(key)
	sh.mu.Lock()
	e := sh.lookup(h, key, limit)
	if e.inUse < e.limit && e.head == nil {
		if !l.takeGlobal() {
			e.refused++
			sh.stats.refused++
			sh.forgetIfIdle(e)
			sh.mu.Unlock()
			l.observe(key, Refused, 0)
			return Permit[K]{}, grant{}, ErrGlobalLimited
		}
		p := sh.grantLocked(e, onReclaim)
		h, g := p.handle(false), p.grant()
		sh.mu.Unlock()
		l.observe(key, Granted, 0)
		return h, g, nil
	}
	return l.overLimit(ctx, sh, e, mayWait, start, onReclaim)
}

// overLimit handles a request for a key at its limit (or with others
// already queued). It is called with sh.mu held and releases it.
func (l *Limiter[K]) overLimit(ctx context.Context, sh *shard[K], e *entry[K], mayWait bool, start *time.Time, onReclaim func()) (Permit[K], grant, error) {
	key := e.key
	if l.s.Shadow {
		if !l.takeGlobal() {
			sh.stats.refused++
			sh.forgetIfIdle(e)
			sh.mu.Unlock()
			l.observe(key, Refused, 0)
			return Permit[K]{}, grant{}, ErrGlobalLimited
		}
		p := sh.grantLocked(e, onReclaim)
		h, g := p.handle(true), p.grant()
		e.refused++
		sh.stats.shadowRefused++
		sh.mu.Unlock()
		l.observe(key, ShadowRefused, 0)
		return h, g, nil
	}
	if !mayWait || l.s.QueueSize == 0 {
		e.refused++
		sh.stats.refused++
		sh.forgetIfIdle(e)
		sh.mu.Unlock()
		l.observe(key, Refused, 0)
		return Permit[K]{}, grant{}, ErrLimited
	}
	if int(e.waiting) >= l.s.QueueSize {
		e.refused++
		sh.stats.queueFull++
		sh.mu.Unlock()
		l.observe(key, QueueFull, 0)
		return Permit[K]{}, grant{}, ErrQueueFull
	}
	w := &waiter[K]{ready: make(chan struct{}, 1)}
	e.enqueue(w)
	sh.mu.Unlock()
	if start.IsZero() {
		*start = l.s.Clock.Now()
	}
	p, g, err := l.wait(ctx, sh, e, w, *start)
	if err == nil && onReclaim != nil {
		// Handed over by a release, under its lock, while this request
		// waited.
		p.OnReclaim(onReclaim)
	}
	return p, g, err
}

// grantLocked is the one place a permit of e is granted: it takes a
// record (recycled if one is free), dates it, lists it for reclaim, sets
// its reclaim hook and counts the grant. It is called with sh.mu held,
// after the caller took the global cap's unit; the caller makes the
// holder's handle ([permit.handle]) and the Store's record
// ([permit.grant]) under the same lock, because once the lock is released
// a reclaim may recycle the record for another holder. It returns the
// record alone so that the hot path passes one register back.
func (sh *shard[K]) grantLocked(e *entry[K], onReclaim func()) *permit[K] {
	p := sh.freePermits
	if p != nil {
		sh.freePermits = p.next
		sh.nFreePermits--
		p.next = nil
	} else {
		p = &permit[K]{sh: sh}
	}
	e.inUse++
	p.entry = e
	p.granted = sh.l.now.Load()
	p.onReclaim = onReclaim
	// A key without a limit has nothing to count cluster-wide: its
	// permits never reach the Store (no round trip, and a Store that
	// refuses while it is down cannot refuse it).
	p.stored = sh.l.s.Store != nil && e.limit != unlimited
	sh.list(p)
	sh.stats.granted++
	return p
}

// handle is the holder's handle of p, just granted; called under the
// shard's lock.
func (p *permit[K]) handle(shadow bool) Permit[K] {
	return Permit[K]{p: p, gen: p.gen, key: p.entry.key, shadow: shadow}
}

// grant is what the Store is told of p, just granted: its key's limit and
// how many permits the key held here before it. Called under the shard's
// lock.
func (p *permit[K]) grant() grant {
	return grant{limit: p.entry.limit, local: p.entry.inUse - 1, stored: p.stored}
}

// takeGlobal takes one unit of the global cap, if there is one.
func (l *Limiter[K]) takeGlobal() bool {
	if l.s.globalPermits == 0 {
		return true
	}
	if l.global.Add(1) > l.s.globalPermits {
		l.global.Add(-1)
		return false
	}
	return true
}

func (l *Limiter[K]) giveGlobal() {
	if l.s.globalPermits != 0 {
		l.global.Add(-1)
	}
}

// release gives back p if its handle is still live. With fromHolder it also
// gives the permit back to the Store; a permit the Store refused was never
// counted there.
func (l *Limiter[K]) release(h Permit[K], fromHolder bool) {
	p := h.p
	if p == nil {
		return
	}
	sh := p.sh
	sh.mu.Lock()
	if p.gen != h.gen {
		sh.mu.Unlock()
		return
	}
	stored := p.stored && fromHolder
	sh.releaseLocked(p)
	sh.mu.Unlock()
	if stored {
		l.s.Store.Release(h.key)
	}
}

// releaseLocked takes back p, hands the freed permit to the first waiter if
// any, and forgets the key if it is idle. It is called with sh.mu held.
func (sh *shard[K]) releaseLocked(p *permit[K]) {
	e := p.entry
	sh.give(p)
	sh.l.giveGlobal()
	sh.admitWaiters(e)
	if e.changed != nil {
		close(e.changed)
		e.changed = nil
	}
	sh.forgetIfIdle(e)
}

// InUse returns how many permits of key are held in this process now.
func (l *Limiter[K]) InUse(key K) int {
	sh, h := l.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.keys.get(h, key); e != nil {
		return int(e.inUse)
	}
	return 0
}

// Close stops the limiter's background work and fails every waiting and
// later request with [ErrClosed]. Permits already held stay valid and may
// still be released. Close is idempotent and always returns nil.
func (l *Limiter[K]) Close() error {
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		close(l.done)
	})
	l.wg.Wait()
	return nil
}

func (l *Limiter[K]) observe(key K, kind EventKind, wait time.Duration) {
	if l.s.Observer != nil {
		l.s.Observer.Observe(Event[K]{Kind: kind, Key: key, Wait: wait})
	}
}

// count records an event that happened outside the shard's lock.
func (l *Limiter[K]) count(key K, kind EventKind) {
	sh, _ := l.shard(key)
	sh.mu.Lock()
	switch kind {
	case StoreFailed:
		sh.stats.storeFailed++
	}
	sh.mu.Unlock()
	l.observe(key, kind, 0)
}

// AcquireOver takes one permit of key whether or not one is free, and
// returns it at once, valid. It is for work that is already running and
// must now be counted here, such as a connection a listener adopts from
// the one it replaces at a reload: refusing it would not stop it, and
// leaving it out would let its key run over its limit. The permit counts
// like any other, and may take the key (and the global count) above its
// limit until enough are released; it is never shadowed and never waits.
// It is counted in this process only, never in the Store: work admitted
// elsewhere is already counted there. After Close it still grants.
func (l *Limiter[K]) AcquireOver(key K) Permit[K] {
	limit := l.s.permits
	if l.s.permitsFor != nil {
		limit = l.s.limitFor(key)
	}
	if l.s.globalPermits != 0 {
		l.global.Add(1)
	}
	sh, h := l.shard(key)
	sh.mu.Lock()
	e := sh.lookup(h, key, limit)
	p := sh.grantLocked(e, nil)
	handle := p.handle(false)
	p.stored = false // never asked of the Store, so never released there
	sh.mu.Unlock()
	l.observe(key, Granted, 0)
	return handle
}
