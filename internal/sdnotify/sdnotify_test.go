package sdnotify

import (
	"errors"
	"testing"
)

func TestFromEnvWithoutManager(t *testing.T) {
	n, err := FromEnv(func(string) string { return "" })
	if n != nil || err != nil {
		t.Fatalf("FromEnv with NOTIFY_SOCKET unset = %v, %v; want nil, nil", n, err)
	}
	// A nil Notifier is what a daemon outside a service manager calls.
	for name, call := range map[string]func() error{
		"Ready":     func() error { return n.Ready("serving") },
		"Reloading": func() error { return n.Reloading("reloading") },
		"Stopping":  func() error { return n.Stopping("draining") },
		"Status":    func() error { return n.Status("x") },
		"Send":      func() error { return n.Send("A=1") },
	} {
		if err := call(); err != nil {
			t.Errorf("nil Notifier: %s = %v, want nil", name, err)
		}
	}
	if s := n.Socket(); s != "" {
		t.Errorf("nil Notifier: Socket = %q", s)
	}
}

func TestNewRefusesWhatItCannotReach(t *testing.T) {
	for _, s := range []string{"relative/notify", "notify", "@", "vsock:2:9999", "vsock-stream:2:9999", " /run/notify"} {
		n, err := FromEnv(func(k string) string {
			if k == EnvSocket {
				return s
			}
			return ""
		})
		if !errors.Is(err, ErrBadSocket) || n != nil {
			t.Errorf("NOTIFY_SOCKET=%q: %v, %v; want an ErrBadSocket", s, n, err)
		}
	}
	for _, s := range []string{"/run/systemd/notify", "@/org/freedesktop/systemd1/notify"} {
		if n, err := New(s); err != nil || n.Socket() != s {
			t.Errorf("New(%q) = %v, %v", s, n, err)
		}
	}
}

func TestSendRefusesMalformedFields(t *testing.T) {
	// The socket does not exist: a field refused before any send says so,
	// not "connect".
	n, err := New("/nonexistent/notify")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"READY", "=1", "STATUS=a\nREADY=1", "X=\x00"} {
		if err := n.Send(f); err == nil || errors.Is(err, ErrBadSocket) {
			t.Errorf("Send(%q) = %v, want a field error", f, err)
		}
	}
	if err := n.Send("READY=1"); err == nil {
		t.Error("Send to a socket that does not exist succeeded")
	}
}
