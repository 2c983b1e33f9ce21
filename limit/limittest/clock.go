// Package limittest provides test doubles for package limit: a fake Clock
// whose time moves only when told to.
package limittest

import (
	"sync"
	"time"

	"github.com/seed-a07d1050/portcullis/limit"
)

// Clock is a fake [limit.Clock]. Its time starts at a fixed instant and
// moves only by Advance; timers fire when Advance passes their deadline.
// The zero Clock is not usable; call NewClock.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*timer
}

var _ limit.Clock = (*Clock)(nil)

// NewClock returns a Clock set to 2026-01-01 00:00:00 UTC.
func NewClock() *Clock {
	return &Clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

// Now returns the clock's current time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer returns a timer that fires once the clock has advanced by d. A
// timer of zero or negative duration fires at once.
func (c *Clock) NewTimer(d time.Duration) limit.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{c: c, at: c.now.Add(d), ch: make(chan time.Time, 1)}
	if d <= 0 {
		t.ch <- c.now
		return t
	}
	c.timers = append(c.timers, t)
	return t
}

// Advance moves the clock forward by d and fires every timer that is due.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.timers[:0]
	for _, t := range c.timers {
		if t.at.After(c.now) {
			kept = append(kept, t)
			continue
		}
		t.ch <- c.now
	}
	clear(c.timers[len(kept):])
	c.timers = kept
}

// Timers returns how many timers are waiting to fire, so a test can wait
// until the code under test has armed its timer before advancing.
func (c *Clock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

type timer struct {
	c  *Clock
	at time.Time
	ch chan time.Time
}

func (t *timer) C() <-chan time.Time { return t.ch }

func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	for i, o := range t.c.timers {
		if o == t {
			t.c.timers = append(t.c.timers[:i], t.c.timers[i+1:]...)
			return true
		}
	}
	return false
}
