package main

import (
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/seed-a07d1050/portcullis/internal/backend"
	"github.com/seed-a07d1050/portcullis/internal/daemon"
	"github.com/seed-a07d1050/portcullis/internal/sdnotify"
	"github.com/seed-a07d1050/portcullis/internal/sdnotify/sdnotifytest"
)

// startManaged runs args like startRun, with a service manager listening
// on a real notification socket (abstract, as systemd's own).
func startManaged(t *testing.T, args []string, sig *signals, logs io.Writer) (*daemon.Server, <-chan int, *sdnotifytest.Manager) {
	t.Helper()
	m := sdnotifytest.Listen(t, true)
	n, err := sdnotify.New(m.Socket)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan *daemon.Server, 1)
	e := env{stdout: io.Discard, stderr: logs, notify: sig.notify, manager: n,
		started: func(s *daemon.Server) { started <- s }}
	code := make(chan int, 1)
	go func() { code <- e.main(args) }()
	select {
	case s := <-started:
		return s, code, m
	case c := <-code:
		t.Fatalf("exited with %d before serving", c)
	case <-time.After(waitLimit):
		t.Fatal("did not start")
	}
	return nil, nil, nil
}

func monotonicMicros(t *testing.T) uint64 {
	t.Helper()
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	return uint64(ts.Sec)*1_000_000 + uint64(ts.Nsec)/1_000
}

// expect receives the next notification and checks that it sets key to
// value ("" for any value) and, if status is not empty, that its STATUS
// contains status.
func expect(t *testing.T, m *sdnotifytest.Manager, key, value, status string) sdnotifytest.Message {
	t.Helper()
	msg := m.Receive(t, waitLimit)
	if got, ok := msg.Get(key); !ok || (value != "" && got != value) {
		t.Fatalf("notification %q lacks %s=%s", msg.Fields, key, value)
	}
	if st, _ := msg.Get("STATUS"); !strings.Contains(st, status) {
		t.Errorf("notification %q: STATUS lacks %q", msg.Fields, status)
	}
	if msg.PID != int32(os.Getpid()) {
		t.Errorf("notification from PID %d, want the daemon's own, %d", msg.PID, os.Getpid())
	}
	return msg
}

// expectReloading checks a RELOADING=1 stamped after since, as systemd
// requires of a Type=notify-reload service.
func expectReloading(t *testing.T, m *sdnotifytest.Manager, since uint64) {
	t.Helper()
	msg := expect(t, m, "RELOADING", "1", "")
	v, _ := msg.Get("MONOTONIC_USEC")
	usec, err := strconv.ParseUint(v, 10, 64)
	if err != nil || usec < since {
		t.Errorf("RELOADING=1 with MONOTONIC_USEC=%q, want a CLOCK_MONOTONIC time after the signal (%d)", v, since)
	}
}

// The daemon tells systemd it is ready once it serves, brackets every
// SIGHUP with RELOADING=1 and READY=1 (applied or refused), and says
// STOPPING=1 at SIGTERM: the protocol of a Type=notify-reload unit.
func TestRunNotifiesTheServiceManager(t *testing.T) {
	b, err := backend.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cfg := func(permits int) string {
		return "listeners:\n  - name: web\n    protocol: http\n    listen: 127.0.0.1:0\n" +
			"    routes: [{name: r, upstreams: [\"" + b.URL() + "\"], limit: {permits: " + strconv.Itoa(permits) + "}}]\n"
	}
	file := writeFile(t, cfg(5))
	sig := &signals{}
	logs := &syncBuffer{}
	_, code, m := startManaged(t, []string{"run", "--config", file}, sig, logs)
	expect(t, m, "READY", "1", "serving 1 listener(s): web (http 127.0.0.1:0)")

	// A good file: RELOADING, then READY once applied.
	if err := os.WriteFile(file, []byte(cfg(2)), 0o600); err != nil {
		t.Fatal(err)
	}
	since := monotonicMicros(t)
	sig.send(syscall.SIGHUP)
	expectReloading(t, m, since)
	expect(t, m, "READY", "1", "serving 1 listener(s)")

	// A broken file: RELOADING, then READY (the old configuration serves)
	// with the refusal in the status line.
	if err := os.WriteFile(file, []byte("listeners: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	since = monotonicMicros(t)
	sig.send(syscall.SIGHUP)
	expectReloading(t, m, since)
	expect(t, m, "READY", "1", "reload refused")

	sig.send(syscall.SIGTERM)
	expect(t, m, "STOPPING", "1", "draining for up to 30s")
	if c := waitCode(t, code); c != exitOK {
		t.Fatalf("exit code %d, want 0", c)
	}
	m.ReceiveNone(t, 100*time.Millisecond)
	if strings.Contains(logs.String(), "notification failed") {
		t.Errorf("the daemon logged a failed notification:\n%s", logs.String())
	}
}

// Run from flags, a SIGHUP has nothing to reload, but systemctl reload
// still waits for its answer: RELOADING=1, then READY=1.
func TestRunFromFlagsAnswersAReloadRequest(t *testing.T) {
	sig := &signals{}
	_, code, m := startManaged(t, []string{"run", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1"}, sig, io.Discard)
	expect(t, m, "READY", "1", "serving 1 listener(s)")
	since := monotonicMicros(t)
	sig.send(syscall.SIGHUP)
	expectReloading(t, m, since)
	expect(t, m, "READY", "1", "SIGHUP ignored")
	sig.send(syscall.SIGINT)
	expect(t, m, "STOPPING", "1", "draining")
	if c := waitCode(t, code); c != exitOK {
		t.Fatalf("exit code %d, want 0", c)
	}
}

// A manager that went away, or a NOTIFY_SOCKET that cannot be used, costs
// a logged warning, never the service.
func TestRunServesWithoutAUsableManager(t *testing.T) {
	gone, err := sdnotify.New(t.TempDir() + "/no-such-socket")
	if err != nil {
		t.Fatal(err)
	}
	_, badErr := sdnotify.FromEnv(func(string) string { return "relative/notify" })
	tests := []struct {
		name    string
		manager *sdnotify.Notifier
		err     error
		want    string
	}{
		{"socket gone", gone, nil, "service manager notification failed"},
		{"bad NOTIFY_SOCKET", nil, badErr, "not notifying the service manager"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sig := &signals{}
			logs := &syncBuffer{}
			started := make(chan *daemon.Server, 1)
			e := env{stdout: io.Discard, stderr: logs, notify: sig.notify, manager: tt.manager, managerErr: tt.err,
				started: func(s *daemon.Server) { started <- s }}
			code := make(chan int, 1)
			go func() { code <- e.main([]string{"run", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1"}) }()
			select {
			case <-started:
			case c := <-code:
				t.Fatalf("exited with %d instead of serving", c)
			case <-time.After(waitLimit):
				t.Fatal("did not start")
			}
			sig.send(syscall.SIGTERM)
			if c := waitCode(t, code); c != exitOK {
				t.Fatalf("exit code %d", c)
			}
			if !strings.Contains(logs.String(), tt.want) {
				t.Errorf("log lacks %q:\n%s", tt.want, logs.String())
			}
		})
	}
}
