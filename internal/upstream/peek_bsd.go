//go:build darwin || dragonfly || freebsd || netbsd || openbsd

package upstream

import "golang.org/x/sys/unix"

// peekFD peeks at most len(p.buf) bytes of fd without blocking or
// consuming them.
func (p *socketProber) peekFD(fd uintptr) {
	p.n, _, p.err = unix.Recvfrom(int(fd), p.buf[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
}
