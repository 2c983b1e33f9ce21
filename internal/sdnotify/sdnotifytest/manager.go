//go:build linux

// Package sdnotifytest plays the service manager in tests: it listens on a
// real unix datagram socket, as systemd does on $NOTIFY_SOCKET, and hands
// each notification it receives to the test together with the sender's
// process ID, which the kernel attaches to the datagram.
package sdnotifytest

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A Message is one notification: its fields in the order sent, and the
// process ID of its sender.
type Message struct {
	Fields []string // "KEY=VALUE", in order
	PID    int32
}

// Get returns the value of the last field named key, and whether there is one.
func (m Message) Get(key string) (string, bool) {
	val, found := "", false
	for _, f := range m.Fields {
		if k, v, ok := strings.Cut(f, "="); ok && k == key {
			val, found = v, true
		}
	}
	return val, found
}

// A Manager is a listening notification socket.
type Manager struct {
	// Socket is the value for $NOTIFY_SOCKET: a path, or "@name" for an
	// abstract socket.
	Socket string
	conn   *net.UnixConn
}

// Listen opens a notification socket, abstract or in t's temporary
// directory, and closes it when the test ends. Like systemd it asks the
// kernel for the sender's credentials on every datagram.
func Listen(t testing.TB, abstract bool) *Manager {
	t.Helper()
	name := filepath.Join(t.TempDir(), "notify")
	if abstract {
		var b [8]byte
		_, _ = rand.Read(b[:])
		name = "@portcullis-test/" + hex.EncodeToString(b[:])
	}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatalf("sdnotifytest: listen on %s: %v", name, err)
	}
	t.Cleanup(func() { conn.Close() })
	raw, err := conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PASSCRED, 1)
	}); err != nil || serr != nil {
		t.Fatalf("sdnotifytest: SO_PASSCRED: %v %v", err, serr)
	}
	return &Manager{Socket: name, conn: conn}
}

// Receive returns the next notification, failing t if none comes within
// wait.
func (m *Manager) Receive(t testing.TB, wait time.Duration) Message {
	t.Helper()
	msg, err := m.receive(wait)
	if err != nil {
		t.Fatalf("sdnotifytest: no notification within %v: %v", wait, err)
	}
	return msg
}

// ReceiveNone fails t if a notification arrives within wait.
func (m *Manager) ReceiveNone(t testing.TB, wait time.Duration) {
	t.Helper()
	if msg, err := m.receive(wait); err == nil {
		t.Fatalf("sdnotifytest: unexpected notification %q", msg.Fields)
	}
}

func (m *Manager) receive(wait time.Duration) (Message, error) {
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(unix.SizeofUcred))
	if err := m.conn.SetReadDeadline(time.Now().Add(wait)); err != nil {
		return Message{}, err
	}
	n, oobn, _, _, err := m.conn.ReadMsgUnix(buf, oob)
	if err != nil {
		return Message{}, err
	}
	msg := Message{PID: -1, Fields: strings.Split(strings.TrimSuffix(string(buf[:n]), "\n"), "\n")}
	if cmsgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, c := range cmsgs {
			if cred, err := unix.ParseUnixCredentials(&c); err == nil {
				msg.PID = cred.Pid
			}
		}
	}
	return msg, nil
}
