package redisstore

import (
	"hash/maphash"
	"sync"
)

// numShards spreads keys over locks so that requests for different keys
// seldom contend.
const numShards = 64

// An entry is what this node knows about one key. It lives while the node
// holds permits of the key, has a Redis call for it in flight or pending,
// must rewrite its count in Redis, or was recently refused (so that a
// release elsewhere can wake its waiters); see forgetIfIdle.
type entry[K comparable] struct {
	key  K
	ks   string // the key's string form: pub/sub message, map key
	name string // the Redis hash

	held     int   // permits this node holds through the Store
	inflight int   // permits that acquire scripts under way may take
	pending  int   // change of this node's count not yet sent to Redis
	fixes    int   // of pending's decrements, corrections of a double count (never reused)
	queued   bool  // in the store's sync queue
	dirty    bool  // Redis may be wrong about this node's count: rewrite it
	epoch    int64 // of the last heartbeat snapshot, which did not count later acquires
	written  int64 // epoch of the last snapshot Redis applied (0 none)
	phantom  int   // refused acquires the snapshot epoch counted, to take off once it is applied
	renewed  int64 // when Redis last renewed this node's lease on the key (Unix ns, node clock); 0 never

	others  int   // other nodes' live permits, as of seen
	seen    int64 // when Redis last told us others (Unix ns); 0 never
	watched int64 // when Redis last refused us (Unix ns); 0 never

	releasing int           // decrements a release batch in flight sent, which Redis may not have applied yet
	released  chan struct{} // closed when releasing is back to 0; nil while it is 0

	taking  chan struct{} // closed when the in-flight acquire that waiters wait on ends; nil none
	waiting int           // Acquires waiting on taking
	alone   bool          // the last call waited on failed or was refused: do not wait

	limit    int   // the limit of the key's last Acquire
	acquired int64 // when the key was last acquired here (Unix ns, node clock)

	prefetched int   // of the spares (reusable), those a prefetch took for an Acquire to come
	keepUntil  int64 // until when the release batch keeps them (Unix ns, node clock)
}

type shard[K comparable] struct {
	mu sync.Mutex
	m  map[string]*entry[K]
}

// shardOf returns the shard holding ks.
func (s *Store[K]) shardOf(ks string) *shard[K] {
	return &s.shards[maphash.String(s.seed, ks)%numShards]
}

// entryLocked returns the entry of key, creating it. It is called with
// sh.mu held.
func (s *Store[K]) entryLocked(sh *shard[K], key K, ks string) *entry[K] {
	e := sh.m[ks]
	if e == nil {
		e = &entry[K]{key: key, ks: ks, name: s.s.Prefix + "{" + ks + "}", epoch: s.epoch.Load()}
		sh.m[ks] = e
	}
	return e
}

// fresh reports whether e's count of other nodes is recent enough to
// decide on: younger than one lease, which is also how long a dead node's
// permits can stay counted.
func (s *Store[K]) fresh(e *entry[K], now int64) bool {
	return e.seen != 0 && now-e.seen < int64(s.s.Lease)
}

// reusable is how many permits e released that Redis still counts for
// this node and Acquire may take back: the unsent releases, less the
// corrections of double counts (fixes) among the unsent decrements.
func (e *entry[K]) reusable() int { return max(-(e.pending + e.fixes), 0) }

// forgetIfIdle drops e when nothing about it remains to do. It is called
// with sh.mu held.
func (s *Store[K]) forgetIfIdle(sh *shard[K], e *entry[K], now int64) {
	if e.held != 0 || e.inflight != 0 || e.pending != 0 || e.queued || e.dirty || e.waiting != 0 || e.releasing != 0 {
		return
	}
	if e.watched != 0 && now-e.watched < int64(s.watchFor()) {
		return
	}
	delete(sh.m, e.ks)
}

// grantLocked counts a permit granted without Redis having counted it (from
// the cached count or the node-local cap), and queues the increment. It is
// called with sh.mu held and reports whether the sync loop must be woken.
func (s *Store[K]) grantLocked(e *entry[K]) bool {
	e.held++
	e.pending++
	return s.queueLocked(e)
}

// queueLocked puts e in the sync queue unless it is there. It is called
// with e's shard lock held and reports whether e was added.
func (s *Store[K]) queueLocked(e *entry[K]) bool {
	if e.queued {
		return false
	}
	e.queued = true
	s.qmu.Lock()
	s.queue = append(s.queue, e)
	s.qmu.Unlock()
	return true
}

// kickSync wakes the sync loop without blocking.
func (s *Store[K]) kickSync() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}
