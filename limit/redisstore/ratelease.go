package redisstore

import (
	"context"
	"time"
)

// A rateLease is the tokens of one key a node took from Redis ahead of its
// requests (RateConfig.LeaseTokens), and what tells whether the key is busy
// on the node.
//
// Why the tokens expire when their slot starts. Redis's TAT schedules every
// admitted request into a slot of one interval; a request admitted at time
// u into the slot [s, s+iv) keeps the cluster's rate exact when s ≥ u (its
// slot has not begun: the bucket did not refill past it meanwhile) and
// s+iv ≤ u+window (GCRA's own check). A lease's tokens are the last slots
// before the TAT the script returned, each checked by that script against
// the window at the time they were taken, so the second condition holds at
// any later time; the first holds while the slot has not started. So a
// token used before its slot starts is exact, and one kept past it would
// be a refill the bucket never had (a node that took tokens and used them
// a burst later could admit them on top of a full burst). Keeping to slot
// starts makes the lease free of overshoot: the cluster admits at most
// what one exact limiter would. Its cost is elsewhere: tokens held by one
// node are not available to the others until they are used or expire (at
// most the batch, for at most batch-1 intervals), so other nodes may refuse
// earlier, never admit more.
//
// Unused tokens are not given back: they expire within batch-1 intervals
// on their own, and giving them back would cost a round trip just when the
// key goes quiet, and would only be exact while no other node took a slot
// after them (Redis's TAT cannot give back a slot in the middle).
type rateLease struct {
	end  int64 // node time (ns) at or before which the held slots end in Redis
	n    int   // tokens held: the last n slots before end
	iv   int64 // a slot's length in ns (the Redis interval, rounded up to µs)
	last int64 // node time of the key's previous request here
	seen bool  // last is set
	busy bool  // the key's previous request here came within a batch of intervals

	// taking, while a call that takes tokens for the lease is in flight,
	// is closed when it ends: requests of the key that find the lease
	// empty meanwhile wait for it rather than each make a call of its own
	// (a busy key's concurrent requests would otherwise all ask at once).
	taking chan struct{}
}

// note records a request of the key at now, and whether it came within a
// batch of intervals of the previous one: the key is then busy here.
func (l *rateLease) note(p *ratePolicy, now int64) {
	l.busy = l.seen && now-l.last <= int64(p.batch)*p.iv
	l.last, l.seen = now, true
}

// use admits n requests from the held tokens whose slot has not started
// at now, the earliest first, and returns the key's ahead after them (the
// end of the last slot used, less now), as the script would have answered.
// It reports false, using none, when fewer than n such tokens are held;
// tokens whose slot started are dropped.
func (l *rateLease) use(p *ratePolicy, n int, now int64) (time.Duration, bool) {
	if l.n == 0 {
		return 0, false
	}
	if l.iv != p.ivUS*1000 { // the key's limit changed: its slots do not fit
		l.n = 0
		return 0, false
	}
	if valid := (l.end - now) / l.iv; valid < int64(l.n) {
		l.n = int(max(valid, 0))
	}
	if l.n < n {
		return 0, false
	}
	first := l.end - int64(l.n)*l.iv
	l.n -= n
	return time.Duration(first + int64(n)*l.iv - now), true
}

// take holds the reply's leased tokens: the last reply.got slots before the
// TAT Redis returned. sent is the node time before the call was sent, which
// is no later than Redis's clock when it ran, so the slots' ends computed
// from it are never later than they are in Redis.
func (l *rateLease) take(p *ratePolicy, reply rateReply, sent int64) {
	l.n = reply.got
	l.end = sent + reply.ahead*1000
	l.iv = p.ivUS * 1000
}

// fromLease admits one request of key from the node's lease, if it holds
// a token whose slot has not started, and records the request for the
// lease's busy test either way. When the lease is empty but a call that
// fills it is in flight and the caller may call Redis (mayWait), it waits
// for that call (or ctx) and tries once more. A caller that may call Redis
// and finds the lease empty, the key busy and no such call in flight
// claims the lease (claimed): its call is the one that takes tokens (one
// at a time: the lease holds one run of slots), and it ends the claim
// with endTaking, or unclaim if it makes no call.
func (s *RateStore[K]) fromLease(ctx context.Context, key K, p *ratePolicy, mayWait bool) (ahead time.Duration, ok, claimed bool) {
	if p.batch == 0 {
		return 0, false, false
	}
	now := s.now()
	sh, e := s.entry(key)
	e.lease.note(p, now)
	ahead, ok = e.lease.use(p, 1, now)
	taking := e.lease.taking
	if !ok && taking != nil && mayWait {
		sh.mu.Unlock()
		select {
		case <-taking:
		case <-ctx.Done():
			return 0, false, false // the caller's own call then reports ctx's end
		}
		now = s.now()
		sh.mu.Lock()
		ahead, ok = e.lease.use(p, 1, now)
	}
	if !ok && mayWait && e.lease.busy && e.lease.taking == nil {
		e.lease.beginTaking()
		claimed = true
	}
	sh.mu.Unlock()
	if ok {
		s.leased.Add(1)
	}
	return ahead, ok, claimed
}

// unclaim ends a claim of key's lease whose request made no call.
func (s *RateStore[K]) unclaim(key K) {
	sh, e := s.entry(key)
	if e.lease.taking != nil {
		e.lease.endTaking()
	}
	sh.mu.Unlock()
}

// beginTaking marks a call that takes tokens for the lease as in flight.
// It is called with e's shard lock held.
func (l *rateLease) beginTaking() { l.taking = make(chan struct{}) }

// endTaking wakes the requests that waited for that call. It is called
// with e's shard lock held.
func (l *rateLease) endTaking() {
	close(l.taking)
	l.taking = nil
}
