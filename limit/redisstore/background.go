package redisstore

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// syncBatch is the most calls sent in one pipeline; each pipeline gets its
// own Config.Timeout.
const syncBatch = 256

// flushLinger is how long a release waits before it is sent on its own.
// Delaying a release only makes the cluster count briefly too high, which
// refuses, never over-admits.
const flushLinger = 2 * time.Millisecond

// watchFor is how long a refused key stays known so that a release
// elsewhere can wake its waiters. Waiters also poll (limit.StorePollInterval
// × 20 with a notifying Store), and each refusal renews it.
func (s *Store[K]) watchFor() time.Duration { return max(s.s.Lease, 3*time.Second) }

// heartbeatEvery is the lease renewal period: a third of the lease, so two
// renewals can fail before other nodes stop counting this node's permits.
func (s *Store[K]) heartbeatEvery() time.Duration { return s.s.Lease / 3 }

// syncLoop is the Store's background goroutine: it sends queued changes as
// soon as they come (one pipeline at a time, so changes that arrive while
// one is in flight go together in the next) and renews the leases.
func (s *Store[K]) syncLoop() {
	defer s.wg.Done()
	t := s.s.Clock.NewTimer(s.heartbeatEvery())
	defer func() { t.Stop() }()
	for {
		select {
		case <-s.done:
			return
		case <-s.kick:
			if !s.linger() {
				return
			}
			s.flush()
		case <-s.beat:
			t.Stop()
			s.heartbeat()
			t = s.s.Clock.NewTimer(s.heartbeatEvery())
		case <-t.C():
			s.heartbeat()
			t = s.s.Clock.NewTimer(s.heartbeatEvery())
		}
	}
}

// linger waits flushLinger before a batch is sent, so that releases of a
// busy key can ride along with its next acquire instead and others gather
// in one pipeline. It uses the real clock: a fake one would hold releases
// back until a test advanced it. It reports false when the Store closed.
func (s *Store[K]) linger() bool {
	t := time.NewTimer(s.s.ReleaseHold)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.done:
		return false
	}
}

// flush sends every queued change. While the breaker is not closed it
// leaves them queued: the heartbeat that finds Redis back rewrites the
// absolute counts, which includes them.
func (s *Store[K]) flush() {
	if s.br.current() != BreakerClosed {
		return
	}
	s.qmu.Lock()
	q := s.queue
	s.queue = nil
	s.qmu.Unlock()
	calls := make([]syncCall, 0, len(q))
	entries := make([]*entry[K], 0, len(q))
	now := s.s.Clock.Now().UnixNano()
	spares := false
	for _, e := range q {
		sh := s.shardOf(e.ks)
		sh.mu.Lock()
		d, keep := e.pending, s.spares(e, now)
		e.pending, e.fixes, e.queued = 0, 0, false
		if keep > 0 {
			// Busy: some releases stay counted here, and go in a
			// later batch once the key is quiet.
			e.pending = -keep
			d += keep
			s.queueLocked(e)
			spares = true
		}
		if d != 0 {
			calls = append(calls, syncCall{name: e.name, mode: "d", n: d, epoch: e.epoch, message: e.ks})
			entries = append(entries, e)
			if d < 0 {
				s.releasingLocked(e, -d)
			}
		} else {
			s.forgetIfIdle(sh, e, s.s.Clock.Now().UnixNano())
		}
		sh.mu.Unlock()
	}
	s.send(opSync, calls, entries)
	if spares {
		s.kickSync() // look again after ReleaseHold
	}
}

// releasingLocked adds n (negative: takes -n) to the releases of e a
// batch in flight sent, and closes e.released when none is left, which
// wakes the Acquires that waited for them (see beginAcquire). It is called
// with e's shard lock held.
func (s *Store[K]) releasingLocked(e *entry[K], n int) {
	e.releasing += n
	switch {
	case e.releasing > 0 && e.released == nil:
		e.released = make(chan struct{})
	case e.releasing <= 0 && e.released != nil:
		e.releasing = 0
		close(e.released)
		e.released = nil
	}
}

// spares is how many of e's unsent releases stay unsent in this batch:
// up to floor(limit × SpareShare) while the key was acquired here within
// the last ReleaseHold, and those prefetched until their keepUntil; none
// once it is quiet. (Held releases still
// reach Redis with the key's next acquire, as every unsent release
// does.) It is called with e's shard lock held.
func (s *Store[K]) spares(e *entry[K], now int64) int {
	keep := 0
	if now < e.keepUntil {
		// Prefetched for a request that may still come (see [Store.Spare]).
		keep = e.prefetched
	} else {
		e.prefetched = 0
	}
	if s.s.SpareShare != 0 && now-e.acquired < int64(s.s.ReleaseHold) {
		keep = max(keep, int(float64(e.limit)*s.s.SpareShare))
	}
	return min(e.reusable(), keep)
}

// heartbeat renews this node's leases by writing its absolute count of
// every key it holds or must correct. Writing absolute counts, not deltas,
// is what heals a lost release batch, a script whose answer was lost, and
// a Redis that restarted empty. While the breaker is not closed it first
// probes Redis with a PING.
func (s *Store[K]) heartbeat() {
	if s.br.current() != BreakerClosed && !s.probe() {
		return
	}
	now := s.s.Clock.Now().UnixNano()
	epoch := s.epoch.Add(1)
	var calls []syncCall
	var entries []*entry[K]
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, e := range sh.m {
			if e.held == 0 && e.inflight == 0 && e.pending == 0 && !e.dirty {
				e.epoch = epoch
				s.forgetIfIdle(sh, e, now)
				continue
			}
			// An acquire in flight may or may not have counted its
			// permit yet: count it (too many is safe, too few is not).
			// Its reply tells whether that was one too many (a refusal,
			// or a grant after the write: see scripts.go), and the node
			// takes it off then, so in-flight acquires do not leave the
			// key to be rewritten (which would stop Acquire taking back
			// released permits until the next heartbeat). Acquires that
			// start from now on carry the new epoch and are added by
			// Redis.
			calls = append(calls, syncCall{name: e.name, mode: "a", n: e.held + e.inflight, epoch: epoch, message: e.ks})
			entries = append(entries, e)
			e.pending, e.fixes, e.phantom, e.prefetched = 0, 0, 0, 0
			e.dirty = false
			e.epoch = epoch
		}
		sh.mu.Unlock()
	}
	s.send(opHeartbeat, calls, entries)
	s.flush() // drains entries the absolute write left with nothing to send
}

// probe asks Redis whether it is back. It reports whether it is.
func (s *Store[K]) probe() bool {
	ctx, cancel := context.WithTimeout(s.bg, s.s.Timeout)
	defer cancel()
	start := time.Now()
	err := s.s.Client.Ping(ctx).Err()
	s.st.call(opHeartbeat, time.Since(start), err)
	if err != nil {
		s.br.failure(s.s.Clock.Now(), err)
		return false
	}
	s.br.success()
	return true
}

// send runs calls in pipelines of syncBatch and applies each answer to its
// entry: the fresh count of other nodes, or a mark to rewrite the count
// when the call failed.
func (s *Store[K]) send(o op, calls []syncCall, entries []*entry[K]) {
	for len(calls) > 0 {
		n := min(len(calls), syncBatch)
		ctx, cancel := context.WithTimeout(s.bg, s.s.Timeout)
		start := time.Now()
		err := s.runSync(ctx, calls[:n])
		cancel()
		s.st.call(o, time.Since(start), err)
		if err != nil {
			s.br.failure(s.s.Clock.Now(), err)
		} else {
			s.br.success()
		}
		s.applySync(calls[:n], entries[:n])
		calls, entries = calls[n:], entries[n:]
		if err != nil && s.br.current() == BreakerOpen {
			// Redis is down: do not spend a timeout on each remaining
			// batch. The next heartbeat that finds it back rewrites them.
			for i := range calls {
				calls[i].err = err
			}
			s.applySync(calls, entries)
			return
		}
	}
}

func (s *Store[K]) applySync(calls []syncCall, entries []*entry[K]) {
	now := s.s.Clock.Now().UnixNano()
	for i, c := range calls {
		e := entries[i]
		sh := s.shardOf(e.ks)
		sh.mu.Lock()
		if c.mode == "d" && c.n < 0 {
			s.releasingLocked(e, c.n) // applied, or to be rewritten: either way no longer in flight
		}
		if c.err != nil {
			e.dirty = true
			if c.mode == "a" {
				e.phantom = 0 // the rewrite counts afresh
			}
		} else {
			e.others, e.seen = c.reply.others, now
			if c.reply.mine > 0 {
				e.renewed = now
			}
			if c.mode == "a" && c.epoch == e.epoch {
				s.appliedLocked(e, c.epoch)
			}
		}
		s.forgetIfIdle(sh, e, now)
		sh.mu.Unlock()
	}
}

// appliedLocked records that Redis applied e's snapshot of epoch and takes
// off the permits it counted for acquires since refused (see
// overCountedLocked), in the next flush. It is called with e's shard lock
// held.
func (s *Store[K]) appliedLocked(e *entry[K], epoch int64) {
	e.written = epoch
	if e.phantom > 0 {
		e.pending -= e.phantom
		e.fixes += e.phantom
		e.phantom = 0
		s.queueLocked(e)
	}
}

// subscribe receives release notifications until Close. go-redis
// reconnects and resubscribes by itself after Redis comes back.
func (s *Store[K]) subscribe() {
	defer s.wg.Done()
	s.nmu.Lock()
	select {
	case <-s.done:
		s.nmu.Unlock()
		return
	default:
	}
	ps := s.s.Client.Subscribe(context.Background())
	s.pubsub = ps
	s.nmu.Unlock()
	ch := ps.Channel(redis.WithChannelSize(1024))
	// Subscribe with the channel only now, so that a Redis that is down
	// delays this goroutine, never the caller of NotifyRelease.
	ctx, cancel := context.WithTimeout(s.bg, max(10*s.s.Timeout, time.Second))
	_ = ps.Subscribe(ctx, s.s.channel) // on failure go-redis retries when it reconnects
	cancel()
	for {
		select {
		case <-s.done:
			return
		case m, ok := <-ch:
			if !ok {
				return
			}
			s.released(m.Payload)
		}
	}
}

// released wakes this node's waiters for the key named ks, if it has any.
func (s *Store[K]) released(ks string) {
	sh := s.shardOf(ks)
	sh.mu.Lock()
	e := sh.m[ks]
	if e == nil || e.watched == 0 {
		sh.mu.Unlock()
		return
	}
	key := e.key
	sh.mu.Unlock()
	fs := s.notify.Load()
	if fs == nil {
		return
	}
	s.st.notifications.Add(1)
	for _, f := range *fs {
		f(key)
	}
}
