//go:build linux

package evloop

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// worker is one event loop: a goroutine, its epoll set, the client and
// upstream connections registered in it, and an inbox through which
// other goroutines hand it work.
type worker struct {
	s        *Server
	ep, wake int
	// epf holds ep in the runtime's poller, where the loop parks when its
	// set has nothing ready: see poll.
	epf       *os.File
	epc       syscall.RawConn
	deadline  time.Time // epf's read deadline, as last set
	lastYield time.Time
	look      func(uintptr) bool // w.lookOnce, made once: poll runs every turn
	polled    int                // what look found: events, or the error
	pollErr   error

	mu     sync.Mutex
	inbox  []func()
	spare  []func()
	closed bool // no more posts: stop is in the inbox

	live atomic.Int32 // client connections held, read by Shutdown

	// The loop's own: the goroutine running run.
	sockets   socketTable
	idle      map[netip.AddrPort][]*upConn
	now       time.Time
	nextScan  time.Time
	stopping  bool // stop ran: run returns
	draining  bool // shutdown ran
	events    [256]unix.EpollEvent
	scratch   []byte    // reads of bytes nobody asked for
	spareBufs [][]byte  // answer buffers idle connections gave back
	spareLow  int       // the fewest spareBufs held since the last trim: those no answer took
	nextTrim  time.Time // when trimSpare runs next
	headLimit int
}

// socket is a descriptor registered in the worker's epoll set.
type socket interface {
	ready(events uint32)
}

const wakeToken = 0

// scanEvery is how often the loop looks for connections whose time is
// up: the precision of every timeout it keeps.
const scanEvery = 100 * time.Millisecond

func newWorker(s *Server) (*worker, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("evloop: epoll_create1: %w", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(ep)
		return nil, fmt.Errorf("evloop: eventfd: %w", err)
	}
	w := &worker{s: s, ep: ep, wake: wake, idle: map[netip.AddrPort][]*upConn{},
		scratch: make([]byte, 512), headLimit: s.cfg.maxHeadBytes()}
	w.look = w.lookOnce
	if err := w.ctl(unix.EPOLL_CTL_ADD, wake, unix.EPOLLIN, wakeToken); err != nil {
		unix.Close(ep)
		unix.Close(wake)
		return nil, err
	}
	if err := w.parkInRuntime(); err != nil {
		unix.Close(wake) // ep was closed with its failure
		return nil, err
	}
	return w, nil
}

// parkInRuntime registers the loop's epoll set in the runtime's poller
// (an epoll set is readable while it has events ready), so that an idle
// loop waits as any goroutine reading a socket does: parked, its thread
// and processor free for other goroutines. A loop that blocked in
// epoll_wait itself would hold a thread in a system call the runtime
// must account for: its monitor takes the processor away and keeps
// waking every 20 us while loops do that thousands of times a second.
//
// On failure ep is closed: once an os.File holds it, only the File may
// close it (its finalizer would otherwise close the number again, by then
// perhaps another descriptor's).
func (w *worker) parkInRuntime() error {
	if err := unix.SetNonblock(w.ep, true); err != nil {
		unix.Close(w.ep)
		return fmt.Errorf("evloop: epoll set non-blocking: %w", err)
	}
	w.epf = os.NewFile(uintptr(w.ep), "evloop-epoll")
	rc, err := w.epf.SyscallConn()
	if err != nil {
		w.epf.Close()
		return fmt.Errorf("evloop: epoll set in the runtime's poller: %w", err)
	}
	w.epc = rc
	return nil
}

// post has the loop run fn; final marks the last post (stop). It reports
// false, having queued nothing, once the final post was made.
func (w *worker) post(fn func(), final bool) bool {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return false
	}
	w.inbox = append(w.inbox, fn)
	w.closed = final
	w.mu.Unlock()
	var one = [8]byte{1}
	_, _ = unix.Write(w.wake, one[:])
	return true
}

func (w *worker) runInbox() {
	var b [8]byte
	_, _ = unix.Read(w.wake, b[:])
	w.mu.Lock()
	fns := w.inbox
	w.inbox, w.spare = w.spare[:0], nil
	w.mu.Unlock()
	for i, fn := range fns {
		fn()
		fns[i] = nil
	}
	w.mu.Lock()
	if w.spare == nil {
		w.spare = fns[:0]
	}
	w.mu.Unlock()
}

func (w *worker) ctl(op, fd int, events uint32, token uint64) error {
	ev := unix.EpollEvent{Events: events, Fd: int32(uint32(token)), Pad: int32(uint32(token >> 32))}
	if err := unix.EpollCtl(w.ep, op, fd, &ev); err != nil {
		return fmt.Errorf("evloop: epoll_ctl: %w", err)
	}
	return nil
}

func tokenOf(ev *unix.EpollEvent) uint64 {
	return uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
}

// run serves events until stop ran, then closes what is left.
func (w *worker) run() {
	defer w.release()
	w.now = time.Now()
	w.nextScan = w.now.Add(scanEvery)
	w.lastYield = w.now
	for !w.stopping {
		var until time.Time // none: nothing to time out
		if w.sockets.len() > 0 || len(w.spareBufs) > 0 {
			until = w.nextScan
		}
		n, err := w.poll(until)
		w.now = time.Now()
		w.yieldNowAndThen()
		if err != nil {
			w.s.cfg.logger().Error("evloop: epoll_wait failed; closing the worker's connections", "error", err)
			w.stop()
			return
		}
		for i := range n {
			if i > 0 && i%clockEvery == 0 {
				w.now = time.Now()
			}
			ev := &w.events[i]
			tok := tokenOf(ev)
			if tok == wakeToken {
				w.runInbox()
				continue
			}
			if s := w.sockets.get(tok); s != nil {
				w.dispatch(s, ev.Events)
			}
		}
		if !w.now.Before(w.nextScan) {
			w.scan()
			w.nextScan = w.now.Add(scanEvery)
			if !w.now.Before(w.nextTrim) {
				w.trimSpare()
			}
		}
	}
}

// clockEvery is how many events a turn serves before the loop reads the
// clock again: a busy turn (up to 256 events) would otherwise keep its
// first reading for milliseconds.
const clockEvery = 16

// scan ends what ran out of time.
func (w *worker) scan() {
	w.sockets.each(func(s socket) {
		switch s := s.(type) {
		case *Conn:
			if !s.deadline.IsZero() && !w.now.Before(s.deadline) {
				w.guard(s, s.timeUp)
			}
		case *upConn:
			w.guard(s, s.timeUp)
		}
	})
}

// spareTrimEvery is how often a loop lets go of the answer buffers its
// spare list kept that no answer took since the last time. The list
// holds a buffer for each upstream connection that went idle, up to the
// peak of exchanges at once: without the trim, a burst of 5,000
// exchanges would keep 80 MiB of buffers for ever, idle connections
// closed or not. A var for the tests.
var spareTrimEvery = 5 * time.Second

// trimSpare drops the spare buffers no answer took since its last run:
// the oldest ones, at the bottom of the list, below its lowest point. A
// loop holding spare buffers wakes for its scans even with no socket, so
// that an idle loop ends with none.
func (w *worker) trimSpare() {
	if k := w.spareLow; k > 0 {
		n := copy(w.spareBufs, w.spareBufs[k:])
		clear(w.spareBufs[n:])
		w.spareBufs = w.spareBufs[:n]
		if c := cap(w.spareBufs); c > 64 && n < c/4 {
			w.spareBufs = append([][]byte(nil), w.spareBufs...)
		}
	}
	w.spareLow = len(w.spareBufs)
	w.nextTrim = w.now.Add(spareTrimEvery)
}

// errPanicked is Exchange.Done's cause when a Handler's code panicked
// while the loop served the exchange.
var errPanicked = errors.New("evloop: the handler panicked")

// dispatch hands events to s. A panic on the way, a Handler's bug, ends
// what s was serving (its exchange, if any, with errPanicked, and its
// connection), as the daemon's server ends a connection whose handler
// panicked, instead of the process.
func (w *worker) dispatch(s socket, events uint32) {
	defer w.recoverFor(s)
	s.ready(events)
}

// guard runs fn, work of s's, as dispatch runs s's events.
func (w *worker) guard(s socket, fn func()) {
	defer w.recoverFor(s)
	fn()
}

func (w *worker) recoverFor(s socket) {
	if r := recover(); r != nil {
		w.s.cfg.logger().Error("evloop: panic serving a connection", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		w.abandon(s)
	}
}

// abandon ends what s served after a panic.
func (w *worker) abandon(s socket) {
	defer func() {
		if r := recover(); r != nil { // in Exchange.Done: the connection closes all the same
			w.s.cfg.logger().Error("evloop: panic ending an exchange", "panic", fmt.Sprint(r))
		}
	}()
	switch s := s.(type) {
	case *Conn:
		s.fail(errPanicked)
	case *upConn:
		if c := s.c; c != nil {
			c.fail(errPanicked)
		}
		s.close()
	}
}

// shutdown closes the connections waiting for a request and marks the
// rest to close once their exchange ends.
func (w *worker) shutdown() {
	w.draining = true
	w.sockets.each(func(s socket) {
		if c, ok := s.(*Conn); ok && c.state == stateReading && c.n == 0 {
			c.close()
		}
	})
}

// stop closes every connection: exchanges under way end with ErrClosed.
func (w *worker) stop() {
	w.stopping = true
	w.sockets.each(func(s socket) {
		switch s := s.(type) {
		case *Conn:
			s.fail(ErrClosed)
		case *upConn:
			s.close()
		}
	})
}

// release runs last on the loop's goroutine: posts that came after stop
// (none can: stop is final) and the descriptors.
func (w *worker) release() {
	w.runInbox()
	w.stop()
	unix.Close(w.wake)
	w.epf.Close() // and w.ep with it
}

// poll waits for events until the time until (for ever if zero). Under
// load something nearly always waits, and the first look finds it; when
// nothing does, the loop parks in the runtime's poller until its epoll
// set has events or the time comes.
func (w *worker) poll(until time.Time) (int, error) {
	if !until.Equal(w.deadline) {
		if err := w.epf.SetReadDeadline(until); err != nil {
			return 0, fmt.Errorf("evloop: epoll set deadline: %w", err)
		}
		w.deadline = until
	}
	w.polled, w.pollErr = 0, nil
	err := w.epc.Read(w.look)
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return 0, nil
	case err != nil:
		return 0, err
	case w.pollErr != nil:
		return 0, w.pollErr
	}
	return w.polled, nil
}

// lookOnce is poll's look at the epoll set, made by the runtime's poller
// first and again each time it found the set readable. It reports
// whether to stop: events came, or the look failed.
func (w *worker) lookOnce(uintptr) bool {
	n, err := epollWaitNow(w.ep, w.events[:])
	// Looked at again after a signal: the runtime's poller only wakes the
	// loop for events that come from now on.
	for err == unix.EINTR {
		n, err = epollWaitNow(w.ep, w.events[:])
	}
	w.polled, w.pollErr = n, err
	return n > 0 || err != nil
}

// yieldEvery bounds how long a busy loop keeps its processor from the
// process's other goroutines (accepting, serving connections the loops
// gave back, metrics): a loop under load never parks.
const yieldEvery = time.Millisecond

func (w *worker) yieldNowAndThen() {
	if w.now.Sub(w.lastYield) >= yieldEvery {
		runtime.Gosched()
		w.lastYield = w.now
	}
}
