package connlimit

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed-a07d1050/portcullis/clientkey"
)

// synFilterGap is the least time between two programs installed on the
// listening socket. A client that reaches its cap is filtered at once when
// the previous install is older than this, else within it; meanwhile its
// connection attempts are refused at accept as usual, so a late install
// costs nothing but CPU.
const synFilterGap = 10 * time.Millisecond

// synFilter keeps a socket filter on the listening socket that drops the
// SYN packets of the client keys now at their per-client cap, so that the
// kernel neither completes their handshakes nor queues them for Accept.
// The Listener's counts stay the truth: the filter only spares the work of
// refusing, and a key is in it only while the Listener's count for it is at
// its cap, or (Config.ConnRate) until its rate admits a connection again.
type synFilter struct {
	install func(keys []clientkey.Key) (int, error) // returns how many keys the program holds
	inUse   func(clientkey.Key) int
	capOf   func(clientkey.Key) int // negative: unlimited
	log     *slog.Logger
	name    string

	mu      sync.Mutex
	keys    map[clientkey.Key]struct{}
	rated   map[clientkey.Key]time.Time // refused for their rate, until
	dirty   bool
	last    time.Time
	timer   *time.Timer // the next install, synFilterGap after the last
	expiry  *time.Timer // the next time a rated key's time is up
	expires time.Time   // when expiry fires; zero when not armed
	closed  bool
	errGate logGate

	count    atomic.Int64 // len(keys), read without the lock
	filtered atomic.Int64 // keys the installed program holds
}

// atCap reports whether key holds its cap now.
func (f *synFilter) atCap(key clientkey.Key) bool {
	c := f.capOf(key)
	return c >= 0 && f.inUse(key) >= c
}

// admitted is called after key took a slot, and after a refusal at the
// per-client cap: it filters key if it is at its cap.
func (f *synFilter) admitted(key clientkey.Key) {
	if !f.atCap(key) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	// Decided again under the lock, so that a release between the first
	// look and here cannot leave key filtered below its cap.
	if _, ok := f.keys[key]; ok || !f.atCap(key) {
		return
	}
	f.keys[key] = struct{}{}
	f.count.Store(int64(len(f.keys)))
	f.changedLocked()
}

// released is called after key gave a slot back: it stops filtering key
// once it is under its cap.
func (f *synFilter) released(key clientkey.Key) {
	if f.count.Load() == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.keys[key]; !ok || f.atCap(key) {
		return
	}
	delete(f.keys, key)
	f.count.Store(int64(len(f.keys)))
	f.changedLocked()
}

// rateRefused is called after key was refused for its connection rate: it
// filters key for retry, until its rate admits a connection again. The
// key's connections then wait in the client's SYN retransmissions (1 s,
// 3 s...), which may hold it back longer than its rate alone would.
func (f *synFilter) rateRefused(key clientkey.Key, retry time.Duration) {
	if retry <= 0 {
		return
	}
	until := time.Now().Add(retry)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rated == nil {
		f.rated = make(map[clientkey.Key]time.Time)
	}
	if old, ok := f.rated[key]; ok && !until.After(old) {
		return
	}
	_, had := f.rated[key]
	f.rated[key] = until
	f.armExpiryLocked(until)
	if !had {
		f.changedLocked()
	}
}

// armExpiryLocked makes sure the expiry timer fires by at.
func (f *synFilter) armExpiryLocked(at time.Time) {
	if f.closed || (!f.expires.IsZero() && !f.expires.After(at)) {
		return
	}
	if f.expiry != nil {
		f.expiry.Stop()
	}
	f.expires = at
	f.expiry = time.AfterFunc(time.Until(at), f.expire)
}

// expire drops the rated keys whose time is up and installs the new set.
func (f *synFilter) expire() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.expiry, f.expires = nil, time.Time{}
	now := time.Now()
	var next time.Time
	changed := false
	for k, until := range f.rated {
		if !until.After(now) {
			delete(f.rated, k)
			changed = true
		} else if next.IsZero() || until.Before(next) {
			next = until
		}
	}
	if !next.IsZero() {
		f.armExpiryLocked(next)
	}
	if changed {
		f.changedLocked()
	}
}

// changedLocked installs the new set now, or arms the timer to install it
// once synFilterGap has passed since the last install.
func (f *synFilter) changedLocked() {
	if f.closed {
		return
	}
	f.dirty = true
	wait := synFilterGap - time.Since(f.last)
	if wait <= 0 {
		f.installLocked()
		return
	}
	if f.timer == nil {
		f.timer = time.AfterFunc(wait, f.flush)
	}
}

func (f *synFilter) flush() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.timer = nil
	if f.dirty && !f.closed {
		f.installLocked()
	}
}

func (f *synFilter) installLocked() {
	keys := make([]clientkey.Key, 0, len(f.keys)+len(f.rated))
	for k := range f.keys {
		keys = append(keys, k)
	}
	now := time.Now()
	for k, until := range f.rated {
		if _, dup := f.keys[k]; !dup && until.After(now) {
			keys = append(keys, k)
		}
	}
	n, err := f.install(keys)
	f.last, f.dirty = time.Now(), false
	if err != nil {
		// The old program stays; refusals at accept still enforce the caps.
		if suppressed, ok := f.errGate.pass(f.last.UnixNano()); ok {
			f.log.LogAttrs(context.Background(), slog.LevelWarn, "connlimit: cannot update the SYN filter",
				slog.String("listener", f.name), slog.String("error", err.Error()), slog.Uint64("suppressed", suppressed))
		}
		return
	}
	f.filtered.Store(int64(n))
}

// close stops installing programs; the socket's own close removes the
// installed one.
func (f *synFilter) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	if f.timer != nil {
		f.timer.Stop()
		f.timer = nil
	}
	if f.expiry != nil {
		f.expiry.Stop()
		f.expiry = nil
	}
}
