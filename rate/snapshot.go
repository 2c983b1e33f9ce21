package rate

import (
	"cmp"
	"slices"
	"time"
)

// A Snapshot is a limiter's state at one moment: its busy keys and its
// totals since it was created.
type Snapshot[K comparable] struct {
	// Keys are the busy keys (whose state is not fresh), the furthest
	// ahead of their rate first.
	Keys   []KeyStats[K]
	Totals Totals
}

// KeyStats is the state of one busy key.
type KeyStats[K comparable] struct {
	Key K
	// Ahead is how far the key's theoretical arrival time is past now:
	// the time until its whole burst is available again.
	Ahead time.Duration
	// Remaining is how many more requests of the key would be admitted
	// now (at once or delayed).
	Remaining int
}

// Totals are a limiter's counts since it was created. The counters only
// grow; Keys and Delaying are gauges of now.
type Totals struct {
	Admitted      uint64 `json:"admitted"`
	Delayed       uint64 `json:"delayed"`
	Refused       uint64 `json:"refused"`
	ShadowDelayed uint64 `json:"shadow_delayed"`
	ShadowRefused uint64 `json:"shadow_refused"`
	Cancelled     uint64 `json:"cancelled"`
	StoreFailed   uint64 `json:"store_failed"`
	Keys          int    `json:"keys"`
	// Delaying is the requests being delayed now: inside [Limiter.Wait],
	// waiting for their turn at the rate. They are counted in Delayed
	// already (a verdict is counted when it is made).
	Delaying int `json:"delaying"`
}

// Snapshot returns the limiter's totals and its busy keys, at most top of
// them, the furthest ahead first; top zero or negative means all. Shards
// are read one after the other, so under load the figures are consistent
// per key, not across keys.
func (l *Limiter[K]) Snapshot(top int) Snapshot[K] {
	var s Snapshot[K]
	s.Totals = l.collect(&s.Keys)
	slices.SortFunc(s.Keys, func(a, b KeyStats[K]) int { return cmp.Compare(b.Ahead, a.Ahead) })
	if top > 0 && len(s.Keys) > top {
		s.Keys = s.Keys[:top:top]
	}
	for i := range s.Keys {
		k := &s.Keys[i]
		if p, _, _ := l.policyOf(k.Key); !p.unlimited() {
			k.Remaining = Decision{Reset: k.Ahead, window: p.window, interval: p.interval}.Remaining()
		}
	}
	return s
}

// Totals returns the limiter's totals without listing keys; it is cheaper
// than Snapshot for metrics scrapes.
func (l *Limiter[K]) Totals() Totals { return l.collect(nil) }

func (l *Limiter[K]) collect(keys *[]KeyStats[K]) Totals {
	var t Totals
	var c counters
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		now := l.now()
		c.add(&sh.stats)
		for j, tag := range sh.t.tags {
			if e := &sh.t.entries[j]; tag != 0 && e.tat > now {
				t.Keys++
				if keys != nil {
					*keys = append(*keys, KeyStats[K]{Key: e.key, Ahead: time.Duration(e.tat - now)})
				}
			}
		}
		sh.mu.Unlock()
	}
	t.Admitted, t.Delayed, t.Refused = c[Admitted], c[Delayed], c[Refused]
	t.ShadowDelayed, t.ShadowRefused = c[ShadowDelayed], c[ShadowRefused]
	t.Cancelled, t.StoreFailed = c[Cancelled], c[StoreFailed]
	t.Delaying = int(l.delaying.Load())
	return t
}
