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
	s.Totals = l.collect(&s.Keys)
	slices.SortFunc(s.Keys, func(a, b KeyStats[K]) int {
		return cmp.Or(
			cmp.Compare(b.InUse, a.InUse),
			cmp.Compare(b.Waiting, a.Waiting),
			cmp.Compare(b.Refused, a.Refused))
	})
	if top > 0 && len(s.Keys) > top {
		s.Keys = s.Keys[:top:top]
	}
	return s
}

// Totals returns the limiter's totals without listing keys; it is cheaper
// than Snapshot for metrics scrapes.
func (l *Limiter[K]) Totals() Totals { return l.collect(nil) }

// collect sums the shards' counts and, when keys is not nil, lists the
// busy keys into it.
func (l *Limiter[K]) collect(keys *[]KeyStats[K]) Totals {
	var t Totals
	var c counters
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		c.add(sh.stats)
		sh.keys.each(func(e *entry[K]) {
			t.InUse += int(e.inUse)
			t.Waiting += int(e.waiting)
			if keys != nil {
				*keys = append(*keys, KeyStats[K]{e.key, int(e.inUse), int(e.waiting), e.refused})
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
