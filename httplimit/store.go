package httplimit

import (
	"context"

	"github.com/seed-a07d1050/portcullis/limit"
)

// prefixed is a Store that keeps its keys in another under a prefix, so
// that tunnel counts do not mix with the exchange counts of the same key.
// It does not pass on release notifications (limit.ReleaseNotifier): the
// exchange limiter registers the Store's one callback, and tunnel waiters
// poll instead (limit.StorePollInterval).
type prefixed struct {
	s      limit.Store[string]
	prefix string
}

var _ limit.Store[string] = prefixed{}

func (p prefixed) Acquire(ctx context.Context, key string, limit, local int) (bool, error) {
	return p.s.Acquire(ctx, p.prefix+key, limit, local)
}

func (p prefixed) TryAcquire(key string, limit, local int) (bool, error) {
	return p.s.TryAcquire(p.prefix+key, limit, local)
}

func (p prefixed) Release(key string) { p.s.Release(p.prefix + key) }
