package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Prefetch is one permit of a key of some Store, asked for as a spare in
// the pipeline of another Store's acquire script (see Config.Prefetch):
// a new connection's cluster-wide cap, say, with the client limit its
// first request will take, in one round trip instead of two in a row.
// Make one with [Store.Spare] for each acquire: a Prefetch is sent at
// most once. The zero Prefetch asks for nothing.
type Prefetch struct{ p *sparePart }

// A sparePart is a Prefetch at work: one acquire script whose permit,
// when Redis grants it, becomes a spare of its Store's entry for the key
// (counted for this node in Redis, held by nobody) instead of a permit
// someone holds.
type sparePart struct {
	begin func() bool // reports whether the prefetch is to be sent
	queue func(ctx context.Context, pipe redis.Pipeliner) *redis.Cmd
	end   func(c *redis.Cmd, err error, keep bool)
	cli   redis.UniversalClient
}

// Spare returns the Prefetch of one permit of key under limit, for
// another Store's Config.Prefetch. When the acquire it rides along with
// runs, its script asks Redis for one more permit of key on this node; a
// grant is not held by anyone but stays counted for this node in Redis as
// an unsent release would (a spare), so that this Store's next Acquire of
// key takes it back without a round trip (counted in Stats.Reused), as
// long as that comes within ReleaseHold of the grant. A spare nobody
// takes is sent back by the release batch after that: Redis counts it for
// at most about 2 × ReleaseHold plus a round trip (unless the key is busy
// on this node, whose spares SpareShare keeps as before). It is exact as
// every unsent release is: Redis counts it. A refused prefetch holds
// nothing; one that failed (its script may have run) has the heartbeat
// rewrite the key's count, within Lease/3. A prefetch is not sent at all
// when the key has a spare already, its count may be wrong (an answer
// lost), a release batch of the key is in flight, the breaker is not
// closed, the Store is closed, or limit is not positive.
func (s *Store[K]) Spare(key K, limit int) Prefetch {
	var c acquireCall[K]
	begun := false
	p := &sparePart{cli: s.s.Client}
	p.begin = func() bool {
		if begun { // a Prefetch asks once
			return false
		}
		var ok bool
		c, ok = s.beginSpare(key, limit)
		begun = true
		return ok
	}
	p.queue = func(ctx context.Context, pipe redis.Pipeliner) *redis.Cmd {
		lease := s.s.Lease.Milliseconds()
		return acquireScript.EvalSha(ctx, pipe, []string{c.e.name},
			s.s.NodeID, c.limit, lease, 2*lease, c.epoch, 0, s.s.channel, c.e.ks)
	}
	p.end = func(cmd *redis.Cmd, err error, keep bool) { s.endSpare(c, cmd, err, keep) }
	return Prefetch{p}
}

// beginSpare counts key's prefetch as in flight and returns its call, or
// reports false when it is not to be sent (see [Store.Spare]).
func (s *Store[K]) beginSpare(key K, limit int) (acquireCall[K], bool) {
	if s.closed.Load() || limit <= 0 || s.br.current() != BreakerClosed {
		return acquireCall[K]{}, false
	}
	ks := s.keyString(key)
	sh := s.shardOf(ks)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := s.entryLocked(sh, key, ks)
	if e.reusable() > 0 || e.dirty || e.held >= limit || e.released != nil {
		// A spare already, one the next Acquire could not take, or a
		// release on its way that Redis may not have run yet (it
		// could refuse the prefetch for that permit).
		s.forgetIfIdle(sh, e, s.s.Clock.Now().UnixNano())
		return acquireCall[K]{}, false
	}
	// The prefetch carries no delta: unsent changes keep their own way
	// to Redis. A heartbeat meanwhile counts it as in flight.
	e.inflight++
	s.st.prefetches.Add(1)
	return acquireCall[K]{key: key, e: e, sh: sh, limit: limit, epoch: e.epoch}, true
}

// endSpare ends a prefetch with its script's reply (or err). A grant
// becomes a spare of the entry, kept from the release batch until
// ReleaseHold from now unless !keep (the acquire it rode along with was
// refused or failed: nobody is coming for it); the epoch corrections are
// those of a granted or refused acquire (see endAcquire).
func (s *Store[K]) endSpare(c acquireCall[K], cmd *redis.Cmd, err error, keep bool) {
	var reply acquireReply
	if err == nil {
		var v any
		if v, err = cmd.Result(); err == nil {
			reply, err = decodeAcquire(v)
		}
	}
	e, sh := c.e, c.sh
	now := s.s.Clock.Now().UnixNano()
	wake := false
	sh.mu.Lock()
	e.inflight--
	switch {
	case err != nil:
		// The script may have run: the heartbeat rewrites the count. The
		// breaker is left to the Store's own calls.
		e.dirty = true
	case reply.granted:
		s.st.prefetchGrants.Add(1)
		e.others, e.seen, e.renewed = reply.others, now, now
		e.pending-- // counted in Redis, held by nobody: a spare
		if keep {
			e.prefetched++
			e.keepUntil = now + int64(s.s.ReleaseHold)
		}
		switch {
		case e.epoch <= c.epoch:
		case reply.stale && reply.ae == e.epoch:
			s.fixLocked(e, 1)
		}
		wake = s.queueLocked(e)
	default:
		e.others, e.seen = reply.others, now
		if e.epoch > c.epoch {
			wake = s.overCountedLocked(e, 1)
		}
	}
	s.forgetIfIdle(sh, e, now)
	sh.mu.Unlock()
	if wake {
		s.kickSync()
	}
}

// prefetchParts returns the prefetches Config.Prefetch gives for the key
// named ks that are to be sent on this Store's client, each begun.
func (s *Store[K]) prefetchParts(ks string) []JointPart {
	if s.s.Prefetch == nil {
		return nil
	}
	var out []JointPart
	for _, pf := range s.s.Prefetch(ks) {
		if pf.p == nil || pf.p.cli != s.s.Client || !pf.p.begin() {
			continue
		}
		out = append(out, &spareJoint{p: pf.p})
	}
	return out
}

// acquireWith runs the acquire script of c and the prefetches in one
// pipeline and returns the acquire's answer, which does not depend on
// theirs. A refused or failed acquire keeps no prefetched spare past the
// next release batch: nobody is coming for it.
func (s *Store[K]) acquireWith(ctx context.Context, c acquireCall[K], pre []JointPart) (bool, error) {
	own := &jointPart[K]{s: s, key: c.key, limit: c.limit, local: c.local, call: c}
	for _, p := range pre {
		p.(*spareJoint).first = own
	}
	runJoint(ctx, s.s.Client, append([]JointPart{own}, pre...))
	return own.Result()
}

// spareJoint is a prefetch as a part of runJoint's pipeline.
type spareJoint struct {
	p     *sparePart
	c     *redis.Cmd
	first JointPart // the acquire it rides along with, ended before it
}

func (j *spareJoint) Result() (bool, error)         { return false, nil }
func (j *spareJoint) begin() bool                   { return false }
func (j *spareJoint) client() redis.UniversalClient { return j.p.cli }
func (j *spareJoint) timeout() time.Duration        { return 0 } // never first: the acquire's Store bounds the pipeline
func (j *spareJoint) queue(ctx context.Context, pipe redis.Pipeliner) {
	j.c = j.p.queue(ctx, pipe)
}
func (j *spareJoint) cmd() *redis.Cmd { return j.c }
func (j *spareJoint) end(_ context.Context, err error) {
	if err != nil {
		err = fmt.Errorf("redisstore: prefetch: %w", err)
	}
	ok, ferr := j.first.Result()
	j.p.end(j.c, err, ok && ferr == nil)
}

// record: a prefetch is not a round trip of its own Store; Stats counts
// it in Prefetches.
func (j *spareJoint) record(time.Duration, error) {}
func (j *spareJoint) undo()                       {}
