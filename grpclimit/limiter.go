package grpclimit

import (
	"fmt"

	"google.golang.org/grpc/status"

	"github.com/seed-a07d1050/portcullis/limit"
)

// A Limiter caps how many gRPC calls run at once per key. It does its work
// through its tap handle and interceptors ([ServerOptions]); it counts only
// the calls that pass through them, of the methods in Config.Methods. A
// Limiter is safe for concurrent use.
type Limiter struct {
	s     settings
	calls *limit.Limiter[string]
	// streams counts, per key, the streams the tap handle let in that
	// have not ended, when calls may queue; nil otherwise (the tap handle
	// then takes call permits itself).
	streams *limit.Limiter[string]
	log     refusalLog

	// The refusal statuses, built once: indexed by refusal.
	statuses [numRefusals]*status.Status
}

// New returns a Limiter configured by cfg, or an error naming the first
// invalid field; on error nothing is started. The Limiter runs background
// reclaim work until [Limiter.Close].
func New(cfg Config) (*Limiter, error) {
	s, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	l := &Limiter{s: s}
	l.log.init(&l.s)
	if err := l.buildStatuses(); err != nil {
		return nil, err
	}
	l.calls, err = limit.New(limit.Config[string]{
		Policy:   s.Policy,
		Store:    s.Store,
		Clock:    s.Clock,
		Observer: s.Observer,
		Logger:   s.Logger,
		Name:     s.Name,
	})
	if err != nil {
		return nil, fmt.Errorf("grpclimit: call limiter: %w", err)
	}
	if s.QueueSize > 0 && !s.Shadow {
		permits, permitsFor := s.streamPermits()
		l.streams, err = limit.New(limit.Config[string]{
			Policy: limit.Policy[string]{
				Permits:    permits,
				PermitsFor: permitsFor,
				// Every stream permit is given back when its stream's
				// context ends, which grpc-go guarantees: nothing to
				// reclaim.
				ReclaimAfter: -1,
			},
			Clock:    s.Clock,
			Observer: streamObserver(s.Observer),
			Logger:   s.Logger,
			Name:     s.Name + "/streams",
		})
		if err != nil {
			l.calls.Close()
			return nil, fmt.Errorf("grpclimit: stream limiter: %w", err)
		}
	}
	return l, nil
}

// streamObserver reports to o the stream limiter's refusals, as the queue
// full they stand for, and nothing else: its grants are not calls.
func streamObserver(o limit.Observer[string]) limit.Observer[string] {
	if o == nil {
		return nil
	}
	return limit.ObserverFunc[string](func(e limit.Event[string]) {
		if e.Kind == limit.Refused {
			e.Kind = limit.QueueFull
			o.Observe(e)
		}
	})
}

// Snapshot returns the busiest keys of the Limiter (in use, waiting,
// refused), at most top of them (top ≤ 0: all), and its totals as
// [Limiter.Totals] gives them.
func (l *Limiter) Snapshot(top int) limit.Snapshot[string] {
	s := l.calls.Snapshot(top)
	s.Totals = l.Totals()
	return s
}

// Totals returns the Limiter's counts: those of its calls, with the
// streams the tap handle refused because the key's calls and queue were
// full counted in QueueFull.
func (l *Limiter) Totals() limit.Totals {
	t := l.calls.Totals()
	if l.streams != nil {
		t.QueueFull += l.streams.Totals().Refused
	}
	return t
}

// Close stops the Limiter's background work. Waiting calls and later ones
// are refused with UNAVAILABLE (limit.ErrClosed); permits already held stay
// valid and are released as their calls end. Close is idempotent and
// returns nil.
func (l *Limiter) Close() error {
	l.calls.Close()
	if l.streams != nil {
		l.streams.Close()
	}
	return nil
}
