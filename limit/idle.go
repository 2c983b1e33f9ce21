package limit

import "sync"

// idleWatch closes its channel once the limiter holds nothing; see
// [Limiter.Idle].
type idleWatch struct {
	mu     sync.Mutex
	ch     chan struct{} // nil until Idle is first called
	closed bool
}

// Idle returns a channel that is closed once the limiter holds no permit
// and has no waiter, which may be at once. It serves whoever retires a
// limiter and wants to close it when the work it admitted is over, without
// polling: after the first call, each key the limiter forgets makes it look
// at every shard, on a goroutine of its own. Call it only on a limiter that
// receives little new work; a limiter that becomes busy again after being
// idle keeps its channel closed.
func (l *Limiter[K]) Idle() <-chan struct{} {
	w := &l.idle
	w.mu.Lock()
	if w.ch == nil {
		w.ch = make(chan struct{})
		l.watchingIdle.Store(true)
	}
	ch := w.ch
	w.mu.Unlock()
	l.checkIdle()
	return ch
}

// checkIdle closes the Idle channel if no shard has a busy key.
func (l *Limiter[K]) checkIdle() {
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		busy := sh.keys.n > 0
		sh.mu.Unlock()
		if busy {
			return
		}
	}
	w := &l.idle
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.ch)
	}
	w.mu.Unlock()
}
