package accesslog

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestDirectWriterOnlyForLocalFiles(t *testing.T) {
	dir := t.TempDir()
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	if !localFilesystem(int64(fs.Type)) {
		t.Fatalf("the test's temporary directory %s is on a filesystem (magic %#x) this test cannot use: set TMPDIR to one on ext4, xfs, btrfs, f2fs, tmpfs or overlayfs", dir, fs.Type)
	}
	file, _ := createLog(t, dir)
	if newDirectWriter(file) == nil {
		t.Error("a regular file on a local filesystem is not written directly")
	}

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if newDirectWriter(w) != nil {
		t.Error("a pipe, which may block for good, is written directly")
	}
	// The pipe's end stays non-blocking: looking at it did not call Fd.
	if err := w.SetWriteDeadline(time.Now().Add(time.Hour)); err != nil {
		t.Errorf("the pipe lost its non-blocking mode: %v", err)
	}
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	if newDirectWriter(null) != nil {
		t.Error("a device is written directly")
	}
	if newDirectWriter(&recordingWriter{}) != nil {
		t.Error("a writer that is not a file is written directly")
	}

	for _, tc := range []struct {
		name  string
		magic int64
		want  bool
	}{
		{"ext4", unix.EXT4_SUPER_MAGIC, true},
		{"xfs", unix.XFS_SUPER_MAGIC, true},
		{"tmpfs", unix.TMPFS_MAGIC, true},
		{"overlayfs", unix.OVERLAYFS_SUPER_MAGIC, true},
		{"nfs", unix.NFS_SUPER_MAGIC, false},
		{"fuse", unix.FUSE_SUPER_MAGIC, false},
		{"smb2", unix.SMB2_SUPER_MAGIC, false},
		{"cifs", unix.CIFS_SUPER_MAGIC, false},
	} {
		if got := localFilesystem(tc.magic); got != tc.want {
			t.Errorf("localFilesystem(%s) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestDirectWriterKeepsLinesWhole writes lines from many goroutines through
// a LineBuffer over a direct writer and reads the file back: every line
// whole, each goroutine's in its order.
func TestDirectWriterKeepsLinesWhole(t *testing.T) {
	file, path := createLog(t, t.TempDir())
	b := NewLineBuffer(file)
	if _, ok := b.Out.(*directWriter); !ok {
		t.Fatalf("the buffer writes through %T, not directly", b.Out)
	}
	const writers, lines = 8, 3000
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pad := strings.Repeat("p", 50+w*37)
			for i := range lines {
				if _, err := fmt.Fprintf(b, "%d %d %s\n", w, i, pad); err != nil {
					t.Errorf("writer %d, line %d: %v", w, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.Flush()

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	next := make([]int, writers)
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		var w, i int
		var pad string
		if _, err := fmt.Sscanf(sc.Text(), "%d %d %s", &w, &i, &pad); err != nil || w < 0 || w >= writers ||
			pad != strings.Repeat("p", 50+w*37) {
			t.Fatalf("line %d is not whole: %q", n, sc.Text())
		}
		if i != next[w] {
			t.Fatalf("writer %d: line %d after %d", w, i, next[w]-1)
		}
		next[w]++
		n++
	}
	if n != writers*lines {
		t.Errorf("%d lines in the file, want %d", n, writers*lines)
	}
}

// TestDirectWriterStallBudget: waits for the disk now and then, as ext4's
// journal commits and write-back make them, never pause the direct writes;
// waits that come faster than the budget, or one longer than its burst, do.
func TestDirectWriterStallBudget(t *testing.T) {
	at := time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		every   time.Duration // between the waits
		took    time.Duration // each wait
		n       int
		pauseAt int // the wait that pauses, 0: none
	}{
		{"5 ms every 3 s", 3 * time.Second, 5 * time.Millisecond, 1000, 0},
		{"15 ms every 10 s", 10 * time.Second, 15 * time.Millisecond, 1000, 0},
		{"2 ms every 2 s", 2 * time.Second, 2 * time.Millisecond, 1000, 0},
		{"2 ms every 500 ms", 500 * time.Millisecond, 2 * time.Millisecond, 100, 20}, // twice the rate
		{"5 ms back to back", 5 * time.Millisecond, 5 * time.Millisecond, 10, 5},
		{"2 ms every 100 ms", 100 * time.Millisecond, 2 * time.Millisecond, 100, 12},
		{"one of 25 ms", time.Second, 25 * time.Millisecond, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d directWriter
			now := at
			for i := 1; i <= tc.n; i++ {
				now = now.Add(tc.every)
				if d.waited(now, tc.took) {
					if i != tc.pauseAt {
						t.Fatalf("paused at wait %d, want %d", i, tc.pauseAt)
					}
					return
				}
			}
			if tc.pauseAt != 0 {
				t.Fatalf("no pause in %d waits, want one at wait %d", tc.n, tc.pauseAt)
			}
		})
	}
}

// TestDirectWriterPausesAfterASlowWrite has a direct write wait in the
// kernel longer than stallBurst, on a blocking pipe whose reader is late
// (a file's write cannot be made to wait here), and checks that writes then go through the file
// for pauseAfterSlow; and that a write only slower than slowWrite, without
// waiting, does not pause them.
func TestDirectWriterPausesAfterASlowWrite(t *testing.T) {
	file, _ := createLog(t, t.TempDir())
	d := newDirectWriter(file)
	if d == nil {
		t.Fatal("a regular file is not written directly")
	}
	d.slowWrite = 0 // every write is slow, but a file's does not wait
	for range 100 {
		if _, err := d.Write([]byte("quick\n")); err != nil || d.paused() {
			t.Fatalf("after a write that did not wait: error %v, paused %v; want neither", err, d.paused())
		}
	}

	// The reader is another process: a direct write holds its processor
	// while it waits, and a reader in this one could be stopped with
	// every goroutine by the collector, which waits for that processor.
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil { // blocking, unlike os.Pipe's
		t.Fatal(err)
	}
	r, w := os.NewFile(uintptr(fds[0]), "pipe-r"), os.NewFile(uintptr(fds[1]), "pipe-w")
	defer w.Close()
	reader := exec.Command("sh", "-c", "sleep 0.05; wc -c")
	reader.Stdin = r
	var count strings.Builder
	reader.Stdout = &count
	if err := reader.Start(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	rc, err := w.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	slow := &directWriter{f: w, rc: rc, slowWrite: time.Millisecond}
	batch := []byte(strings.Repeat("x", 256<<10)) // more than the pipe holds
	if n, err := slow.Write(batch); n != len(batch) || err != nil {
		t.Fatalf("a write that waited: %d, %v", n, err)
	}
	if !slow.paused() {
		t.Fatal("a write that waited 50 ms in the kernel did not pause direct writes")
	}
	if until := time.Until(slow.pausedUntil); until < pauseAfterSlow-time.Second || until > pauseAfterSlow {
		t.Errorf("paused for %v, want %v", until, pauseAfterSlow)
	}
	if n, err := slow.Write(batch); n != len(batch) || err != nil { // through the file
		t.Fatalf("a write while paused: %d, %v", n, err)
	}
	w.Close()
	if err := reader.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(count.String()); got != fmt.Sprint(2*len(batch)) {
		t.Errorf("the reader got %s bytes, want %d", got, 2*len(batch))
	}
}

func TestDirectWriterReportsErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "access.log")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	readOnly, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	d := newDirectWriter(readOnly)
	if d == nil {
		t.Fatal("a regular file is not written directly")
	}
	var pe *os.PathError
	if n, err := d.Write([]byte("line\n")); n != 0 || !errors.As(err, &pe) || !errors.Is(err, syscall.EBADF) || pe.Path != path {
		t.Errorf("writing to a file opened for reading: %d, %v; want 0 and EBADF naming the file", n, err)
	}
	readOnly.Close()
	if _, err := d.Write([]byte("line\n")); !errors.Is(err, os.ErrClosed) {
		t.Errorf("writing to a closed file: %v, want os.ErrClosed", err)
	}
}

// createLog creates access.log in dir, closed when t ends, and returns it
// and its path.
func createLog(t *testing.T, dir string) (*os.File, string) {
	t.Helper()
	path := filepath.Join(dir, "access.log")
	file, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { file.Close() })
	return file, path
}

// paused reports whether d's writes go through os.File.Write now.
func (d *directWriter) paused() bool { return time.Now().Before(d.pausedUntil) }
