package limit

import "time"

// A Permit is one permit of a key, granted by [Limiter.Acquire] or
// [Limiter.TryAcquire]. It is a small value: copies refer to the same
// permit, and exactly one Release counts, whichever copy calls it and
// however often. The zero Permit holds nothing.
type Permit[K comparable] struct {
	p      *permit[K]
	gen    uint64
	key    K
	shadow bool
	waited time.Duration // in the queue or for the Store; zero when granted at once
}

// Release gives the permit back: the first waiter of its key, if any, gets
// it. Only the first call counts; later calls, and a call after the
// limiter reclaimed the permit, do nothing. Release never blocks.
func (p Permit[K]) Release() {
	if p.p != nil {
		p.p.sh.l.release(p, true)
	}
}

// Exempt shields the permit from reclaim, for holders that legitimately
// hold it for long, such as an established tunnel. It does nothing after
// the permit was released or reclaimed.
func (p Permit[K]) Exempt() {
	if p.p == nil {
		return
	}
	sh := p.p.sh
	sh.mu.Lock()
	if p.p.gen == p.gen {
		sh.unlist(p.p)
	}
	sh.mu.Unlock()
}

// Valid reports whether p was granted (as opposed to the zero Permit
// returned with an error). It stays true after Release.
func (p Permit[K]) Valid() bool { return p.p != nil }

// Key returns the key the permit was granted for.
func (p Permit[K]) Key() K { return p.key }

// Shadowed reports whether the permit was granted only because the limiter
// is in shadow mode: without it, the request would have been refused.
func (p Permit[K]) Shadowed() bool { return p.shadow }

// Waited returns how long the request waited for the permit, in its key's
// queue or for the shared Store to have room, as the [Observer] is told
// (Event.Wait of Granted); zero when the permit was granted at once.
func (p Permit[K]) Waited() time.Duration { return p.waited }

// OnReclaim arranges for f to be called if the limiter reclaims the permit
// (see [Policy.ReclaimAfter]), so that its holder can end the work the
// permit no longer counts: a reclaimed permit is free for others, and work
// that carried on under it would run over the limit. f is called once, on
// the goroutine running [Limiter.Reclaim], after the permit was taken back
// and logged; it must not block. A later call replaces f; nil removes it.
// OnReclaim does nothing after the permit was released, reclaimed or
// exempted from reclaim.
func (p Permit[K]) OnReclaim(f func()) {
	if p.p == nil {
		return
	}
	sh := p.p.sh
	sh.mu.Lock()
	if p.p.gen == p.gen && p.p.listed {
		p.p.onReclaim = f
	}
	sh.mu.Unlock()
}
