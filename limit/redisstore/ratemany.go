package redisstore

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-a07d1050/portcullis/rate"
)

// A RateRequest is one key's part of [RateStore.ReserveMany]: N requests
// of Key under Limit, decided together. OK and Ahead are the answer,
// filled in by ReserveMany.
type RateRequest[K comparable] struct {
	Key   K
	Limit rate.Limit
	// N is the weight: how many requests to count at once. Zero or
	// negative means one.
	N int

	// OK reports whether all N were counted (none were when false).
	OK bool
	// Ahead is how far the key's theoretical arrival time stands past now
	// after the decision (as it stands, on a refusal): what
	// [rate.DecisionFromStore] turns into a Decision.
	Ahead time.Duration
}

// ReserveMany decides every request of reqs at once, each key on its own
// (all N of a request counted, or none), in one round trip: the keys that
// need Redis are sent as one pipeline of script calls (with a Redis
// Cluster, one pipeline per node that holds some of them, sent in
// parallel). It is exact, as Reserve without RateConfig.LocalShare: a
// request that the key's last known state already refuses is refused
// without asking, and no request is admitted without asking. A weight
// above a key's burst capacity (Burst+1) is refused. An unlimited or
// invalid Limit is admitted without asking.
//
// It fills in each request's OK and Ahead and returns nil, unless Redis
// could not answer under [Closed] (an error wrapping [ErrUnavailable], or
// the breaker's, every request then not OK and nothing counted), ctx
// ended first (ctx.Err()), or the store is closed ([ErrClosed]). Under
// [Open] the keys Redis could not decide are decided on the node's
// share, as Reserve does. A caller that must undo some admissions (a
// request whose other key refused) gives them back with [RateStore.CancelN].
//
// A key's admissions that Reserve's fast path made are sent along and
// count as in flight until Redis answers, so that the fast path keeps its
// bound meanwhile; its fallback admissions are charged as Reserve's are,
// by the node-local state's lead (see docs/cluster.md).
func (s *RateStore[K]) ReserveMany(ctx context.Context, reqs []RateRequest[K]) error {
	if s.closed.Load() {
		return ErrClosed
	}
	calls := make([]manyCall, 0, len(reqs))
	now := s.now()
	probe := s.br.current() != BreakerClosed
	open := s.br.allow(s.s.Clock.Now())
	for i := range reqs {
		r := &reqs[i]
		r.OK, r.Ahead = false, 0
		n := max(r.N, 1)
		p, ok := s.policy(r.Limit)
		if !ok {
			r.OK = true
			continue
		}
		if !open {
			continue // decided below, by the policy for an unreachable Redis
		}
		sh, e := s.entry(r.Key)
		if ahead, ok := e.lease.use(&p, n, now); ok { // tokens Reserve leased: exact, no round trip
			sh.mu.Unlock()
			s.leased.Add(uint64(n))
			r.OK, r.Ahead = true, ahead
			continue
		}
		est := e.estimate(&p, now)
		if int64(n) > p.window/p.iv || est+int64(n)*p.iv-now > p.window {
			sh.mu.Unlock()
			s.st.cached.Add(1)
			r.Ahead = time.Duration(est - now)
			continue
		}
		calls = append(calls, manyCall{req: i, e: e, sh: sh, p: p, n: n, send: e.beginSend(&p, now)})
		sh.mu.Unlock()
	}
	if !open {
		return s.manyFallback(reqs, nil, errBreakerOpen)
	}
	if len(calls) == 0 {
		s.skipProbe(probe)
		return nil
	}
	err := s.runMany(ctx, calls)
	var failed []int
	for i := range calls {
		c := &calls[i]
		r := &reqs[c.req]
		reply, cerr := decodeRate(c.cmd.Val(), c.cmd.Err())
		if err != nil && cerr == nil && c.cmd.Err() == nil && c.cmd.Val() == nil {
			cerr = err
		}
		c.sh.mu.Lock()
		s.endSend(c.e, c.send, c.p.ivUS, reply, cerr, now)
		c.sh.mu.Unlock()
		if cerr != nil {
			failed = append(failed, c.req)
			if err == nil {
				err = cerr
			}
			continue
		}
		r.OK, r.Ahead = reply.ok, time.Duration(reply.ahead*1000)
	}
	if len(failed) == 0 {
		s.br.success()
		return nil
	}
	if ctx.Err() != nil {
		s.br.abandon()
		return ctx.Err()
	}
	s.br.failure(s.s.Clock.Now(), err)
	return s.manyFallback(reqs, failed, err)
}

// manyCall is one script call of a ReserveMany pipeline.
type manyCall struct {
	req  int
	e    *rateEntry
	sh   *rateShard
	p    ratePolicy
	n    int // the weight
	send rateSend
	cmd  *redis.Cmd
}

// runMany sends calls as one pipeline, bounded by Timeout, loading the
// script once if Redis does not know it yet, and records the round trip.
func (s *RateStore[K]) runMany(ctx context.Context, calls []manyCall) error {
	ctx, cancel := context.WithTimeout(ctx, s.s.Timeout)
	defer cancel()
	start := time.Now()
	send := func() error {
		pipe := s.s.Client.Pipeline()
		for i := range calls {
			c := &calls[i]
			c.cmd = rateScript.EvalSha(ctx, pipe, []string{c.e.name}, c.p.ivUS, c.p.windowUS, c.send.n, c.n, c.send.owed)
		}
		_, err := pipe.Exec(ctx)
		return err
	}
	err := send()
	if err != nil && isNoScript(err) {
		if lerr := rateScript.Load(ctx, s.s.Client).Err(); lerr == nil {
			err = send()
		}
	}
	s.st.call(opAcquire, time.Since(start), err)
	if err != nil {
		return fmt.Errorf("redisstore: rate pipeline: %w", err)
	}
	return nil
}

// manyFallback decides, by the OnError policy, the requests Redis could
// not answer: those listed in failed, or every limited one when failed is
// nil (the breaker is open).
func (s *RateStore[K]) manyFallback(reqs []RateRequest[K], failed []int, cause error) error {
	if s.s.OnError == Closed {
		for i := range reqs {
			reqs[i].OK = false
		}
		s.st.unavailable.Add(1)
		if cause == errBreakerOpen {
			return cause
		}
		return fmt.Errorf("%w: %w", ErrUnavailable, cause)
	}
	decide := func(i int) {
		r := &reqs[i]
		p, ok := s.policy(r.Limit)
		if !ok {
			r.OK = true
			return
		}
		r.OK, r.Ahead = s.fallbackN(r.Key, &p, max(r.N, 1))
	}
	if failed == nil {
		for i := range reqs {
			decide(i)
		}
		return nil
	}
	for _, i := range failed {
		decide(i)
	}
	return nil
}

// fallbackN decides a weight of n requests of key under Open without
// Redis: the node applies the key's limit at NodeShare on its own GCRA
// state (fbTat), and queues the key so that the flush charges Redis,
// once it answers, by what that state still owes (takeFallbackCharge),
// not request by request.
func (s *RateStore[K]) fallbackN(key K, p *ratePolicy, n int) (bool, time.Duration) {
	share := s.s.NodeShare
	iv := int64(math.Ceil(float64(p.iv) / share))
	window := int64(math.Ceil(float64(p.window/p.iv)*share)) * iv
	now := s.now()
	sh, e := s.entry(key)
	defer sh.mu.Unlock()
	w := int64(n) * iv
	next := max(e.fbTat, now) + w
	if w > window || next-now > window {
		s.st.fallbackRefusals.Add(1)
		return false, time.Duration(max(e.fbTat, now) - now)
	}
	e.fbTat = next
	e.fbIv = iv
	e.fbOwed = true
	e.interval = p.ivUS
	s.st.fallbacks.Add(1)
	s.enqueue(e)
	return true, time.Duration(next - now)
}

// CancelN gives back n requests of key that this store admitted, as
// Cancel gives back one. Those the Open fallback admitted and has not yet
// charged to Redis are taken back from its node-local state (and so from
// what the flush charges); any other is sent with the next flush, which
// moves the key's TAT in Redis back one interval each (not before Redis's
// now), or, when not sent yet, is simply not sent. It never blocks.
func (s *RateStore[K]) CancelN(key K, lim rate.Limit, n int) {
	p, ok := s.policy(lim)
	if !ok || n <= 0 || s.closed.Load() {
		return
	}
	sh, e := s.entry(key)
	if e.fbOwed && e.fbTat > e.fbPaid && e.fbIv > 0 {
		k := min(int64(n), (e.fbTat-e.fbPaid+e.fbIv-1)/e.fbIv)
		e.fbTat -= k * e.fbIv
		n -= int(k)
	}
	if n > 0 {
		s.addPending(e, &p, -n)
	}
	sh.mu.Unlock()
}
