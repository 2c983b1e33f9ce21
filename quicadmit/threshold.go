package quicadmit

import (
	"sync"
	"sync/atomic"
	"time"
)

// rateWindow is the span over which completed handshakes are counted.
const rateWindow = time.Second

// fallDivisor sets how slowly the smoothed rate falls: each window it
// closes 1/fallDivisor of the gap to the measured rate, a time constant of
// about eight seconds. It rises to a higher measurement at once.
const fallDivisor = 8

// rateEstimator measures completed handshakes per window. The hot path is
// two atomic loads; the mutex is taken once per window to roll it.
type rateEstimator struct {
	mu        sync.Mutex
	windowEnd atomic.Int64 // Unix nanoseconds at which the current window ends
	current   atomic.Int64 // completions counted in the current window
	smoothed  atomic.Int64 // smoothed completions per window
}

func (r *rateEstimator) start(now int64) { r.windowEnd.Store(now + int64(rateWindow)) }

// roll closes the windows that ended by now. A window that ended without a
// roll had no completions after the first; each still decays the rate.
func (r *rateEstimator) roll(now int64) {
	if now < r.windowEnd.Load() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	end := r.windowEnd.Load()
	if now < end {
		return
	}
	windows := 1 + (now-end)/int64(rateWindow)
	s := smooth(r.smoothed.Load(), r.current.Swap(0))
	// s falls by at least one per window, and by an eighth when large, so
	// this ends after a few hundred rounds at most even after a long idle.
	for i := int64(1); i < windows && s > 0; i++ {
		s = smooth(s, 0)
	}
	r.smoothed.Store(s)
	r.windowEnd.Store(end + windows*int64(rateWindow))
}

// smooth folds one window's measurement into the smoothed rate: up at
// once, down by an eighth of the gap (rounded up, so it reaches the
// measurement).
func smooth(s, measured int64) int64 {
	if measured >= s {
		return measured
	}
	return s - (s-measured+fallDivisor-1)/fallDivisor
}

// record counts one completed handshake.
func (r *rateEstimator) record(now int64) {
	r.roll(now)
	r.current.Add(1)
}

// rate is the completion rate the threshold follows: the smoothed rate, or
// the current window's count once that is higher, so that a burst of
// completions raises the threshold within the second.
func (r *rateEstimator) rate(now int64) int64 {
	r.roll(now)
	return max(r.smoothed.Load(), r.current.Load())
}

// retryGate is Retry's on/off state with hysteresis: it turns on when the
// attempts in progress reach the threshold and off only once they fall
// below three quarters of it.
type retryGate struct{ on atomic.Bool }

// check updates the gate for n attempts in progress under threshold t and
// reports whether Retry is on, and whether this call changed it.
func (g *retryGate) check(n, t int64) (on, changed bool) {
	if g.on.Load() {
		if 4*n >= 3*t {
			return true, false
		}
		return false, g.on.CompareAndSwap(true, false)
	}
	if n >= t {
		return true, g.on.CompareAndSwap(false, true)
	}
	return false, false
}
