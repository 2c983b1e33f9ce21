package accesslog

import (
	"io"
	"os"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A directWriter writes the access log's batches to a regular file on a
// local filesystem with the write system call made directly, outside the
// runtime's system-call path.
//
// Through os.File.Write, each batch's write marks its processor as in a
// system call, which the runtime's monitor may take away and hand to
// another thread, and after every such hand-off the monitor wakes every
// 20 us for a millisecond or more. On event loops that hold every
// processor, those wakes preempt the loops: the access log cost the loops
// 1.08-1.15x their CPU with it off, of which formatting the lines was a
// third (docs/performance.md). Written directly, a batch holds its
// processor for the copy into the page cache (about 10 us for 32 KiB), as
// nginx's worker holds its thread for its log's writes.
//
// A write to a regular file cannot wait on a peer, but it can on the disk:
// the kernel throttles writers when the page cache holds too much unwritten
// data, and a network or FUSE filesystem may not answer at all. So only
// files on the local filesystems of localFilesystems are written this way,
// and the time direct writes spend waiting in the kernel is budgeted: when
// they have waited more than stallBurst beyond stallRate of the time, the
// next pauseAfterSlow of writes go through os.File.Write, where a blocked
// write blocks its goroutine only. A disk under pressure then makes the log
// cost what it cost before rather than stall the loops and the collector,
// which must wait for a direct write to end; while a wait of a few
// milliseconds now and then, as ext4 makes a writer wait while it commits
// its journal or writes back a file's pages (one of 4.7 ms in 90 s of
// bench/peers' load, the file growing by 10 MB/s), holds a processor for
// far less than a minute of the runtime's path costs the loops (the log
// cost them 1.08-1.15x their CPU that way, about 1.04x written directly).
type directWriter struct {
	f  *os.File
	rc syscall.RawConn

	// These are read and written by one writer at a time: LineBuffer
	// writes its batches under its wmu.
	slowWrite   time.Duration // a write that waited longer counts
	stalled     time.Duration // waiting run up beyond stallRate, as of stalledAt
	stalledAt   time.Time
	pausedUntil time.Time
}

const (
	// slowWrite is how long a write that waited in the kernel must take
	// to count as a wait for the disk.
	slowWrite = time.Millisecond
	// stallRate is the share of time direct writes may spend waiting for
	// the disk (2 ms a second), and stallBurst how far beyond it they may
	// run before writes pause: a single wait longer than stallBurst
	// pauses them at once.
	stallRate  = 0.002
	stallBurst = 20 * time.Millisecond
	// pauseAfterSlow is how long writes go through the runtime after.
	pauseAfterSlow = time.Minute
)

// waited accounts a write that waited in the kernel for took, ending at
// now, and reports whether direct writes should pause.
func (d *directWriter) waited(now time.Time, took time.Duration) bool {
	if !d.stalledAt.IsZero() {
		d.stalled -= time.Duration(stallRate * float64(now.Sub(d.stalledAt)))
	}
	d.stalled = max(d.stalled, 0) + took
	d.stalledAt = now
	if d.stalled <= stallBurst {
		return false
	}
	d.stalled = 0
	return true
}

// newDirectWriter returns a directWriter for out when out is a regular
// file on one of localFilesystems, and nil otherwise.
func newDirectWriter(out io.Writer) *directWriter {
	f, ok := out.(*os.File)
	if !ok {
		return nil
	}
	// Not f.Fd, which would put a pipe the caller made non-blocking back
	// in blocking mode.
	rc, err := f.SyscallConn()
	if err != nil {
		return nil
	}
	direct := false
	err = rc.Control(func(fd uintptr) {
		var st unix.Stat_t
		var fs unix.Statfs_t
		direct = unix.Fstat(int(fd), &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG &&
			unix.Fstatfs(int(fd), &fs) == nil && localFilesystem(int64(fs.Type))
	})
	if err != nil || !direct {
		return nil
	}
	return &directWriter{f: f, rc: rc, slowWrite: slowWrite}
}

// localFilesystems are the filesystems whose writes only ever wait for the
// local disk's write-back, by their statfs magic numbers.
var localFilesystems = [...]int64{
	unix.EXT4_SUPER_MAGIC, // also ext2 and ext3
	unix.XFS_SUPER_MAGIC,
	unix.BTRFS_SUPER_MAGIC,
	unix.F2FS_SUPER_MAGIC,
	unix.TMPFS_MAGIC,
	unix.OVERLAYFS_SUPER_MAGIC, // containers' root: its upper layer is local
}

func localFilesystem(magic int64) bool {
	for _, m := range localFilesystems {
		if m == magic {
			return true
		}
	}
	return false
}

// Write writes all of p, directly unless a recent direct write was slow.
func (d *directWriter) Write(p []byte) (int, error) {
	start := time.Now()
	if start.Before(d.pausedUntil) {
		return d.f.Write(p)
	}
	n := 0
	var errno syscall.Errno
	// The thread's count of voluntary context switches tells a write the
	// kernel made wait (it slept: throttled, or waiting on the disk)
	// from one that only lost its core to another thread for a while,
	// which the time alone cannot: on a busy machine a 10 us write
	// preempted for a few milliseconds is not the disk's doing. So the
	// goroutine stays on its thread from one count to the other.
	runtime.LockOSThread()
	sleptBefore := voluntarySwitches()
	err := d.rc.Write(func(fd uintptr) bool {
		for n < len(p) {
			k, _, e := unix.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[n])), uintptr(len(p)-n))
			switch {
			case e == unix.EINTR:
				continue
			case e != 0:
				errno = e
				return true
			case k == 0:
				return true
			}
			n += int(k)
		}
		return true
	})
	if took := time.Since(start); took > d.slowWrite && (sleptBefore < 0 || voluntarySwitches() != sleptBefore) {
		if now := time.Now(); d.waited(now, took) {
			d.pausedUntil = now.Add(pauseAfterSlow)
		}
	}
	runtime.UnlockOSThread()
	switch {
	case err != nil:
		// The only error RawConn.Write gives on a file that is not
		// polled: the file was closed.
		return n, &os.PathError{Op: "write", Path: d.f.Name(), Err: os.ErrClosed}
	case errno != 0:
		return n, &os.PathError{Op: "write", Path: d.f.Name(), Err: errno}
	case n < len(p):
		return n, io.ErrShortWrite
	}
	return n, nil
}

// voluntarySwitches returns how many times the calling thread gave up its
// core to wait, or -1 when that cannot be read. It makes the call
// directly, as the write, for the same reason.
func voluntarySwitches() int64 {
	var ru unix.Rusage
	if _, _, e := unix.RawSyscall(unix.SYS_GETRUSAGE, uintptr(unix.RUSAGE_THREAD), uintptr(unsafe.Pointer(&ru)), 0); e != 0 {
		return -1
	}
	return ru.Nvcsw
}
