package rate

import (
	"math"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/ratetext"
)

// AllowN decides n requests of key together, now, as one request of
// weight n: they conform when the key's state can take n more intervals
// within its burst window, and then all n are counted; otherwise none is
// and the verdict is Refused (ShadowRefused in shadow mode). A Delayed
// verdict asks the caller to wait Decision.Delay, as for [Limiter.Allow].
// AllowN(key, 1) decides as Allow does. n ≤ 0 decides nothing and admits.
// A weight above the key's burst capacity (Burst+1) is always refused.
// It never blocks and never asks the Store: it serves callers that keep
// the shared state themselves (or keep none); with a Store, use Allow or
// Reserve. It allocates nothing once the key has a slot.
func (l *Limiter[K]) AllowN(key K, n int) Decision {
	p, _, _ := l.policyOf(key)
	return l.allowN(key, &p, n)
}

// AllowLimitN is AllowN under lim instead of the key's own limit (the
// Config's, or its LimitFor override): for a caller that keeps the limits
// of many rules itself and counts all their keys in one Limiter. An
// invalid lim refuses, with a zero RetryAfter.
func (l *Limiter[K]) AllowLimitN(key K, lim Limit, n int) Decision {
	if lim.Validate() != nil {
		return Decision{Verdict: Refused}
	}
	p := policyOf(lim)
	return l.allowN(key, &p, n)
}

func (l *Limiter[K]) allowN(key K, p *policy, n int) Decision {
	if n <= 0 || p.interval == 0 {
		d := Decision{Verdict: Admitted}
		if p.interval != 0 {
			d.window, d.interval = p.window, p.interval
		}
		return d
	}
	h := l.hash(key)
	sh := &l.shards[h&l.mask]
	tag := tagOf(h)
	sh.mu.Lock()
	now := l.now()
	i, tat := sh.t.tat(tag, key)
	d, next := p.decideN(tat, now, n, l.s.Shadow)
	sh.t.advance(i, tag, key, tat, next, now)
	sh.stats.count(d.Verdict)
	sh.mu.Unlock()
	if l.s.Observer != nil {
		l.s.Observer.Observe(Event[K]{Kind: d.Verdict, Key: key, Delay: d.Delay})
	}
	return d
}

// GiveBackN moves key's state back by n intervals, not before now, as if
// n requests it admitted had never come; it reports whether the state
// moved. It serves a caller that decided several keys for one request and
// must undo the ones admitted when another refused, and Envoy's negative
// hits, which give budget back. It is counted as a cancellation and
// allocates nothing.
func (l *Limiter[K]) GiveBackN(key K, n int) bool {
	p, _, _ := l.policyOf(key)
	return l.giveBackN(key, &p, n)
}

// GiveBackLimitN is GiveBackN for requests decided by AllowLimitN under
// lim. An invalid lim gives nothing back.
func (l *Limiter[K]) GiveBackLimitN(key K, lim Limit, n int) bool {
	if lim.Validate() != nil {
		return false
	}
	p := policyOf(lim)
	return l.giveBackN(key, &p, n)
}

func (l *Limiter[K]) giveBackN(key K, p *policy, n int) bool {
	if n <= 0 || p.interval == 0 {
		return false
	}
	back := p.interval * int64(min(n, ratetext.MaxBurst+1))
	h := l.hash(key)
	sh := &l.shards[h&l.mask]
	sh.mu.Lock()
	i := sh.t.find(tagOf(h), key)
	if i < 0 {
		sh.mu.Unlock()
		return false
	}
	now := l.now()
	e := &sh.t.entries[i]
	if e.tat <= now {
		sh.mu.Unlock()
		return false
	}
	e.tat = max(e.tat-back, now)
	sh.stats.count(Cancelled)
	sh.mu.Unlock()
	if l.s.Observer != nil {
		l.s.Observer.Observe(Event[K]{Kind: Cancelled, Key: key})
	}
	return true
}

// decideN is decide for a weight of n requests.
func (p *policy) decideN(tat, now int64, n int, shadow bool) (Decision, int64) {
	if tat < now {
		tat = now
	}
	cost := int64(math.MaxInt64 / 2)
	if int64(n) <= p.window/p.interval {
		cost = int64(n) * p.interval
	}
	d := Decision{window: p.window, interval: p.interval}
	if tat+cost-now > p.window {
		d.Verdict, d.Reset = Refused, time.Duration(tat-now)
		if cost <= p.window {
			d.RetryAfter = time.Duration(tat + cost - now - p.window)
		} else {
			d.RetryAfter = time.Duration(math.MaxInt64)
		}
		if shadow {
			d.Verdict = ShadowRefused
		}
		return d, tat
	}
	next := tat + cost
	d.Verdict, d.Reset = Admitted, time.Duration(next-now)
	if wait := next - now - p.free; wait > 0 {
		d.Verdict, d.Delay = Delayed, time.Duration(wait)
		if shadow {
			d.Verdict, d.Delay = ShadowDelayed, 0
		}
	}
	return d, next
}

// DecisionFromStore turns a shared store's answer for n requests of one
// key under lim into the Decision a Limiter would have given: admitted
// says whether the store counted them, ahead is how far the key's
// theoretical arrival time stands past now afterwards (as it stands, on a
// refusal). It serves callers that ask a store directly for several keys
// at once (redisstore's RateStore.ReserveMany). An invalid or unlimited
// lim gives an Admitted Decision.
func DecisionFromStore(lim Limit, n int, admitted bool, ahead time.Duration, shadow bool) Decision {
	if lim.Validate() != nil {
		return Decision{Verdict: Admitted}
	}
	p := policyOf(lim)
	if p.interval == 0 {
		return Decision{Verdict: Admitted}
	}
	ahead = max(ahead, 0)
	d := Decision{Reset: ahead, window: p.window, interval: p.interval}
	if !admitted {
		d.Verdict = Refused
		cost := p.interval * int64(max(n, 1))
		if retry := int64(ahead) + cost - p.window; retry > 0 {
			d.RetryAfter = time.Duration(retry)
		}
		if shadow {
			d.Verdict = ShadowRefused
		}
		return d
	}
	d.Verdict = Admitted
	if wait := int64(ahead) - p.free; wait > 0 {
		d.Verdict, d.Delay = Delayed, time.Duration(wait)
		if shadow {
			d.Verdict, d.Delay = ShadowDelayed, 0
		}
	}
	return d
}
