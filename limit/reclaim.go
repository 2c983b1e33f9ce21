package limit

import (
	"log/slog"
	"time"
)

// reclaimLoop runs Reclaim every reclaim period until the limiter closes.
func (l *Limiter[K]) reclaimLoop() {
	defer l.wg.Done()
	for {
		t := l.s.Clock.NewTimer(l.s.reclaimEvery)
		select {
		case <-l.done:
			t.Stop()
			return
		case <-t.C():
			l.Reclaim()
		}
	}
}

// reclaimed is a permit taken back, reported after the shard lock is
// released.
type reclaimed[K comparable] struct {
	key    K
	held   time.Duration
	stored bool
	hook   func() // the permit's OnReclaim; nil without
}

// Reclaim takes back every permit held longer than Config.ReclaimAfter as
// of the Clock's current time, except exempt ones, and returns how many it
// took. Each is counted, reported to the Observer, logged at WARN with its
// key, and its [Permit.OnReclaim] function, if any, is called; the holder's
// later Release does nothing. The limiter calls
// Reclaim by itself every reclaim period; calling it directly is useful
// with a fake Clock. With a negative ReclaimAfter it does nothing.
func (l *Limiter[K]) Reclaim() int {
	now := l.s.Clock.Now().UnixNano()
	l.now.Store(now)
	if l.s.reclaimNanos <= 0 {
		return 0
	}
	cutoff := now - l.s.reclaimNanos
	var taken []reclaimed[K]
	for i := range l.shards {
		taken = l.shards[i].reclaimOlder(cutoff, now, taken)
	}
	for _, r := range taken {
		if r.stored {
			l.s.Store.Release(r.key)
		}
		l.s.Logger.Warn("reclaimed a permit held too long",
			slog.String("limiter", l.s.Name),
			slog.Any("key", r.key),
			slog.Duration("held", r.held))
		l.observe(r.key, Reclaimed, r.held)
		if r.hook != nil {
			r.hook()
		}
	}
	return len(taken)
}

// reclaimOlder takes back the shard's permits granted at or before cutoff.
// The age list is in grant order, so it stops at the first younger one.
func (sh *shard[K]) reclaimOlder(cutoff, now int64, taken []reclaimed[K]) []reclaimed[K] {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for p := sh.oldest; p != nil && p.granted <= cutoff; p = sh.oldest {
		taken = append(taken, reclaimed[K]{
			key:    p.entry.key,
			held:   time.Duration(now - p.granted),
			stored: p.stored,
			hook:   p.onReclaim,
		})
		sh.stats.reclaimed++
		sh.releaseLocked(p)
	}
	return taken
}
