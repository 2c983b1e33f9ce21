package limit

import (
	"cmp"
	"slices"
)

// A Snapshot is a limiter's state at one moment: its busiest keys and its
// totals since it was created.
type Snapshot[K comparable] struct {
	// Keys are the busy keys (holding or waiting for a permit), busiest
	// first: by permits in use, then waiters, then refusals.
	Keys   []KeyStats[K]
	Totals Totals
}

// KeyStats is the state of one busy key.
type KeyStats[K comparable] struct {
	Key     K
	InUse   int
	Waiting int
	// Refused counts the key's refusals (including queue-full and, in
	// shadow mode, shadow refusals) since it last became busy.
	Refused uint64
}

// Totals are a limiter's counts. The counters only grow; InUse, Waiting
// and Keys are the state now.
type Totals struct {
	Granted       uint64 `json:"granted"`
	Refused       uint64 `json:"refused"`
	ShadowRefused uint64 `json:"shadow_refused"`
	QueueFull     uint64 `json:"queue_full"`
	QueueTimeouts uint64 `json:"queue_timeouts"`
	Abandoned     uint64 `json:"abandoned"`
	Reclaimed     uint64 `json:"reclaimed"`
	StoreFailed   uint64 `json:"store_failed"`
	InUse         int    `json:"in_use"`
	Waiting       int    `json:"waiting"`
	Keys          int    `json:"keys"`
}

// Snapshot returns the limiter's totals and its busiest keys, at most top
// of them; top zero or negative means all. Shards are read one after the
// other, so under load the figures are consistent per key, not across keys.
func (l *Limiter[K]) Snapshot(top int) Snapshot[K] {
	var s Snapshot[K]
	if top <= 0 {
		s.Totals = l.collect(func(k KeyStats[K]) { s.Keys = append(s.Keys, k) })
	} else {
		// The live page and /debug/limits ask for a few of possibly
		// very many busy keys, every second: keep the top ones in a
		// heap as the shards are walked, rather than list and sort all.
		b := busiest[K]{top: top}
		s.Totals = l.collect(b.offer)
		s.Keys = b.keys
	}
	slices.SortFunc(s.Keys, func(a, b KeyStats[K]) int { return busier(b, a) })
	return s
}

// busier orders a before b (a positive result) when a is busier: more
// permits in use, then more waiters, then more refusals.
func busier[K comparable](a, b KeyStats[K]) int {
	return cmp.Or(
		cmp.Compare(a.InUse, b.InUse),
		cmp.Compare(a.Waiting, b.Waiting),
		cmp.Compare(a.Refused, b.Refused))
}

// busiest keeps the top busiest keys it is offered, as a min-heap whose
// root (keys[0]) is the least busy of them.
type busiest[K comparable] struct {
	top  int
	keys []KeyStats[K]
}

func (b *busiest[K]) offer(k KeyStats[K]) {
	if len(b.keys) < b.top {
		b.keys = append(b.keys, k)
		b.up(len(b.keys) - 1)
		return
	}
	if busier(k, b.keys[0]) > 0 {
		b.keys[0] = k
		b.down(0)
	}
}

func (b *busiest[K]) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if busier(b.keys[i], b.keys[parent]) >= 0 {
			return
		}
		b.keys[i], b.keys[parent] = b.keys[parent], b.keys[i]
		i = parent
	}
}

func (b *busiest[K]) down(i int) {
	n := len(b.keys)
	for {
		least := i
		for _, c := range [2]int{2*i + 1, 2*i + 2} {
			if c < n && busier(b.keys[c], b.keys[least]) < 0 {
				least = c
			}
		}
		if least == i {
			return
		}
		b.keys[i], b.keys[least] = b.keys[least], b.keys[i]
		i = least
	}
}

// Totals returns the limiter's totals without listing keys; it is cheaper
// than Snapshot for metrics scrapes.
func (l *Limiter[K]) Totals() Totals { return l.collect(nil) }

// collect sums the shards' counts and, when each is not nil, hands it
// every busy key, under its shard's lock.
func (l *Limiter[K]) collect(each func(KeyStats[K])) Totals {
	var t Totals
	var c counters
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		c.add(sh.stats)
		sh.keys.each(func(e *entry[K]) {
			t.InUse += int(e.inUse)
			t.Waiting += int(e.waiting)
			if each != nil {
				each(KeyStats[K]{e.key, int(e.inUse), int(e.waiting), e.refused})
			}
		})
		t.Keys += sh.keys.n
		sh.mu.Unlock()
	}
	t.Granted, t.Refused = c.granted, c.refused
	t.ShadowRefused, t.QueueFull = c.shadowRefused, c.queueFull
	t.QueueTimeouts, t.Abandoned = c.queueTimeouts, c.abandoned
	t.Reclaimed, t.StoreFailed = c.reclaimed, c.storeFailed
	return t
}
