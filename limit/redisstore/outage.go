package redisstore

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// maxOutageNames bounds how many Store names one outage line lists; the
// count is always given.
const maxOutageNames = 32

// An OutageLog logs the circuit breakers of several Stores that share one
// Redis as one outage, so that a Redis that goes away is logged once, not
// once per Store: one WARN when the first of them opens its breaker, naming
// it, and one INFO when the last of them closes its breaker again, naming
// the Stores whose breaker opened during the outage and their count. The
// other breakers opening in between are logged at DEBUG. Give it to every
// Store of one Redis client through [Config.Outages]. It is safe for
// concurrent use; the zero OutageLog is not usable: create one with
// [NewOutageLog].
//
// A Store closed while its breaker is open leaves the outage; if it was the
// last one open, the outage ends without a recovery line, since nothing has
// seen Redis come back.
type OutageLog struct {
	logger *slog.Logger

	mu       sync.Mutex
	open     map[uint64]string // Stores whose breaker is not closed, by id
	reasons  map[uint64]string // why each of them opened last (FailureReason)
	affected []string          // names of the Stores that opened during this outage
	began    time.Time         // when the current outage began; zero when there is none
	warned   time.Time         // when the outage was last logged at WARN
}

// OutageRepeat is how often an OutageLog repeats its WARN while an outage
// lasts: a Redis that stays away (or stays too slow for Timeout) is not
// one line in the log and then silence.
const OutageRepeat = time.Minute

// NewOutageLog returns an OutageLog that writes to logger. A nil logger means
// slog.Default().
func NewOutageLog(logger *slog.Logger) *OutageLog {
	if logger == nil {
		logger = slog.Default()
	}
	return &OutageLog{logger: logger, open: make(map[uint64]string), reasons: make(map[uint64]string)}
}

// storeIDs numbers Stores for the OutageLog that tracks them.
var storeIDs atomic.Uint64

// changed records the breaker state of the Store with id and name now. It
// reads the state itself (under the log's lock) rather than trusting the
// transition that triggered the call, so that two transitions reported out
// of order still leave the set matching the breakers. state also reports
// whether the Store is closed: a call in flight during Close must not bring
// back a Store that forget took out.
func (o *OutageLog) changed(id uint64, name string, state func() (BreakerState, bool), policy Policy, backoff time.Duration, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	now, closed := state()
	if closed {
		return
	}
	_, wasOpen := o.open[id]
	isOpen := now != BreakerClosed
	if isOpen && err != nil {
		o.reasons[id] = FailureReason(err)
	}
	switch {
	case isOpen && wasOpen:
		if time.Since(o.warned) >= OutageRepeat {
			o.warned = time.Now()
			o.logger.Warn("redisstore: redis still unavailable, node-local fallback in force",
				slog.String("store", name),
				slog.String("reason", o.reasons[id]),
				slog.String("on_error", policy.String()),
				slog.Int("open_breakers", len(o.open)),
				slog.Duration("outage", time.Since(o.began).Round(time.Millisecond)),
				slog.Any("error", err))
		}
	case isOpen && !wasOpen:
		o.open[id] = name
		if _, ok := o.reasons[id]; !ok {
			o.reasons[id] = ReasonError
		}
		if o.began.IsZero() {
			o.began = time.Now()
			o.warned = o.began
			o.affected = o.affected[:0]
			o.logger.Warn("redisstore: redis unavailable, circuit breaker open",
				slog.String("store", name),
				slog.String("reason", o.reasons[id]),
				slog.String("on_error", policy.String()),
				slog.Duration("retry_after", backoff),
				slog.Any("error", err))
		} else {
			o.logger.Debug("redisstore: circuit breaker open (same outage)", slog.String("store", name))
		}
		o.noteAffected(name)
	case !isOpen && wasOpen:
		delete(o.open, id)
		delete(o.reasons, id)
		if len(o.open) == 0 {
			o.end(true)
		}
	}
}

// Reasons returns, for the outage in progress, how many of the Stores
// sharing o have their breaker open for each reason ([FailureReason] of
// the error that last opened it); an empty map when Redis answers them
// all. While it is not empty, those Stores decide on their node-local
// fallback (Open) or refuse (Closed).
func (o *OutageLog) Reasons() map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	m := make(map[string]int, len(o.open))
	for id := range o.open {
		m[o.reasons[id]]++
	}
	return m
}

// Current reports the outage in progress: how many of the Stores sharing o
// have their circuit breaker open (or half-open) now, and since when the
// first of them opened; 0 and the zero Time when Redis answers them all.
func (o *OutageLog) Current() (open int, since time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.open), o.began
}

// forget takes a closed Store out of the outage.
func (o *OutageLog) forget(id uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.open[id]; !ok {
		return
	}
	delete(o.open, id)
	delete(o.reasons, id)
	if len(o.open) == 0 {
		o.end(false)
	}
}

func (o *OutageLog) noteAffected(name string) {
	for _, n := range o.affected {
		if n == name {
			return
		}
	}
	o.affected = append(o.affected, name)
}

// end closes the current outage; recovered says whether a breaker saw Redis
// answer again (else the last open Store was closed).
func (o *OutageLog) end(recovered bool) {
	names := o.affected
	if len(names) > maxOutageNames {
		names = names[:maxOutageNames]
	}
	attrs := []slog.Attr{
		slog.Any("stores", append([]string(nil), names...)),
		slog.Int("count", len(o.affected)),
		slog.Duration("outage", time.Since(o.began).Round(time.Millisecond)),
	}
	if recovered {
		o.logger.LogAttrs(context.Background(), slog.LevelInfo, "redisstore: redis reachable again, circuit breakers closed", attrs...)
	} else {
		o.logger.LogAttrs(context.Background(), slog.LevelDebug, "redisstore: every store whose breaker was open is closed", attrs...)
	}
	o.began = time.Time{}
	o.affected = o.affected[:0]
}
