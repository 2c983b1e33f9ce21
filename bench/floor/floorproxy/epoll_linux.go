package floorproxy

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// ServeEpoll is [Serve] without the Go runtime's network poller: the
// shape of nginx's workers, to tell how much of the floor's cost is the
// poller's and the scheduler's rather than the kernel's. Each of workers
// OS threads (locked, one per worker) runs its own epoll loop over
// non-blocking sockets, accepts from a shared listening socket
// (EPOLLEXCLUSIVE, as nginx does with accept_mutex off), and relays each
// client connection's requests over an upstream connection of its own,
// as Serve does: a read of the request, a write upstream, a read of the
// answer, a write to the client, each only once epoll said the socket was
// ready, so no read fails with EAGAIN. There is no peek at the kept
// upstream connection (nginx makes none: it learns from the event loop
// that a kept connection was closed).
//
// It relays what Serve relays and closes a connection on anything else,
// or on a write that would block (the benchmarks' messages fit the
// socket buffers). Connecting upstream blocks the worker, once per client
// connection. The returned stop ends the workers and closes every socket
// they hold; ln itself stays open.
func ServeEpoll(ln net.Listener, upstream string, workers int) (stop func(), err error) {
	return serveEpoll(ln, upstream, workers, nil)
}

// ServeEpollAdmitting is [ServeEpoll] with the work of a on each request,
// as [ServeAdmitting] does it, but for the peek at the kept upstream
// connection: an event loop learns that bytes arrived on it, or that it
// closed, from its events, for no system call. Bytes from the upstream
// while no request is in flight close the pair, as the peek would. A
// request that is not admitted closes its connection.
func ServeEpollAdmitting(ln net.Listener, upstream string, workers int, a *Admission) (stop func(), err error) {
	if a == nil {
		return nil, errors.New("floor: ServeEpollAdmitting without an Admission")
	}
	return serveEpoll(ln, upstream, workers, a)
}

func serveEpoll(ln net.Listener, upstream string, workers int, a *Admission) (stop func(), err error) {
	up, err := net.ResolveTCPAddr("tcp4", upstream)
	if err != nil {
		return nil, fmt.Errorf("floor: upstream: %w", err)
	}
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return nil, errors.New("floor: ServeEpoll needs a TCP listener")
	}
	f, err := tl.File() // a duplicate, in blocking mode
	if err != nil {
		return nil, fmt.Errorf("floor: listener: %w", err)
	}
	lfd := int(f.Fd())
	if err := unix.SetNonblock(lfd, true); err != nil {
		f.Close()
		return nil, fmt.Errorf("floor: listener: %w", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("floor: eventfd: %w", err)
	}
	var sa unix.SockaddrInet4
	copy(sa.Addr[:], up.IP.To4())
	sa.Port = up.Port
	var wg sync.WaitGroup
	for range max(workers, 1) {
		w, err := newWorker(lfd, wake, sa, a)
		if err != nil {
			unix.Write(wake, []byte{1, 0, 0, 0, 0, 0, 0, 0})
			wg.Wait()
			unix.Close(wake)
			f.Close()
			return nil, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run()
		}()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			// The eventfd stays readable: every worker sees it.
			unix.Write(wake, []byte{1, 0, 0, 0, 0, 0, 0, 0})
			wg.Wait()
			unix.Close(wake)
			f.Close()
		})
	}, nil
}

// epollWorker is one event loop: its epoll set, and the connection pairs
// it relays, by file descriptor.
type epollWorker struct {
	ep, lfd, wake int
	upstream      unix.SockaddrInet4 // each worker's own: Connect writes into it
	admission     *Admission         // nil: relay only
	pairs         map[int]*epollPair // by either descriptor of the pair
	events        [128]unix.EpollEvent
}

// epollPair is a client connection and its upstream connection.
type epollPair struct {
	client, up int
	in         []byte // the request head being read
	out        []byte // the response being read
	n, m       int    // bytes of in and out read so far
	end        int    // the response's length once its head is in; -1 before

	// With an Admission: the connection's admission state, and the
	// exchange in flight.
	ac    *admitConn
	busy  bool      // a request was sent and its answer is not yet written
	start time.Time // when the request's head was whole
}

func newWorker(lfd, wake int, upstream unix.SockaddrInet4, a *Admission) (*epollWorker, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("floor: epoll: %w", err)
	}
	w := &epollWorker{ep: ep, lfd: lfd, wake: wake, upstream: upstream, admission: a, pairs: map[int]*epollPair{}}
	if err := w.add(lfd, unix.EPOLLIN|unix.EPOLLEXCLUSIVE); err != nil {
		unix.Close(ep)
		return nil, err
	}
	if err := w.add(wake, unix.EPOLLIN); err != nil {
		unix.Close(ep)
		return nil, err
	}
	return w, nil
}

func (w *epollWorker) add(fd int, events uint32) error {
	ev := unix.EpollEvent{Events: events, Fd: int32(fd)}
	if err := unix.EpollCtl(w.ep, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return fmt.Errorf("floor: epoll_ctl: %w", err)
	}
	return nil
}

// run serves events until the wake descriptor is written, then closes
// every connection of the worker.
func (w *epollWorker) run() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer w.closeAll()
	for {
		n, err := unix.EpollWait(w.ep, w.events[:], -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return
		}
		for _, ev := range w.events[:n] {
			switch fd := int(ev.Fd); fd {
			case w.wake:
				return
			case w.lfd:
				w.accept()
			default:
				if p := w.pairs[fd]; p != nil {
					w.ready(p, fd, ev.Events)
				}
			}
		}
	}
}

// accept takes the connections waiting on the listener, each with an
// upstream connection of its own.
func (w *epollWorker) accept() {
	for {
		cfd, peer, err := unix.Accept4(w.lfd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		if err != nil {
			return // EAGAIN: another worker took it, or none is left
		}
		ufd, err := w.dial()
		if err != nil {
			unix.Close(cfd)
			continue
		}
		p := &epollPair{client: cfd, up: ufd, in: make([]byte, 8<<10), out: make([]byte, 16<<10), end: -1}
		if w.admission != nil {
			p.ac = newAdmitConn(w.admission, tcpAddrOf(peer))
		}
		w.pairs[cfd], w.pairs[ufd] = p, p
		if w.add(cfd, unix.EPOLLIN|unix.EPOLLRDHUP) != nil || w.add(ufd, unix.EPOLLIN|unix.EPOLLRDHUP) != nil {
			w.close(p)
		}
	}
}

// dial connects to the upstream, blocking, and returns the connection
// made non-blocking.
func (w *epollWorker) dial() (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.Connect(fd, &w.upstream); err != nil {
		unix.Close(fd)
		return -1, err
	}
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// ready handles an event on one socket of p.
func (w *epollWorker) ready(p *epollPair, fd int, events uint32) {
	var ok bool
	if fd == p.client {
		ok = w.fromClient(p)
	} else {
		ok = w.fromUpstream(p)
	}
	if !ok || events&(unix.EPOLLERR|unix.EPOLLHUP) != 0 {
		w.close(p)
	}
}

// fromClient reads from the client and, once a whole request head is in,
// sends it upstream.
func (w *epollWorker) fromClient(p *epollPair) bool {
	if read, ok := readMore(p.client, p.in, &p.n); !read {
		return ok
	}
	i := bytes.Index(p.in[:p.n], []byte("\r\n\r\n"))
	switch {
	case i < 0:
		return true
	case i+4 != p.n:
		return false // pipelining or a body
	}
	head := p.in[:p.n]
	if p.ac != nil {
		if p.busy || !p.ac.admit(head) {
			return false // pipelined, or not admitted
		}
		p.busy, p.start, head = true, time.Now(), p.ac.head
	}
	if !writeAll(p.up, head) {
		return false
	}
	p.n = 0
	return true
}

// fromUpstream reads the answer and, once it is whole, writes it to the
// client.
func (w *epollWorker) fromUpstream(p *epollPair) bool {
	if p.ac != nil && !p.busy {
		return false // the upstream closed, or sent what no request asked for
	}
	if read, ok := readMore(p.up, p.out, &p.m); !read {
		return ok
	}
	if p.end < 0 {
		i := bytes.Index(p.out[:p.m], []byte("\r\n\r\n"))
		if i < 0 {
			return true
		}
		length, err := contentLength(p.out[:i])
		if err != nil {
			return false
		}
		p.end = i + 4 + length
	}
	switch {
	case p.m < p.end:
		return true
	case p.m > p.end:
		return false // bytes after the response
	}
	answer := p.out[:p.m]
	var got time.Time
	if p.ac != nil {
		got = time.Now()
		var ok bool
		if answer, ok = p.ac.answer(answer); !ok {
			return false
		}
	}
	if !writeAll(p.client, answer) {
		return false
	}
	if p.ac != nil {
		p.ac.record(p.start, got)
		p.ac.release()
		p.busy = false
	}
	p.m, p.end = 0, -1
	return true
}

// tcpAddrOf returns the address of an accepted peer.
func tcpAddrOf(sa unix.Sockaddr) net.Addr {
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return &net.TCPAddr{IP: net.IP(sa.Addr[:]), Port: sa.Port}
	case *unix.SockaddrInet6:
		return &net.TCPAddr{IP: net.IP(sa.Addr[:]), Port: sa.Port}
	}
	return &net.TCPAddr{}
}

// readMore reads from fd into buf after the *n bytes it holds. It reports
// whether bytes came, and when none did, whether the connection may stay
// (nothing to read yet) or is to close (buf full, an error, the end).
func readMore(fd int, buf []byte, n *int) (read, ok bool) {
	if *n == len(buf) {
		return false, false
	}
	k, err := unix.Read(fd, buf[*n:])
	if err == unix.EAGAIN {
		return false, true
	}
	if err != nil || k <= 0 {
		return false, false
	}
	*n += k
	return true, true
}

// writeAll writes b to fd, which must take it all without blocking.
func writeAll(fd int, b []byte) bool {
	for len(b) > 0 {
		k, err := unix.Write(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil || k <= 0 {
			return false
		}
		b = b[k:]
	}
	return true
}

func (w *epollWorker) close(p *epollPair) {
	if p.ac != nil {
		p.ac.release()
	}
	delete(w.pairs, p.client)
	delete(w.pairs, p.up)
	unix.Close(p.client) // closing drops it from the epoll set
	unix.Close(p.up)
}

func (w *epollWorker) closeAll() {
	for _, p := range w.pairs {
		if w.pairs[p.client] == p {
			w.close(p)
		}
	}
	unix.Close(w.ep)
}
