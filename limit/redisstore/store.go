package redisstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-a07d1050/portcullis/limit"
)

// A Store is a [limit.Store] that shares a limiter's counts with the other
// nodes of a cluster through Redis, so that a key's limit holds over all of
// them. Give each node's Limiter its own Store with its own NodeID, all
// with the same Prefix; one Store serves one Limiter. A Store is safe for
// concurrent use.
//
// Acquire asks Redis (one script, one round trip, bounded by
// Config.Timeout); TryAcquire never calls Redis and answers from the last
// cluster count Redis returned for the key; Release returns at once and the
// decrement reaches Redis in a batch. A background goroutine renews this
// node's leases every Lease/3 by writing its absolute counts, which also
// repairs whatever a lost release, an unanswered script or a Redis restart
// left wrong. See docs/cluster.md for the model.
type Store[K comparable] struct {
	s         settings
	keyString func(K) string
	seed      maphash.Seed
	shards    [numShards]shard[K]
	br        breaker
	outageID  uint64 // this Store in Config.Outages
	st        counters
	epoch     atomic.Int64 // of the last heartbeat snapshot; see scripts.go

	qmu   sync.Mutex
	queue []*entry[K] // entries with a pending change, each once

	kick chan struct{} // wakes the sync loop to send pending changes
	beat chan struct{} // wakes the sync loop to heartbeat now

	nmu      sync.Mutex
	notify   atomic.Pointer[[]func(K)]
	subStart sync.Once
	pubsub   *redis.PubSub // set by the subscriber goroutine, under nmu

	closed    atomic.Bool
	frozen    atomic.Bool // test hook: stopped without giving permits back
	done      chan struct{}
	bg        context.Context // background calls; cancelled by stop
	cancelBg  context.CancelFunc
	stopOnce  sync.Once
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

var (
	_ limit.Store[string]           = (*Store[string])(nil)
	_ limit.ReleaseNotifier[string] = (*Store[string])(nil)
)

// New returns a Store configured by cfg, or an error naming the first
// invalid field. keyString turns a key into the string that names it in
// Redis; every node must map a key to the same string, and distinct keys to
// distinct strings. Nil means the key itself for string keys and
// fmt.Sprint (which allocates) for others.
//
// New does not contact Redis; a Redis that is down shows in the first calls
// and is then handled by the OnError policy. It starts one goroutine, which
// Close stops. The logger warns when the client was not built with
// MaxRetries -1 and ContextTimeoutEnabled (see [NewClient]).
func New[K comparable](cfg Config, keyString func(K) string) (*Store[K], error) {
	s, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	if keyString == nil {
		keyString = defaultKeyString[K]()
	}
	st := &Store[K]{
		s:         s,
		keyString: keyString,
		seed:      maphash.MakeSeed(),
		kick:      make(chan struct{}, 1),
		beat:      make(chan struct{}, 1),
		done:      make(chan struct{}),
		outageID:  storeIDs.Add(1),
	}
	st.bg, st.cancelBg = context.WithCancel(context.Background())
	for i := range st.shards {
		st.shards[i].m = make(map[string]*entry[K])
	}
	// Epochs must grow across restarts of a node with a fixed NodeID and
	// stay exact as Lua numbers (below 2^53).
	st.epoch.Store(time.Now().UnixMilli())
	st.br = breaker{
		threshold: int64(s.BreakerThreshold),
		backoff:   s.BreakerBackoff,
		onChange:  st.breakerChanged,
	}
	checkClientOptions(s.Client, s.Logger)
	st.wg.Add(1)
	go st.syncLoop()
	return st, nil
}

func defaultKeyString[K comparable]() func(K) string {
	var zero K
	if _, ok := any(zero).(string); ok {
		return func(k K) string { return any(k).(string) }
	}
	return func(k K) string { return fmt.Sprint(k) }
}

// checkClientOptions warns about go-redis options that break the Store's
// guarantees: retries may run an acquire script twice, and without
// ContextTimeoutEnabled a call can outlive Config.Timeout.
func checkClientOptions(c redis.UniversalClient, log *slog.Logger) {
	var retries int
	var ctxTimeout bool
	switch c := c.(type) {
	case *redis.Client:
		retries, ctxTimeout = c.Options().MaxRetries, c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		retries, ctxTimeout = c.Options().MaxRetries, c.Options().ContextTimeoutEnabled
	default:
		return
	}
	// go-redis stores MaxRetries -1 as 0 (no retry); 0 from the caller
	// became its default of 3.
	if retries > 0 || !ctxTimeout {
		log.Warn("redisstore: client should have MaxRetries -1 and ContextTimeoutEnabled (use redisstore.NewClient)",
			slog.Int("max_retries", retries), slog.Bool("context_timeout_enabled", ctxTimeout))
	}
}

// NodeID returns the name of this node's fields in Redis.
func (s *Store[K]) NodeID() string { return s.s.NodeID }

// Acquire reports whether one more permit of key may be held cluster-wide
// under limit. It runs one script in Redis, bounded by Config.Timeout and
// ctx: the script drops other nodes' expired leases, sums the live counts
// and, if they are under limit, counts the permit for this node.
//
// When Redis cannot answer (error, timeout, breaker open) it follows
// Config.OnError: Open grants while local is under the node cap
// (ceil(limit × NodeShare)) and refuses (false, nil) above it; Closed
// returns an error wrapping [ErrUnavailable] and the cause. When ctx ends
// first it returns ctx.Err(). A refusal or error holds nothing; a true
// answer must be matched by one Release. After Close it returns
// [ErrClosed].
//
// Acquires of one key that come while another's script is in flight wait
// for it (bounded by ctx) and then take back a permit if it left one
// unused; the next script then takes one permit for each acquire still
// waiting, as many as the limit allows, in one call (see [coalesce]).
//
// When its script runs, the prefetches Config.Prefetch gives for key go
// in the same pipeline; Acquire's answer does not depend on theirs.
func (s *Store[K]) Acquire(ctx context.Context, key K, limit, local int) (bool, error) {
	var w *entry[K] // the entry this Acquire waits on, between rounds
	for round := 0; ; round++ {
		c, wait, decided, ok, err := s.beginAcquire(key, limit, local, w, round < maxWaits)
		if decided {
			return ok, err
		}
		if wait != nil {
			w = c.e
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				s.stopWaiting(w)
				return false, ctx.Err()
			}
		}
		if pre := s.prefetchParts(c.e.ks); len(pre) > 0 {
			return s.acquireWith(ctx, c, pre)
		}
		reply, err := s.callAcquire(ctx, c.e, limit, c.epoch, c.delta, c.extra)
		return s.endAcquire(ctx, c, reply, err)
	}
}

// maxWaits is how many in-flight scripts of its key one Acquire waits for
// before it runs its own: the first may leave it nothing (it took only
// its own permit), the second takes one for each waiter.
const maxWaits = 2

// coalesce: concurrent acquires of one key share script calls. When a key
// goes from quiet to busy (a new connection burst, a client that comes
// back), the acquires that arrive within one round trip would each cost a
// call; instead they wait for the call in flight, and the next call takes
// their permits too (its extra), which they then take back as released
// permits (Redis counts them for this node, so that is exact). A call
// that failed or was refused ends the waiting: each then asks on its own.

// stopWaiting forgets an Acquire that waited on e and gave up.
func (s *Store[K]) stopWaiting(e *entry[K]) {
	sh := s.shardOf(e.ks)
	sh.mu.Lock()
	e.waiting--
	s.forgetIfIdle(sh, e, s.s.Clock.Now().UnixNano())
	sh.mu.Unlock()
}

// An acquireCall is an Acquire whose script is to run: what endAcquire
// needs of it once Redis answered.
type acquireCall[K comparable] struct {
	key          K
	e            *entry[K]
	sh           *shard[K]
	limit, local int
	epoch        int64
	delta        int
	extra        int // permits to take besides its own, for acquires waiting on it
	taking       bool
}

// beginAcquire decides key's Acquire without Redis where it can: after
// Close, for no limit, by the failure policy while the breaker is open, or
// by taking back a permit this node released and has not sent (decided
// true, with the answer). Otherwise, when mayWait and another Acquire's
// script of the key that may take permits for it is in flight, it returns
// a channel closed when that script ends (and c.e, the entry waited on);
// else it counts the script as in flight and returns the call to run.
// waited is the entry an Acquire waited on in its previous round, nil in
// its first (and for [AcquireJointly], which never waits).
func (s *Store[K]) beginAcquire(key K, limit, local int, waited *entry[K], mayWait bool) (c acquireCall[K], wait <-chan struct{}, decided, ok bool, err error) {
	if waited != nil {
		defer s.stopWaiting(waited)
	}
	if s.closed.Load() {
		return c, nil, true, false, ErrClosed
	}
	if limit <= 0 {
		return c, nil, true, false, nil
	}
	now := s.s.Clock.Now()
	if !s.br.allow(now) {
		ok, err = s.fallback(key, limit, local, errBreakerOpen)
		return c, nil, true, ok, err
	}
	ks := s.keyString(key)
	sh := s.shardOf(ks)
	sh.mu.Lock()
	e := s.entryLocked(sh, key, ks)
	e.limit, e.acquired = limit, now.UnixNano()
	if s.reuseLocked(e, limit, now.UnixNano()) {
		sh.mu.Unlock()
		return c, nil, true, true, nil
	}
	if mayWait && e.released != nil {
		// A release of the key is on its way to Redis in a batch, on
		// another connection: a script sent now may run before it and be
		// refused for a permit this node no longer holds (a client
		// sending one request after another, limit 1, refused). Wait for
		// the batch; it takes a round trip at most.
		e.waiting++
		ch := e.released
		sh.mu.Unlock()
		return acquireCall[K]{e: e}, ch, false, false, nil
	}
	if mayWait && e.taking != nil && !e.alone {
		e.waiting++
		ch := e.taking
		sh.mu.Unlock()
		return acquireCall[K]{e: e}, ch, false, false, nil
	}
	// Releases not yet sent ride along with the script: a busy key's
	// releases then cost no round trip of their own.
	c = acquireCall[K]{key: key, e: e, sh: sh, limit: limit, local: local, epoch: e.epoch, delta: e.pending}
	e.pending, e.fixes = 0, 0
	if mayWait && e.taking == nil {
		// Acquires of the key that come meanwhile wait for this call,
		// which takes a permit for each of those already waiting.
		c.taking, c.extra = true, max(e.waiting-boolInt(waited == e), 0)
		e.taking = make(chan struct{})
	}
	e.inflight += 1 + c.extra // the permits it may take, for a heartbeat meanwhile
	sh.mu.Unlock()
	return c, nil, false, false, nil
}

// reuseLocked takes back, for a new holder, a permit of e this node
// released and has not told Redis of yet, and reports whether there was
// one. Redis still counts such a permit for this node (a spare, or a
// release held by ReleaseHold), so taking it again changes nothing there
// and needs no round trip: exact, since the cluster's count in Redis stays
// what it was when Redis granted it. A heartbeat or a flush since the
// release set pending back to 0, and a lease not renewed for half a lease
// (as after an outage) leaves nothing to take: a permit Redis may no
// longer count is never taken so. It is called with e's shard lock held.
func (s *Store[K]) reuseLocked(e *entry[K], limit int, now int64) bool {
	if e.reusable() == 0 || e.dirty || e.held >= limit || s.br.current() != BreakerClosed ||
		now-e.renewed >= int64(s.s.Lease/2) {
		return false
	}
	e.held++
	e.pending++
	e.prefetched = max(e.prefetched-1, 0)
	s.st.reused.Add(1)
	return true
}

// A Store can grant from what it holds (for the daemon's byte path, which
// never waits for a round trip).
var _ limit.HeldStore[string] = (*Store[string])(nil)

// AcquireHeld grants a permit of key only by taking back one this node
// holds in Redis without a holder (see reuseLocked): exact, without
// blocking and without a round trip. False says only that there is no
// such permit now; Acquire would ask Redis. A true answer must later be
// matched by one Release. It is what lets a data path that must not block
// (the daemon's byte path) admit most requests of a busy key on a cluster
// and hand the others to a path that may wait for Redis.
func (s *Store[K]) AcquireHeld(key K, limit int) bool {
	if s.closed.Load() || limit <= 0 {
		return false
	}
	ks := s.keyString(key)
	sh := s.shardOf(ks)
	now := s.s.Clock.Now().UnixNano()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[ks]
	if e == nil || !s.reuseLocked(e, limit, now) {
		return false
	}
	e.limit, e.acquired = limit, now
	return true
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// endAcquire ends the call begun by beginAcquire with Redis's reply or
// err, and returns Acquire's answer.
func (s *Store[K]) endAcquire(ctx context.Context, c acquireCall[K], reply acquireReply, err error) (bool, error) {
	e, sh := c.e, c.sh
	sh.mu.Lock()
	e.inflight -= 1 + c.extra
	if c.taking {
		close(e.taking)
		e.taking = nil
		e.alone = err != nil || !reply.granted
	}
	if err != nil {
		// The script may have run: have the heartbeat rewrite the count.
		e.dirty = true
		sh.mu.Unlock()
		if ctx.Err() != nil {
			// The caller gave up; that says nothing about Redis.
			s.br.abandon()
			return false, ctx.Err()
		}
		s.br.failure(s.s.Clock.Now(), err)
		return s.fallback(c.key, c.limit, c.local, err)
	}
	nowNs := s.s.Clock.Now().UnixNano()
	e.others, e.seen = reply.others, nowNs
	if reply.granted {
		e.renewed = nowNs
		e.held++
		// The permits taken for the acquires waiting on this call: Redis
		// counts them for this node, which they take back as released.
		e.pending -= reply.got
		wake := false
		switch {
		case e.epoch <= c.epoch:
			// No snapshot was taken while it was in flight: exact.
		case reply.stale && reply.ae == e.epoch:
			// Granted after the write of the snapshot that counted it
			// (and its extra) as in flight: Redis counts those twice.
			wake = s.fixLocked(e, 1+c.extra)
		default:
			// Granted before the write of the latest snapshot that
			// counted it, which counts 1+extra where 1+got were taken.
			wake = s.overCountedLocked(e, c.extra-reply.got)
		}
		sh.mu.Unlock()
		if wake {
			s.kickSync()
		}
		s.br.success()
		return true, nil
	}
	e.watched = nowNs
	if e.epoch > c.epoch && s.overCountedLocked(e, 1+c.extra) {
		sh.mu.Unlock()
		s.kickSync()
	} else {
		sh.mu.Unlock()
	}
	s.br.success()
	return false, nil
}

// overCountedLocked takes off k permits that the latest heartbeat snapshot
// counted for an acquire in flight and Redis did not grant: all of them
// for a refused acquire, the extra it did not get for a granted one. A
// snapshot counts the acquires in flight with the permits they may take
// (one Redis grants before the snapshot's write lands would be lost
// otherwise), so once that write is applied Redis counts k too many. Left
// to the next snapshot, a node whose acquires of a key are always in
// flight (waiters polling a full key) would keep such phantom permits for
// good and refuse itself the permits other nodes give back (issue 38: a
// node refused every millisecond saw a dead node's permits a heartbeat or
// more after the lease ended). The correction is a delta sent after the
// write (the sync loop sends both, in that order), and only once the write
// has been applied: a write that failed counted nothing, and its rewrite
// counts afresh. (A granted acquire's reply says itself whether it ran
// after the write: see scripts.go.) It is called with e's shard lock held
// and reports whether the sync loop must be woken.
func (s *Store[K]) overCountedLocked(e *entry[K], k int) bool {
	if k <= 0 {
		return false
	}
	if e.written != e.epoch {
		e.phantom += k // applySync takes them off once the write is applied
		return false
	}
	return s.fixLocked(e, k)
}

// fixLocked queues the correction of k permits Redis counts too many for
// e: a decrement that Acquire must not take back as released permits,
// since the count it corrects was written by a snapshot, not granted under
// the limit. It is called with e's shard lock held and reports whether
// the sync loop must be woken.
func (s *Store[K]) fixLocked(e *entry[K], k int) bool {
	e.pending -= k
	e.fixes += k
	return s.queueLocked(e)
}

// callAcquire runs the acquire script under Config.Timeout and records it.
func (s *Store[K]) callAcquire(ctx context.Context, e *entry[K], limit int, epoch int64, delta, extra int) (acquireReply, error) {
	ctx, cancel := context.WithTimeout(ctx, s.s.Timeout)
	defer cancel()
	start := time.Now()
	reply, err := s.runAcquire(ctx, e.name, limit, epoch, delta, extra, e.ks)
	s.st.call(opAcquire, time.Since(start), err)
	return reply, err
}

// fallback decides without Redis, after cause, by the OnError policy.
func (s *Store[K]) fallback(key K, limit, local int, cause error) (bool, error) {
	if s.s.OnError == Closed {
		s.st.unavailable.Add(1)
		if cause == errBreakerOpen {
			return false, cause
		}
		return false, fmt.Errorf("%w: %w", ErrUnavailable, cause)
	}
	if local >= s.s.nodeCap(limit) {
		s.st.fallbackRefusals.Add(1)
		return false, nil
	}
	s.st.fallbacks.Add(1)
	s.grant(key)
	return true, nil
}

// grant counts a permit of key granted without Redis counting it.
func (s *Store[K]) grant(key K) {
	ks := s.keyString(key)
	sh := s.shardOf(ks)
	sh.mu.Lock()
	wake := s.grantLocked(s.entryLocked(sh, key, ks))
	sh.mu.Unlock()
	if wake {
		s.kickSync()
	}
}

// TryAcquire reports whether one more permit of key may be held, without
// blocking and without calling Redis. While Redis answers, it decides from
// the count of other nodes' permits that Redis last returned for key
// (through Acquire, a release batch or the heartbeat), if that is younger
// than one lease: it grants while that count plus local is under limit.
// With no such count it grants while local is under the node cap
// (ceil(limit × NodeShare)). A permit it grants is sent to Redis in the
// next batch. While the breaker is open it follows Config.OnError like
// Acquire. It is approximate where Acquire is exact: two nodes deciding
// from cached counts at the same moment can together exceed limit until
// their next batch.
func (s *Store[K]) TryAcquire(key K, limit, local int) (bool, error) {
	if s.closed.Load() {
		return false, ErrClosed
	}
	if limit <= 0 {
		return false, nil
	}
	now := s.s.Clock.Now()
	if s.br.current() != BreakerClosed {
		return s.fallback(key, limit, local, errBreakerOpen)
	}
	ks := s.keyString(key)
	sh := s.shardOf(ks)
	sh.mu.Lock()
	e := sh.m[ks]
	if e == nil || !s.fresh(e, now.UnixNano()) {
		sh.mu.Unlock()
		return s.byNodeCap(key, limit, local)
	}
	s.st.cached.Add(1)
	if e.others+local >= limit {
		e.watched = now.UnixNano()
		sh.mu.Unlock()
		return false, nil
	}
	wake := s.grantLocked(e)
	sh.mu.Unlock()
	if wake {
		s.kickSync()
	}
	return true, nil
}

// byNodeCap grants while local is under the node cap.
func (s *Store[K]) byNodeCap(key K, limit, local int) (bool, error) {
	if local >= s.s.nodeCap(limit) {
		return false, nil
	}
	s.grant(key)
	return true, nil
}

// Release gives back one permit of key. It never blocks: the decrement is
// queued, and reaches Redis with the key's next Acquire or, after 2 ms, in
// the background goroutine's next pipeline with the other queued changes.
// A Release without a matching grant is ignored.
// After Close it only updates this node's own count (Close already removed
// this node's counts from Redis).
func (s *Store[K]) Release(key K) {
	ks := s.keyString(key)
	sh := s.shardOf(ks)
	sh.mu.Lock()
	e := sh.m[ks]
	if e == nil || e.held == 0 {
		sh.mu.Unlock()
		return
	}
	e.held--
	e.pending--
	wake := s.queueLocked(e)
	sh.mu.Unlock()
	if wake {
		s.kickSync()
	}
}

// NotifyRelease registers f to be called with a key when another node
// releases a permit of it while this node's waiters are refused by Redis.
// The limiter registers it at construction. Notifications travel over Redis
// pub/sub on the channel Prefix+"released"; a release publishes only when
// some node was refused for that key within the last lease, so idle and
// uncontended keys cost no messages. f is called from the Store's
// subscriber goroutine and must not block. A lost notification only delays
// a waiter until its next poll.
func (s *Store[K]) NotifyRelease(f func(key K)) {
	s.nmu.Lock()
	var fs []func(K)
	if p := s.notify.Load(); p != nil {
		fs = append(fs, *p...)
	}
	fs = append(fs, f)
	s.notify.Store(&fs)
	s.nmu.Unlock()
	s.subStart.Do(func() {
		if s.closed.Load() {
			return
		}
		s.wg.Add(1)
		go s.subscribe()
	})
}

// Stats returns a snapshot of the Store's counters.
func (s *Store[K]) Stats() Stats {
	var st Stats
	s.st.snapshot(&st)
	st.Breaker = s.br.current()
	st.BreakerOpens = s.br.opens.Load()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Keys += len(sh.m)
		for _, e := range sh.m {
			st.Held += e.held
		}
		sh.mu.Unlock()
	}
	return st
}

// Close stops the Store's goroutines and removes this node's counts from
// Redis in one pipeline bounded by 10 × Timeout (at least 500 ms), waking
// other nodes' waiters. Permits still held through the Store are then no
// longer counted cluster-wide. Later Acquire and TryAcquire calls return
// [ErrClosed]. It does not close Config.Client. If Redis cannot be reached
// it returns the error, and the counts expire within one Lease. Close is
// idempotent; later calls return the first call's result.
func (s *Store[K]) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.stop()
		if o := s.s.Outages; o != nil {
			o.forget(s.outageID)
		}
		if !s.frozen.Load() {
			s.closeErr = s.removeCounts()
		}
	})
	return s.closeErr
}

// stop ends the background goroutines and waits for them.
func (s *Store[K]) stop() {
	s.stopOnce.Do(func() {
		close(s.done)
		s.cancelBg()
		s.nmu.Lock()
		if s.pubsub != nil {
			_ = s.pubsub.Close()
		}
		s.nmu.Unlock()
	})
	s.wg.Wait()
}

// removeCounts deletes this node's fields for every key it knows.
func (s *Store[K]) removeCounts() error {
	var calls []syncCall
	epoch := s.epoch.Add(1)
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, e := range sh.m {
			if e.held != 0 || e.inflight != 0 || e.pending != 0 || e.dirty {
				calls = append(calls, syncCall{name: e.name, mode: "a", n: 0, epoch: epoch, message: e.ks})
			}
		}
		sh.mu.Unlock()
	}
	if len(calls) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(10*s.s.Timeout, 500*time.Millisecond))
	defer cancel()
	start := time.Now()
	err := s.runSync(ctx, calls)
	s.st.call(opSync, time.Since(start), err)
	if err != nil {
		return fmt.Errorf("redisstore: close: %w", err)
	}
	return nil
}

// breakerState returns the breaker's state and whether the Store is closed.
func (s *Store[K]) breakerState() (BreakerState, bool) { return s.br.current(), s.closed.Load() }

// breakerChanged logs the breaker's transitions (through Config.Outages
// when set), and after Redis comes back has the heartbeat rewrite every
// count at once.
func (s *Store[K]) breakerChanged(from, to BreakerState, err error) {
	if o := s.s.Outages; o != nil {
		o.changed(s.outageID, s.s.Name, s.breakerState, s.s.OnError, s.s.BreakerBackoff, err)
	}
	switch to {
	case BreakerOpen:
		if from == BreakerClosed && s.s.Outages == nil {
			s.s.Logger.Warn("redisstore: redis unavailable, circuit breaker open",
				slog.String("store", s.s.Name),
				slog.String("on_error", s.s.OnError.String()),
				slog.Duration("retry_after", s.s.BreakerBackoff),
				slog.Any("error", err))
		}
	case BreakerClosed:
		if s.s.Outages == nil {
			s.s.Logger.Info("redisstore: redis reachable again, circuit breaker closed", slog.String("store", s.s.Name))
		}
		select {
		case s.beat <- struct{}{}:
		default:
		}
	}
}
