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
// its cap.
type synFilter struct {
	install func(keys []clientkey.Key) (int, error) // returns how many keys the program holds
	inUse   func(clientkey.Key) int
	capOf   func(clientkey.Key) int // negative: unlimited
	log     *slog.Logger
	name    string

	mu      sync.Mutex
	keys    map[clientkey.Key]struct{}
	dirty   bool
	last    time.Time
	timer   *time.Timer
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
	keys := make([]clientkey.Key, 0, len(f.keys))
	for k := range f.keys {
		keys = append(keys, k)
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
}
