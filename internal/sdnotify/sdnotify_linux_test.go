package sdnotify_test

import (
	"errors"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/seed-a07d1050/portcullis/internal/sdnotify"
	"github.com/seed-a07d1050/portcullis/internal/sdnotify/sdnotifytest"
)

const wait = 10 * time.Second

func monotonicNow(t *testing.T) uint64 {
	t.Helper()
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	return uint64(ts.Sec)*1_000_000 + uint64(ts.Nsec)/1_000
}

// Each state reaches a real notification socket, path or abstract, as the
// exact lines systemd parses, from this process.
func TestNotificationsReachTheManager(t *testing.T) {
	for _, abstract := range []bool{false, true} {
		t.Run(map[bool]string{false: "path", true: "abstract"}[abstract], func(t *testing.T) {
			m := sdnotifytest.Listen(t, abstract)
			n, err := sdnotify.FromEnv(func(k string) string {
				if k == sdnotify.EnvSocket {
					return m.Socket
				}
				return ""
			})
			if err != nil || n == nil {
				t.Fatalf("FromEnv(%q) = %v, %v", m.Socket, n, err)
			}

			check := func(msg sdnotifytest.Message, want ...string) {
				t.Helper()
				if !slices.Equal(msg.Fields, want) {
					t.Errorf("fields %q, want %q", msg.Fields, want)
				}
				if msg.PID != int32(os.Getpid()) {
					t.Errorf("sender PID %d, want this process, %d (systemd's NotifyAccess=main checks it)", msg.PID, os.Getpid())
				}
			}
			if err := n.Ready("serving 2 listeners"); err != nil {
				t.Fatal(err)
			}
			check(m.Receive(t, wait), "READY=1", "STATUS=serving 2 listeners")

			before := monotonicNow(t)
			if err := n.Reloading(""); err != nil {
				t.Fatal(err)
			}
			after := monotonicNow(t)
			msg := m.Receive(t, wait)
			usec, ok := msg.Get("MONOTONIC_USEC")
			check(msg, "RELOADING=1", "MONOTONIC_USEC="+usec)
			got, err := strconv.ParseUint(usec, 10, 64)
			if !ok || err != nil || got < before || got > after {
				t.Errorf("MONOTONIC_USEC=%q, want CLOCK_MONOTONIC in µs between %d and %d", usec, before, after)
			}

			if err := n.Stopping("draining\nfor 30s"); err != nil {
				t.Fatal(err)
			}
			check(m.Receive(t, wait), "STOPPING=1", "STATUS=draining for 30s")

			if err := n.Status("reload refused: listeners[0].listen"); err != nil {
				t.Fatal(err)
			}
			check(m.Receive(t, wait), "STATUS=reload refused: listeners[0].listen")
		})
	}
}

// A manager that is gone is an error, not a hang or a panic.
func TestManagerGone(t *testing.T) {
	m := sdnotifytest.Listen(t, false)
	n, err := sdnotify.New(m.Socket)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(m.Socket); err != nil {
		t.Fatal(err)
	}
	if err := n.Ready(""); err == nil {
		t.Fatal("Ready to a removed socket succeeded")
	}
}

// A manager that stops reading cannot block the daemon: once its queue is
// full, a send gives up after the send timeout.
func TestManagerNotReading(t *testing.T) {
	defer sdnotify.SetSendTimeout(100 * time.Millisecond)()
	m := sdnotifytest.Listen(t, true)
	n, err := sdnotify.New(m.Socket)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		// The kernel queues a bounded number of datagrams per socket
		// (net.unix.max_dgram_qlen, 512 by default); 100000 is far more.
		for range 100000 {
			if err := n.Status("filling the queue"); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("sends to a socket nobody reads ended with %v, want the send timeout", err)
		}
	case <-time.After(wait):
		t.Fatal("a send to a full socket blocked past the send timeout")
	}
}
