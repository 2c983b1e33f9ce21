package daemon

import (
	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/limit/redisstore"
)

// prefetch returns the hook by which f's connection-cap Store, when it
// asks Redis about a new connection of a client, asks in the same round
// trip for a spare permit of each cluster-wide limit the connection's
// first request will take with the same client key (the table's
// FirstRequestLimits for keyer, the listener's client keyer): that
// request then takes them without a round trip of its own. The cap's
// decision does not depend on them; one the request does not take goes
// back to Redis within about 2 × release_hold (see docs/cluster.md,
// "One round trip for a new connection's cap and its first request").
// The Store also counts the listener's prefix levels, whose keys are not
// client keys: those get no prefetch.
func (f *front) prefetch(keyer clientkey.Keyer) func(key string) []redisstore.Prefetch {
	return func(key string) []redisstore.Prefetch {
		p := f.served.Load()
		if p == nil {
			return nil
		}
		lims := p.Load().FirstRequestLimits(keyer)
		if len(lims) == 0 || !isClientKey(key, keyer) {
			return nil
		}
		out := make([]redisstore.Prefetch, 0, len(lims))
		for _, l := range lims {
			st, ok := l.Store.(*clusterStore[string])
			if n := l.Permits(key); ok && n > 0 {
				out = append(out, st.Spare(key, n))
			}
		}
		return out
	}
}

// isClientKey reports whether key names a client key of keyer, rather
// than a wider prefix level's.
func isClientKey(key string, keyer clientkey.Keyer) bool {
	k, err := clientkey.ParseKey(key)
	return err == nil && keyer.FromAddr(k.Prefix().Addr()) == k
}
