package limit

import (
	"context"
	"time"
)

// A waiter is one request in a key's FIFO queue.
type waiter[K comparable] struct {
	ready      chan struct{} // receives once the waiter is handed a permit
	handed     bool          // set, with permit and grant, under the shard lock
	permit     Permit[K]
	grant      grant
	prev, next *waiter[K]
}

func (e *entry[K]) enqueue(w *waiter[K]) {
	w.prev = e.tail
	if e.tail != nil {
		e.tail.next = w
	} else {
		e.head = w
	}
	e.tail = w
	e.waiting++
}

func (e *entry[K]) remove(w *waiter[K]) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		e.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		e.tail = w.prev
	}
	w.prev, w.next = nil, nil
	e.waiting--
}

// admitWaiters hands free permits of e to its waiters in arrival order.
// It is called with the shard lock held.
func (sh *shard[K]) admitWaiters(e *entry[K]) {
	for e.head != nil && e.inUse < e.limit {
		if !sh.l.takeGlobal() {
			return
		}
		w := e.head
		e.remove(w)
		p := sh.grantLocked(e, nil)
		w.permit, w.grant = p.handle(false), p.grant()
		w.handed = true
		w.ready <- struct{}{}
	}
}

// wait blocks until w is handed a permit or gives up. The request has
// waited since start (which can be earlier than now when it has already
// waited on the Store).
func (l *Limiter[K]) wait(ctx context.Context, sh *shard[K], e *entry[K], w *waiter[K], start time.Time) (Permit[K], grant, error) {
	key := e.key
	timeout, stop := l.queueTimer(start)
	defer stop()
	var kind EventKind
	var err error
	select {
	case <-w.ready:
		l.observe(key, Granted, l.s.Clock.Now().Sub(start))
		return w.permit, w.grant, nil
	case <-ctx.Done():
		kind, err = Abandoned, ctx.Err()
	case <-timeout:
		kind, err = QueueTimeout, ErrQueueTimeout
	case <-l.done:
		err = ErrClosed
	}
	sh.mu.Lock()
	if w.handed {
		// The permit came while we were leaving. A timeout that lost the
		// race takes it; a cancelled or closed request gives it back.
		if kind == QueueTimeout {
			sh.mu.Unlock()
			l.observe(key, Granted, l.s.Clock.Now().Sub(start))
			return w.permit, w.grant, nil
		}
		sh.stats.granted-- // counted at the handoff, which did not stand
		sh.releaseLocked(w.permit.p)
	} else {
		e.remove(w)
		sh.forgetIfIdle(e)
	}
	sh.stats.countGaveUp(kind)
	sh.mu.Unlock()
	if kind != 0 {
		l.observe(key, kind, l.s.Clock.Now().Sub(start))
	}
	return Permit[K]{}, grant{}, err
}

func (c *counters) countGaveUp(kind EventKind) {
	switch kind {
	case Abandoned:
		c.abandoned++
	case QueueTimeout:
		c.queueTimeouts++
	}
}

// queueTimer returns a channel that fires when a request that started
// waiting at start has waited Config.QueueTimeout, and a func to stop it.
// Without a QueueTimeout the channel is nil and never fires.
func (l *Limiter[K]) queueTimer(start time.Time) (<-chan time.Time, func()) {
	if l.s.QueueTimeout <= 0 {
		return nil, func() {}
	}
	left := l.s.QueueTimeout - l.s.Clock.Now().Sub(start)
	t := l.s.Clock.NewTimer(max(left, 0))
	return t.C(), func() { t.Stop() }
}

// waitForStore waits, after the Store refused, until a permit of key may
// have been released somewhere in the cluster. A nil error means try again.
func (l *Limiter[K]) waitForStore(ctx context.Context, key K, mayWait bool, start *time.Time) error {
	limit := l.s.limitFor(key)
	sh, h := l.shard(key)
	sh.mu.Lock()
	if !mayWait || l.s.QueueSize == 0 {
		sh.stats.refused++
		sh.mu.Unlock()
		l.observe(key, Refused, 0)
		return ErrLimited
	}
	e := sh.lookup(h, key, limit)
	if int(e.waiting) >= l.s.QueueSize {
		e.refused++
		sh.stats.queueFull++
		sh.forgetIfIdle(e)
		sh.mu.Unlock()
		l.observe(key, QueueFull, 0)
		return ErrQueueFull
	}
	e.waiting++
	if e.changed == nil {
		e.changed = make(chan struct{})
	}
	changed := e.changed
	sh.mu.Unlock()

	if start.IsZero() {
		*start = l.s.Clock.Now()
	}
	timeout, stop := l.queueTimer(*start)
	defer stop()
	poll := l.s.Clock.NewTimer(l.pollInterval())
	defer poll.Stop()
	var kind EventKind
	var err error
	select {
	case <-changed:
	case <-poll.C():
	case <-ctx.Done():
		kind, err = Abandoned, ctx.Err()
	case <-timeout:
		kind, err = QueueTimeout, ErrQueueTimeout
	case <-l.done:
		err = ErrClosed
	}
	sh.mu.Lock()
	e.waiting--
	sh.forgetIfIdle(e)
	sh.stats.countGaveUp(kind)
	sh.mu.Unlock()
	if kind != 0 {
		l.observe(key, kind, l.s.Clock.Now().Sub(*start))
	}
	return err
}

// pollInterval is how often a request waiting on the Store asks again. A
// Store that reports releases still gets an occasional poll, in case a
// notification was lost.
func (l *Limiter[K]) pollInterval() time.Duration {
	if _, ok := l.s.Store.(ReleaseNotifier[K]); ok {
		return 20 * StorePollInterval
	}
	return StorePollInterval
}

// wake tells the waiters of key that a permit may have been released
// elsewhere in the cluster.
func (l *Limiter[K]) wake(key K) {
	sh, h := l.shard(key)
	sh.mu.Lock()
	if e := sh.keys.get(h, key); e != nil && e.changed != nil {
		close(e.changed)
		e.changed = nil
	}
	sh.mu.Unlock()
}
