package redisstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-a07d1050/portcullis/rate"
)

// A RateStore is a [rate.Store] that keeps a rate limiter's state in
// Redis, so that a key's rate holds over every node of a cluster. Give each
// node's rate.Limiter its own RateStore, all with the same Prefix. A
// RateStore is safe for concurrent use.
//
// Redis holds one number per busy key, its theoretical arrival time (TAT)
// in microseconds of Redis's own clock, in a string key that expires when
// the key is back to a fresh state. [RateStore.Reserve] is one script call
// (EVALSHA, one round trip) that applies the GCRA there, after adding the
// requests this node admitted without asking. Each node remembers the TAT
// Redis last returned for a key: since it only grows, a request that this
// remembered TAT already refuses is refused without a round trip, exactly.
// With RateConfig.LocalShare, a node also admits a few requests of a key
// without a round trip (the fast path) and sends them later. See
// docs/ratelimit.md for the bound this puts on the cluster's rate.
type RateStore[K comparable] struct {
	s         rateSettings
	keyString func(K) string
	seed      maphash.Seed
	base      time.Time
	shards    [numShards]rateShard
	br        breaker
	outageID  uint64 // this RateStore in RateConfig.Outages
	st        counters
	local     atomic.Uint64
	leased    atomic.Uint64 // requests admitted from leased tokens
	leaseGot  atomic.Uint64 // tokens taken into leases

	qmu   sync.Mutex
	queue []*rateEntry

	done      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
	closed    atomic.Bool
}

var _ rate.Store[string] = (*RateStore[string])(nil)

type rateShard struct {
	mu sync.Mutex
	m  map[string]*rateEntry
}

// A rateEntry is what this node knows of one key.
type rateEntry struct {
	ks, name string
	pending  int   // admitted here (or, negative, cancelled) and not yet sent
	sending  int   // admitted here and sent, in calls Redis has not answered yet
	interval int64 // µs in Redis of the limit the pending requests were admitted under
	inflight int
	queued   bool
	tat      int64 // the key's TAT as Redis last returned it, in node time (ns); 0 none
	fbTat    int64 // the node-local TAT of the Open fallback (node time)
	fbIv     int64 // the node-local interval fbTat advances by (node time)
	fbOwed   bool  // fallback admissions not yet charged to Redis
	fbPaid   int64 // fbTat up to which Redis was charged
	lease    rateLease
}

// ratePolicy is a rate.Limit in the forms the store computes with.
type ratePolicy struct {
	iv, window int64 // node time, ns
	ivUS       int64 // Redis, µs (rounded up)
	windowUS   int64
	local      int   // requests a node may admit without asking
	batch      int   // tokens a lease takes at most (0: no lease)
	leaseUS    int64 // how far past now a lease's tokens may reach, µs
}

func (s *RateStore[K]) policy(lim rate.Limit) (ratePolicy, bool) {
	iv := int64(lim.Rate.Interval())
	if iv == 0 || lim.Validate() != nil {
		return ratePolicy{}, false
	}
	n := int64(lim.Burst + 1)
	p := ratePolicy{iv: iv, window: n * iv, ivUS: (iv + 999) / 1000}
	p.windowUS = n * p.ivUS
	p.local = int(math.Floor(float64(n) * s.s.LocalShare))
	if b := min(int64(s.s.LeaseTokens), n/2); b >= 2 {
		p.batch = int(b)
		// A leased token used later must not be delayed where one asked
		// for then would not: its slot ends within the undelayed part of
		// the burst (nginx's delay=N), rounded down to Redis's µs.
		p.leaseUS = p.windowUS
		if lim.Delay != rate.NoDelay && lim.Delay < lim.Burst {
			p.leaseUS = min(p.leaseUS, int64(lim.Delay+1)*iv/1000)
		}
	}
	return p, true
}

// NewRate returns a RateStore configured by cfg, or an error naming the
// first invalid field. keyString turns a key into the string that names it
// in Redis, as for [New]. It does not contact Redis. It starts one
// goroutine, which Close stops.
func NewRate[K comparable](cfg RateConfig, keyString func(K) string) (*RateStore[K], error) {
	s, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	if keyString == nil {
		keyString = defaultKeyString[K]()
	}
	st := &RateStore[K]{s: s, keyString: keyString, seed: maphash.MakeSeed(), done: make(chan struct{}), outageID: storeIDs.Add(1)}
	st.base = s.Clock.Now()
	for i := range st.shards {
		st.shards[i].m = make(map[string]*rateEntry)
	}
	st.br = breaker{threshold: int64(s.BreakerThreshold), backoff: s.BreakerBackoff, onChange: st.breakerChanged}
	checkClientOptions(s.Client, s.Logger)
	st.wg.Add(1)
	go st.loop()
	return st, nil
}

func (s *RateStore[K]) now() int64 { return int64(s.s.Clock.Now().Sub(s.base)) }

func (s *RateStore[K]) entry(key K) (*rateShard, *rateEntry) {
	ks := s.keyString(key)
	sh := &s.shards[maphash.String(s.seed, ks)%numShards]
	sh.mu.Lock()
	e := sh.m[ks]
	if e == nil {
		e = &rateEntry{ks: ks, name: s.s.Prefix + "{" + ks + "}"}
		sh.m[ks] = e
	}
	return sh, e
}

// estimate is the key's TAT as this node knows it: what Redis last said,
// plus what this node admitted since without telling it. Redis's TAT
// never moves back except by cancellations, so this is a lower bound of
// the truth.
func (e *rateEntry) estimate(p *ratePolicy, now int64) int64 {
	return max(e.tat, now) + int64(e.pending+e.sending)*p.iv
}

// takeFallbackCharge returns, in Redis µs, what the node's admissions
// under the Open fallback still owe the key's cluster-wide state, and
// marks them as sent; the caller calls fallbackSent with the returned
// mark once Redis has counted them, or fallbackUnsent if it has not.
//
// A node in the fallback admits at NodeShare of the rate on its own GCRA
// state (fbTat). What it admitted there was already limited to its share
// over the time that passed, so it is not charged again request by
// request (which would put the key's TAT n intervals past the end of the
// outage and refuse a client that kept to its rate for as long as the
// outage lasted). What is charged is the node-local state's lead over now
// beyond its newest admission, converted to the cluster rate: the burst
// the node let the client use and that has not yet refilled. A client that
// kept to its rate leaves no lead and owes nothing; one that spent its
// burst on a node owes that burst. So the cluster may admit, once after an
// outage, up to one request per node beyond the exact rate.
func (e *rateEntry) takeFallbackCharge(p *ratePolicy, now int64) (us, mark int64) {
	if !e.fbOwed {
		return 0, 0
	}
	e.fbOwed = false
	mark = e.fbTat
	if e.fbIv <= 0 {
		return 0, mark
	}
	lead := e.fbTat - max(now, e.fbPaid)
	if e.fbPaid <= now {
		lead -= e.fbIv // the newest admission; only once per run of them
	}
	if lead <= 0 {
		return 0, mark
	}
	// lead / fbIv node-local requests, each worth one interval of the
	// cluster rate.
	us = int64(math.Ceil(float64(lead) / float64(e.fbIv) * float64(p.ivUS)))
	return us, mark
}

// fallbackSent records that Redis counted the fallback's admissions up to
// mark; fallbackUnsent that it did not, so that the next call sends them.
func (e *rateEntry) fallbackSent(mark int64) { e.fbPaid = max(e.fbPaid, mark) }

func (e *rateEntry) fallbackUnsent(mark int64) {
	if mark > e.fbPaid {
		e.fbOwed = true
	}
}

// A rateSend is what one script call carries for a key besides its own
// request: the admissions made without asking (negative: cancellations)
// and the charge of the Open fallback's admissions, with its mark.
type rateSend struct {
	n          int
	owed, mark int64
}

// beginSend takes e's pending admissions and the fallback's charge into a
// call. Until endSend they count as sending, so that estimate and the
// fast path's bound still see them while the call is in flight. It is
// called with e's shard lock held.
func (e *rateEntry) beginSend(p *ratePolicy, now int64) rateSend {
	c := rateSend{n: e.pending}
	c.owed, c.mark = e.takeFallbackCharge(p, now)
	e.pending = 0
	if c.n > 0 {
		e.sending += c.n
	}
	e.inflight++
	return c
}

// endSend ends a call begun by beginSend, with its reply or err. A call
// that failed leaves what it carried owed, queued for the flush; one that
// succeeded sets the key's known TAT (moving it back only when the call
// carried cancellations) to the reply's ahead past sent, the node time
// before the call was sent. That is no later than Redis's clock when the
// script ran, so the known TAT is never later than Redis's and a request
// it refuses Redis refuses too. (Anchored at the reply's arrival instead,
// it ran a round trip late: the cache then refused requests Redis would
// have admitted, and under -race an exact pair of nodes fell more than
// 5 % short of the rate, issue 38.) It is called with e's shard lock held.
func (s *RateStore[K]) endSend(e *rateEntry, c rateSend, ivUS int64, reply rateReply, err error, sent int64) {
	e.inflight--
	if c.n > 0 {
		e.sending -= c.n
	}
	if err != nil {
		e.fallbackUnsent(c.mark)
		if e.fbOwed {
			s.enqueue(e)
		}
		s.addPending(e, &ratePolicy{ivUS: ivUS}, c.n)
		return
	}
	e.fallbackSent(c.mark)
	if c.n < 0 {
		e.tat = sent + reply.ahead*1000
	} else {
		e.tat = max(e.tat, sent+reply.ahead*1000)
	}
}

// unchecked is how many admissions of e this node made that Redis has not
// yet checked: pending ones and those in calls not answered yet. The fast
// path admits only while it is under the policy's local share, so that a
// node never holds more than that many unchecked admissions, also while a
// round trip is slow.
func (e *rateEntry) unchecked() int { return e.pending + e.sending }

// Reserve decides one request of key under lim cluster-wide, as
// [rate.Store] says. A request the key's last known TAT already refuses is
// refused at once, without a round trip; one within the local fast path
// (RateConfig.LocalShare) is admitted at once and sent later; any other
// runs the script in Redis, bounded by RateConfig.Timeout and ctx. When
// Redis cannot answer it follows RateConfig.OnError: Open decides on the
// node-local share (NodeShare), Closed returns an error wrapping
// [ErrUnavailable]. After Close it returns [ErrClosed].
func (s *RateStore[K]) Reserve(ctx context.Context, key K, lim rate.Limit) (bool, time.Duration, error) {
	return s.reserve(ctx, key, lim, true)
}

// TryReserve is Reserve without a round trip: beyond the cached refusal
// and the fast path it admits while the key's last known TAT allows,
// counting the request to be sent in the next flush. Two nodes deciding
// so at the same moment may together exceed the rate until their next
// flush; Reserve is exact.
func (s *RateStore[K]) TryReserve(key K, lim rate.Limit) (bool, time.Duration, error) {
	return s.reserve(context.Background(), key, lim, false)
}

func (s *RateStore[K]) reserve(ctx context.Context, key K, lim rate.Limit, mayCall bool) (bool, time.Duration, error) {
	if s.closed.Load() {
		return false, 0, ErrClosed
	}
	p, ok := s.policy(lim)
	if !ok {
		return true, 0, nil // unlimited
	}
	ahead, ok, claimed := s.fromLease(ctx, key, &p, mayCall)
	if ok {
		return true, ahead, nil
	}
	extra := 0
	if claimed {
		// This request takes the lease's tokens; a path that decides
		// without calling Redis gives the claim back.
		extra = p.batch - 1
		defer func() {
			if extra > 0 {
				s.unclaim(key)
			}
		}()
	}
	probe := s.br.current() != BreakerClosed
	if !s.br.allow(s.s.Clock.Now()) {
		return s.fallback(key, &p, errBreakerOpen)
	}
	now := s.now()
	sh, e := s.entry(key)
	est := e.estimate(&p, now)
	if est+p.iv-now > p.window {
		sh.mu.Unlock()
		s.st.cached.Add(1)
		s.skipProbe(probe)
		return false, time.Duration(est - now), nil
	}
	if e.pending >= 0 && e.unchecked() < p.local || !mayCall {
		if e.unchecked() >= p.local {
			s.st.cached.Add(1)
		} else {
			s.local.Add(1)
		}
		s.addPending(e, &p, 1)
		sh.mu.Unlock()
		s.skipProbe(probe)
		return true, time.Duration(est + p.iv - now), nil
	}
	send := e.beginSend(&p, now)
	name := e.name
	sh.mu.Unlock()

	reply, err := s.callReserve(ctx, name, &p, send, extra)

	sh.mu.Lock()
	s.endSend(e, send, p.ivUS, reply, err, now)
	if err == nil && reply.got > 0 {
		e.lease.take(&p, reply, now)
		s.leaseGot.Add(uint64(reply.got))
	}
	if extra > 0 {
		e.lease.endTaking()
		extra = 0 // the claim is over
	}
	sh.mu.Unlock()
	if err != nil {
		if ctx.Err() != nil {
			s.br.abandon()
			return false, 0, ctx.Err()
		}
		s.br.failure(s.s.Clock.Now(), err)
		return s.fallback(key, &p, err)
	}
	s.br.success()
	return reply.ok, time.Duration(reply.ahead * 1000), nil
}

// skipProbe hands the breaker's probe back when the request that was let
// through to probe Redis decided without asking it, so that the next one
// probes.
func (s *RateStore[K]) skipProbe(probe bool) {
	if probe {
		s.br.abandon()
	}
}

// addPending counts n requests of e admitted (or, negative, cancelled)
// without Redis and queues e for the flush. It is called with e's shard
// lock held.
func (s *RateStore[K]) addPending(e *rateEntry, p *ratePolicy, n int) {
	e.pending += n
	e.interval = p.ivUS
	if e.pending != 0 {
		s.enqueue(e)
	}
}

// enqueue queues e for the next flush. It is called with e's shard lock
// held.
func (s *RateStore[K]) enqueue(e *rateEntry) {
	if e.queued {
		return
	}
	e.queued = true
	s.qmu.Lock()
	s.queue = append(s.queue, e)
	s.qmu.Unlock()
}

// fallback decides without Redis, after cause, by the OnError policy.
// Under Open, the node applies the key's limit at NodeShare on its own
// state, and counts its admissions to send once Redis answers.
func (s *RateStore[K]) fallback(key K, p *ratePolicy, cause error) (bool, time.Duration, error) {
	if s.s.OnError == Closed {
		s.st.unavailable.Add(1)
		if cause == errBreakerOpen {
			return false, 0, cause
		}
		return false, 0, fmt.Errorf("%w: %w", ErrUnavailable, cause)
	}
	ok, ahead := s.fallbackN(key, p, 1)
	return ok, ahead, nil
}

// Cancel gives back one request of key that this store admitted: one not
// yet sent to Redis is simply not sent; otherwise the next flush moves the
// key's TAT in Redis back one interval (not before Redis's now). It never
// blocks.
func (s *RateStore[K]) Cancel(key K, lim rate.Limit) { s.CancelN(key, lim, 1) }

// RateStats is a snapshot of a RateStore's counters. Counters only grow;
// Breaker and Keys are current values.
type RateStats struct {
	Reserve CallStats // scripts on the request path
	Flush   CallStats // pipelines of requests admitted without asking, and cancellations

	// Latency covers every round trip counted above.
	Latency Histogram

	// Local counts requests admitted by the fast path (LocalShare)
	// without a round trip.
	Local uint64
	// Leased counts requests admitted from leased tokens (LeaseTokens)
	// without a round trip; LeaseTaken counts the tokens taken into
	// leases, so LeaseTaken - Leased is what leases held or let expire.
	Leased     uint64
	LeaseTaken uint64
	// Cached counts decisions taken from the key's last known TAT without
	// a round trip: refusals (exact), and TryReserve admissions beyond
	// the fast path (approximate).
	Cached uint64

	// Fallbacks and FallbackRefusals count decisions on the node-local
	// share while Redis could not answer (Open); Unavailable counts
	// refusals for that reason (Closed).
	Fallbacks        uint64
	FallbackRefusals uint64
	Unavailable      uint64

	Breaker      BreakerState // now
	BreakerOpens uint64

	Keys int // keys this node keeps a view of
}

// Stats returns a snapshot of the RateStore's counters.
func (s *RateStore[K]) Stats() RateStats {
	var all Stats
	s.st.snapshot(&all)
	st := RateStats{
		Reserve: all.Acquire, Flush: all.Sync, Latency: all.Latency,
		Local: s.local.Load(), Cached: all.Cached,
		Leased: s.leased.Load(), LeaseTaken: s.leaseGot.Load(),
		Fallbacks: all.Fallbacks, FallbackRefusals: all.FallbackRefusals, Unavailable: all.Unavailable,
		Breaker: s.br.current(), BreakerOpens: s.br.opens.Load(),
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Keys += len(sh.m)
		sh.mu.Unlock()
	}
	return st
}

// Close stops the background goroutine after one last flush (bounded by
// 10 × Timeout, at least 500 ms), so that requests admitted without asking
// still count in Redis. Later calls decide nothing and return
// [ErrClosed]. It does not close RateConfig.Client. Close is idempotent;
// later calls return the first call's result.
func (s *RateStore[K]) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		close(s.done)
		s.wg.Wait()
		if o := s.s.Outages; o != nil {
			o.forget(s.outageID)
		}
		ctx, cancel := context.WithTimeout(context.Background(), max(10*s.s.Timeout, 500*time.Millisecond))
		defer cancel()
		s.closeErr = s.flush(ctx)
	})
	return s.closeErr
}

// breakerState returns the breaker's state and whether the RateStore is
// closed.
func (s *RateStore[K]) breakerState() (BreakerState, bool) { return s.br.current(), s.closed.Load() }

// breakerChanged logs the breaker's transitions, through
// RateConfig.Outages when set.
func (s *RateStore[K]) breakerChanged(from, to BreakerState, err error) {
	if o := s.s.Outages; o != nil {
		o.changed(s.outageID, s.s.Name, s.breakerState, s.s.OnError, s.s.BreakerBackoff, err)
		return
	}
	switch to {
	case BreakerOpen:
		if from == BreakerClosed {
			s.s.Logger.Warn("redisstore: redis unavailable for rates, circuit breaker open",
				slog.String("store", s.s.Name),
				slog.String("on_error", s.s.OnError.String()),
				slog.Duration("retry_after", s.s.BreakerBackoff),
				slog.Any("error", err))
		}
	case BreakerClosed:
		s.s.Logger.Info("redisstore: redis reachable again for rates, circuit breaker closed", slog.String("store", s.s.Name))
	}
}

// loop flushes every FlushInterval and forgets idle keys every second.
func (s *RateStore[K]) loop() {
	defer s.wg.Done()
	t := time.NewTicker(s.s.FlushInterval)
	defer t.Stop()
	lastSweep := time.Now()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		if s.br.current() == BreakerClosed || s.br.allow(s.s.Clock.Now()) {
			ctx, cancel := context.WithTimeout(context.Background(), s.s.Timeout)
			err := s.flush(ctx)
			cancel()
			switch {
			case err == nil:
				s.br.success()
			case isQueueEmpty(err):
				s.br.abandon() // a probe that asked nothing: let the next call probe
			default:
				s.br.failure(s.s.Clock.Now(), err)
			}
		}
		if time.Since(lastSweep) >= time.Second {
			s.sweep()
			lastSweep = time.Now()
		}
	}
}

// errNothingToFlush tells the loop that a flush made no call, which says
// nothing about Redis.
var errNothingToFlush = fmt.Errorf("redisstore: nothing to flush")

func isQueueEmpty(err error) bool { return err == errNothingToFlush }

// flush sends every queued key's pending requests in one pipeline and
// updates the keys' known TAT. Calls that fail keep their requests
// pending.
func (s *RateStore[K]) flush(ctx context.Context) error {
	s.qmu.Lock()
	q := s.queue
	s.queue = nil
	s.qmu.Unlock()
	type call struct {
		e    *rateEntry
		sh   *rateShard
		iv   int64
		send rateSend
		cmd  *redis.Cmd
	}
	var calls []call
	now := s.now()
	for _, e := range q {
		sh := &s.shards[maphash.String(s.seed, e.ks)%numShards]
		sh.mu.Lock()
		e.queued = false
		if e.pending != 0 || e.fbOwed {
			calls = append(calls, call{e: e, sh: sh, iv: e.interval, send: e.beginSend(&ratePolicy{ivUS: e.interval}, now)})
		}
		sh.mu.Unlock()
	}
	if len(calls) == 0 {
		return errNothingToFlush
	}
	start := time.Now()
	pipe := s.s.Client.Pipeline()
	for i := range calls {
		c := &calls[i]
		c.cmd = rateScript.EvalSha(ctx, pipe, []string{c.e.name}, c.iv, 0, c.send.n, 0, c.send.owed)
	}
	_, err := pipe.Exec(ctx)
	if err != nil && isNoScript(err) {
		if lerr := rateScript.Load(ctx, s.s.Client).Err(); lerr == nil {
			pipe = s.s.Client.Pipeline()
			for i := range calls {
				c := &calls[i]
				c.cmd = rateScript.EvalSha(ctx, pipe, []string{c.e.name}, c.iv, 0, c.send.n, 0, c.send.owed)
			}
			_, err = pipe.Exec(ctx)
		}
	}
	s.st.call(opSync, time.Since(start), err)
	var first error
	for _, c := range calls {
		reply, cerr := decodeRate(c.cmd.Val(), c.cmd.Err())
		c.sh.mu.Lock()
		s.endSend(c.e, c.send, c.iv, reply, cerr, now)
		c.sh.mu.Unlock()
		if cerr != nil && first == nil {
			first = cerr
		}
	}
	if first != nil {
		return fmt.Errorf("redisstore: rate flush: %w", first)
	}
	return nil
}

// sweep forgets the keys this node has nothing more to do about.
func (s *RateStore[K]) sweep() {
	now := s.now()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for ks, e := range sh.m {
			if e.pending == 0 && e.sending == 0 && e.inflight == 0 && !e.queued && e.tat <= now && e.fbTat <= now {
				delete(sh.m, ks)
			}
		}
		sh.mu.Unlock()
	}
}

// callReserve runs the script for one request after n pending ones, taking
// up to extra more tokens for the key's lease, under Timeout, and records
// the round trip.
func (s *RateStore[K]) callReserve(ctx context.Context, name string, p *ratePolicy, send rateSend, extra int) (rateReply, error) {
	ctx, cancel := context.WithTimeout(ctx, s.s.Timeout)
	defer cancel()
	start := time.Now()
	v, err := rateScript.Run(ctx, s.s.Client, []string{name}, p.ivUS, p.windowUS, send.n, 1, send.owed, extra, p.leaseUS).Result()
	s.st.call(opAcquire, time.Since(start), err)
	if err != nil {
		return rateReply{}, fmt.Errorf("redisstore: rate script: %w", err)
	}
	return decodeRate(v, nil)
}

// rateScript: KEYS[1] the key; ARGV interval µs, window µs ((Burst+1) ×
// interval), n, want, owed µs, extra, lease µs. It adds n requests admitted without
// asking (n < 0: cancelled ones) and owed µs (what the Open fallback's
// admissions still owe; absent means 0), unconditionally, then counts want
// more (Reserve: 1; ReserveMany: the weight; the flush: 0) if they all
// conform, and then, if they did, up to extra more (absent means 0) as
// long as the TAT stays within lease µs of now (at most the window): the
// tokens of a lease, whose slots are the last ones before the new TAT. The TAT is Redis's TIME in µs; the key expires
// when the TAT is reached. It returns {admitted (0 or 1), TAT - now in µs,
// tokens taken for the lease}.
var rateScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local iv, window, n, want = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
tat = tat + n * iv + (tonumber(ARGV[5]) or 0)
if tat < now then tat = now end
local ok, got = 0, 0
if want > 0 and tat + want * iv - now <= window then
  tat = tat + want * iv
  ok = 1
  local extra = tonumber(ARGV[6]) or 0
  if extra > 0 then
    got = math.floor((now + math.min(window, tonumber(ARGV[7]) or window) - tat) / iv)
    if got > extra then got = extra end
    if got < 0 then got = 0 end
    tat = tat + got * iv
  end
end
if tat > now then
  redis.call('SET', KEYS[1], string.format('%d', tat), 'PX', math.ceil((tat - now) / 1000) + 1)
else
  redis.call('DEL', KEYS[1])
end
return {ok, tat - now, got}
`)

type rateReply struct {
	ok    bool
	ahead int64 // µs
	got   int   // tokens taken for the lease
}

func decodeRate(v any, err error) (rateReply, error) {
	if err != nil {
		return rateReply{}, err
	}
	x, err := ints(v, 3)
	if err != nil {
		return rateReply{}, err
	}
	return rateReply{ok: x[0] == 1, ahead: x[1], got: int(x[2])}, nil
}
