package limit

import "time"

// A Clock tells the time and makes timers. The limiter reads it to date
// permits for reclaim and to bound waits in the queue; tests inject a fake
// one.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
}

// A Timer is the part of [time.Timer] the limiter uses.
type Timer interface {
	// C returns the channel on which the time is delivered once.
	C() <-chan time.Time
	// Stop prevents the timer from firing. It reports whether it stopped
	// the timer before it fired.
	Stop() bool
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time { return t.t.C }
func (t realTimer) Stop() bool          { return t.t.Stop() }
