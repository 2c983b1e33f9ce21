package limit

import "sync"

// A shard holds the keys whose hash falls in it, under one mutex, so that
// requests for different keys rarely contend. Everything in a shard,
// including its free lists, is guarded by mu.
type shard[K comparable] struct {
	mu   sync.Mutex
	l    *Limiter[K]
	keys table[K]

	// oldest and newest bound the list of held, non-exempt permits in the
	// order they were granted, so reclaim looks only at the front.
	oldest, newest *permit[K]

	// Recycled entries and permits, so that steady-state traffic allocates
	// nothing. Bounded, so memory follows what is in use.
	freeEntries  *entry[K]
	nFreeEntries int
	freePermits  *permit[K]
	nFreePermits int

	stats counters

	_ [64]byte // keep neighbouring shards' locks off this cache line
}

const (
	maxFreeEntries = 32
	maxFreePermits = 64
)

// counters are a shard's share of the limiter's totals.
type counters struct {
	granted, refused, shadowRefused, queueFull uint64
	queueTimeouts, abandoned, reclaimed        uint64
	storeFailed                                uint64
}

func (c *counters) add(o counters) {
	c.granted += o.granted
	c.refused += o.refused
	c.shadowRefused += o.shadowRefused
	c.queueFull += o.queueFull
	c.queueTimeouts += o.queueTimeouts
	c.abandoned += o.abandoned
	c.reclaimed += o.reclaimed
	c.storeFailed += o.storeFailed
}

// An entry is the state of one busy key: it exists while the key has a
// permit in use or a waiter, and not a moment longer.
type entry[K comparable] struct {
	key     K
	hash    uint64
	limit   int32
	inUse   int32
	waiting int32 // queued waiters plus those waiting on the Store
	refused uint64

	head, tail *waiter[K] // FIFO queue

	// changed is closed when a permit of the key is released, to wake
	// requests waiting on the Store. Nil until one waits.
	changed chan struct{}

	nextFree *entry[K]
}

// A permit is the limiter's record of one granted permit. Permits are
// recycled; gen tells a live grant from a stale handle.
type permit[K comparable] struct {
	sh         *shard[K] // fixed for the permit's life
	gen        uint64
	entry      *entry[K]
	prev, next *permit[K] // in the shard's age list, while listed
	granted    int64      // coarse clock, Unix nanoseconds
	listed     bool
	stored     bool   // the Store counted it
	onReclaim  func() // set by Permit.OnReclaim; nil otherwise
}

// lookup returns key's entry, creating it with the given limit if needed;
// h is the key's hash.
func (sh *shard[K]) lookup(h uint64, key K, limit int32) *entry[K] {
	if e := sh.keys.get(h, key); e != nil {
		return e
	}
	e := sh.freeEntries
	if e != nil {
		sh.freeEntries = e.nextFree
		sh.nFreeEntries--
		e.nextFree = nil
	} else {
		e = new(entry[K])
	}
	e.key, e.hash, e.limit = key, h, limit
	sh.keys.put(h, e)
	return e
}

// forgetIfIdle drops e from the table when nothing holds or waits on it.
func (sh *shard[K]) forgetIfIdle(e *entry[K]) {
	if e.inUse != 0 || e.waiting != 0 {
		return
	}
	sh.keys.del(e.hash, e)
	if sh.keys.n == 0 && sh.l.watchingIdle.Load() {
		// This shard may have held the last busy key; the others must be
		// looked at without this shard's lock held.
		go sh.l.checkIdle()
	}
	*e = entry[K]{}
	if sh.nFreeEntries < maxFreeEntries {
		e.nextFree = sh.freeEntries
		sh.freeEntries = e
		sh.nFreeEntries++
	}
}

// give takes back permit p (whose gen the caller checked) and recycles it.
// It does not touch e's waiters or the table; see settle.
func (sh *shard[K]) give(p *permit[K]) {
	p.gen++
	p.onReclaim = nil
	sh.unlist(p)
	p.entry.inUse--
	p.entry = nil
	if sh.nFreePermits < maxFreePermits {
		p.next = sh.freePermits
		sh.freePermits = p
		sh.nFreePermits++
	}
}

func (sh *shard[K]) list(p *permit[K]) {
	p.listed = true
	p.prev = sh.newest
	if sh.newest != nil {
		sh.newest.next = p
	} else {
		sh.oldest = p
	}
	sh.newest = p
}

func (sh *shard[K]) unlist(p *permit[K]) {
	if !p.listed {
		return
	}
	if p.prev != nil {
		p.prev.next = p.next
	} else {
		sh.oldest = p.next
	}
	if p.next != nil {
		p.next.prev = p.prev
	} else {
		sh.newest = p.prev
	}
	p.prev, p.next, p.listed = nil, nil, false
}
