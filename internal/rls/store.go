package rls

import (
	"context"
	"sync"

	"github.com/seed-a07d1050/portcullis/limit"
	"github.com/seed-a07d1050/portcullis/limit/redisstore"
	"github.com/seed-a07d1050/portcullis/rate"
)

// A Store decides the counted descriptors of one request. It is safe for
// concurrent use.
type Store interface {
	// Decide fills in each item's Decision: an item with GiveBack returns
	// N requests to its key and is Admitted; one with Deny is Refused
	// without counting; every other is decided as N requests at once. All or nothing: when one item that is not Shadow
	// is refused, the items admitted are given back, so that a refused
	// request counts against none of its keys. A non-nil error means the
	// store could not decide (the items' Decisions are then meaningless).
	Decide(ctx context.Context, items []Item) error
	// Close releases the store.
	Close() error
}

// LocalStore counts in this process: every rule's keys in one rate.Limiter,
// each decision under the rule's limit. Its Decide allocates nothing once
// a key has a slot.
type LocalStore struct {
	l *rate.Limiter[string]
}

// NewLocalStore returns an empty LocalStore.
func NewLocalStore() *LocalStore { return newLocalStore(nil) }

// newLocalStore is NewLocalStore on clk (nil: the real clock).
func newLocalStore(clk limit.Clock) *LocalStore {
	l, err := rate.New(rate.Config[string]{Rate: rate.Unlimited, Name: "rls", Clock: clk})
	if err != nil {
		panic(err) // a constant, valid Config
	}
	return &LocalStore{l: l}
}

// Decide implements Store.
func (s *LocalStore) Decide(_ context.Context, items []Item) error {
	refused := false
	for i := range items {
		it := &items[i]
		switch {
		case it.GiveBack:
			s.l.GiveBackLimitN(it.Key, it.Limit, it.N)
			it.Decision = s.l.AllowLimitN(it.Key, it.Limit, 0)
			continue
		case it.Deny:
			it.Decision = denied
		default:
			it.Decision = s.l.AllowLimitN(it.Key, it.Limit, it.N)
		}
		if !it.Decision.Allowed() && !it.Shadow {
			refused = true
		}
	}
	if refused {
		for i := range items {
			it := &items[i]
			if !it.GiveBack && !it.Deny && it.Decision.Allowed() {
				s.l.GiveBackLimitN(it.Key, it.Limit, it.N)
			}
		}
	}
	return nil
}

// Close implements Store.
func (s *LocalStore) Close() error { return s.l.Close() }

// RedisStore counts in Redis, shared by every node with the same Redis
// and prefix: the daemon's rate store (limit/redisstore), its GCRA state
// per key. One request's items are decided in one round trip.
type RedisStore struct {
	rs   *redisstore.RateStore[string]
	pool sync.Pool // *[]redisstore.RateRequest[string]
}

// NewRedisStore returns a RedisStore over rs, which it closes on Close.
func NewRedisStore(rs *redisstore.RateStore[string]) *RedisStore {
	s := &RedisStore{rs: rs}
	s.pool.New = func() any { return new([]redisstore.RateRequest[string]) }
	return s
}

// Decide implements Store: the items to count go to Redis as one
// pipeline (RateStore.ReserveMany); the ones given back, and the ones to
// undo when another refused, are sent with the store's next flush.
func (s *RedisStore) Decide(ctx context.Context, items []Item) error {
	bp := s.pool.Get().(*[]redisstore.RateRequest[string])
	defer s.pool.Put(bp)
	reqs := (*bp)[:0]
	for i := range items {
		it := &items[i]
		switch {
		case it.GiveBack:
			s.rs.CancelN(it.Key, it.Limit, it.N)
			it.Decision = rate.DecisionFromStore(it.Limit, 0, true, 0, false)
			continue
		case it.Deny:
			it.Decision = denied
			continue
		}
		reqs = append(reqs, redisstore.RateRequest[string]{Key: it.Key, Limit: it.Limit, N: it.N})
	}
	*bp = reqs
	if len(reqs) > 0 {
		if err := s.rs.ReserveMany(ctx, reqs); err != nil {
			return err
		}
	}
	refused := false
	k := 0
	for i := range items {
		it := &items[i]
		if it.GiveBack {
			continue
		}
		if it.Deny {
			refused = refused || !it.Shadow
			continue
		}
		r := &reqs[k]
		k++
		it.Decision = rate.DecisionFromStore(it.Limit, it.N, r.OK, r.Ahead, false)
		if !r.OK && !it.Shadow {
			refused = true
		}
	}
	if refused {
		for i := range items {
			it := &items[i]
			if !it.GiveBack && !it.Deny && it.Decision.Allowed() {
				s.rs.CancelN(it.Key, it.Limit, it.N)
			}
		}
	}
	return nil
}

// Stats returns the Redis store's figures, for metrics.
func (s *RedisStore) Stats() redisstore.RateStats { return s.rs.Stats() }

// Close implements Store: one last flush, then the RateStore closes.
func (s *RedisStore) Close() error { return s.rs.Close() }

// denied is the Decision of a rule of 0 per unit.
var denied = rate.Decision{Verdict: rate.Refused}
