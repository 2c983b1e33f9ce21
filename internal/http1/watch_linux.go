//go:build linux

package http1

import (
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// peerWatcher learns from the kernel that clients went away: one epoll
// instance for the whole process, in which each connection's socket is
// registered once, for EPOLLRDHUP (the peer closed or half-closed its
// side) edge-triggered, so that the arrival of data never wakes it. The
// epoll descriptor is itself in the Go runtime's poller, so one goroutine
// waits on it without holding a thread. A request pays an atomic store to
// arm and one to disarm; no read, no goroutine, no deadline.
type peerWatcher struct {
	once sync.Once
	epfd int
	file *os.File
	ok   bool

	mu    sync.Mutex
	conns map[uint64]*conn
	next  uint64
}

var kernelWatch peerWatcher

func (w *peerWatcher) init() {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		_ = unix.Close(fd)
		return
	}
	w.file = os.NewFile(uintptr(fd), "http1-peer-watch")
	rc, err := w.file.SyscallConn()
	if err != nil {
		_ = w.file.Close()
		return
	}
	w.epfd = fd
	w.conns = make(map[uint64]*conn)
	w.ok = true
	go func() {
		events := make([]unix.EpollEvent, 64)
		_ = rc.Read(func(fd uintptr) bool {
			for {
				n, err := unix.EpollWait(int(fd), events, 0)
				if err == unix.EINTR {
					continue
				}
				if err != nil {
					return true // cannot happen on a valid descriptor: give up watching
				}
				for _, ev := range events[:n] {
					w.fire(uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32)
				}
				if n < len(events) {
					return false // wait for the next event
				}
			}
		})
	}()
}

// add registers c's socket and returns its id; false when c has no socket
// (or epoll is unavailable), and the caller falls back to a read.
func (w *peerWatcher) add(c *conn) (uint64, bool) {
	w.once.Do(w.init)
	if !w.ok {
		return 0, false
	}
	rc := rawConnOf(c.rwc)
	if rc == nil {
		return 0, false
	}
	w.mu.Lock()
	w.next++
	id := w.next
	w.conns[id] = c
	w.mu.Unlock()
	var cerr error
	err := rc.Control(func(fd uintptr) {
		ev := unix.EpollEvent{Events: unix.EPOLLRDHUP | unix.EPOLLET, Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
		cerr = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, int(fd), &ev)
	})
	if err != nil || cerr != nil {
		w.remove(id)
		return 0, false
	}
	return id, true
}

// remove forgets id. The socket's registration itself goes when the socket
// is closed; an event for a forgotten id is ignored.
func (w *peerWatcher) remove(id uint64) {
	w.mu.Lock()
	delete(w.conns, id)
	w.mu.Unlock()
}

func (w *peerWatcher) fire(id uint64) {
	w.mu.Lock()
	c := w.conns[id]
	w.mu.Unlock()
	if c != nil {
		c.peerGone()
	}
}
