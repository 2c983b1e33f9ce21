// Package sdnotify tells the service manager what the daemon is doing, over
// systemd's notification protocol: one datagram of "KEY=VALUE" lines sent to
// the unix datagram socket that the manager names in $NOTIFY_SOCKET.
//
// It covers what a Type=notify-reload service needs: READY=1 once the daemon
// serves, RELOADING=1 with MONOTONIC_USEC when it starts applying a new
// configuration (then READY=1 again when done), STOPPING=1 when it starts
// draining, and STATUS= lines a human reads in "systemctl status". The
// protocol is described in sd_notify(3); it needs no library, and this
// package uses none.
//
// A nil *Notifier is valid and sends nothing: a daemon not started by a
// service manager has no $NOTIFY_SOCKET, and calls it the same way.
package sdnotify

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// EnvSocket is the environment variable naming the manager's socket.
const EnvSocket = "NOTIFY_SOCKET"

// sendTimeout bounds one send. A manager that stopped reading would otherwise
// block the daemon's reload or shutdown on a full socket buffer. Tests
// shorten it.
var sendTimeout = 2 * time.Second

// ErrBadSocket is wrapped by every error about a $NOTIFY_SOCKET value the
// package cannot use.
var ErrBadSocket = errors.New("sdnotify: unusable NOTIFY_SOCKET")

// A Notifier sends state changes to one service manager socket. Its methods
// are safe for concurrent use; each one sends one datagram.
type Notifier struct {
	addr *net.UnixAddr
}

// FromEnv returns a Notifier for the socket getenv(EnvSocket) names, nil and
// no error when the variable is unset or empty (no service manager is
// listening), and an error wrapping [ErrBadSocket] for a value that is
// neither an absolute path nor an abstract socket name.
func FromEnv(getenv func(string) string) (*Notifier, error) {
	s := getenv(EnvSocket)
	if s == "" {
		return nil, nil
	}
	return New(s)
}

// New returns a Notifier for socket: an absolute file system path
// ("/run/systemd/notify") or, on Linux, an abstract socket name written with
// a leading "@" ("@/org/freedesktop/systemd1/notify"). Anything else,
// including systemd's "vsock:" addresses for virtual machines, is an error
// wrapping [ErrBadSocket]. New does not touch the socket: a manager that is
// gone shows as an error from the first send.
func New(socket string) (*Notifier, error) {
	switch {
	case strings.HasPrefix(socket, "/"):
	case strings.HasPrefix(socket, "@") && len(socket) > 1:
		// Go's net package turns a leading '@' into the NUL byte that
		// names an abstract socket on Linux.
	default:
		return nil, fmt.Errorf("%w: want an absolute path or an @abstract name (got %q)", ErrBadSocket, socket)
	}
	return &Notifier{addr: &net.UnixAddr{Name: socket, Net: "unixgram"}}, nil
}

// Socket returns the socket the Notifier sends to, "" for a nil Notifier.
func (n *Notifier) Socket() string {
	if n == nil {
		return ""
	}
	return n.addr.Name
}

// Ready tells the manager the daemon serves: after start-up, and after a
// reload (whether the reload was applied or refused, the daemon serves).
// status, when not empty, becomes the STATUS= line.
func (n *Notifier) Ready(status string) error {
	return n.Send(withStatus([]string{"READY=1"}, status)...)
}

// Reloading tells the manager a reload has begun. It carries the
// CLOCK_MONOTONIC time in microseconds, which a Type=notify-reload service
// must send: systemd ends a reload only on a RELOADING=1 stamped after it
// sent its reload signal. Send [Notifier.Ready] once the reload is over.
func (n *Notifier) Reloading(status string) error {
	if n == nil {
		return nil
	}
	fields := []string{"RELOADING=1"}
	if usec, ok := monotonicMicros(); ok {
		fields = append(fields, "MONOTONIC_USEC="+strconv.FormatUint(usec, 10))
	}
	return n.Send(withStatus(fields, status)...)
}

// Stopping tells the manager the daemon is shutting down.
func (n *Notifier) Stopping(status string) error {
	return n.Send(withStatus([]string{"STOPPING=1"}, status)...)
}

// Status sets the free-form status line "systemctl status" shows.
func (n *Notifier) Status(status string) error {
	return n.Send(withStatus(nil, status)...)
}

// Send sends fields, each "KEY=VALUE", as one datagram. A field without "="
// or with a newline is an error and nothing is sent. A nil Notifier, or no
// fields, sends nothing and returns nil. An error is returned when the
// socket cannot be reached or the send does not finish within two seconds.
func (n *Notifier) Send(fields ...string) error {
	if n == nil || len(fields) == 0 {
		return nil
	}
	var msg strings.Builder
	for _, f := range fields {
		key, _, ok := strings.Cut(f, "=")
		if !ok || key == "" || strings.ContainsAny(f, "\n\x00") {
			return fmt.Errorf("sdnotify: field %q is not KEY=VALUE on one line", f)
		}
		msg.WriteString(f)
		msg.WriteByte('\n')
	}
	conn, err := net.DialUnix("unixgram", nil, n.addr)
	if err != nil {
		return fmt.Errorf("sdnotify: connect to %s: %w", n.addr.Name, err)
	}
	defer conn.Close()
	if err := conn.SetWriteDeadline(time.Now().Add(sendTimeout)); err != nil {
		return fmt.Errorf("sdnotify: %w", err)
	}
	if _, err := conn.Write([]byte(msg.String())); err != nil {
		return fmt.Errorf("sdnotify: send to %s: %w", n.addr.Name, err)
	}
	return nil
}

// withStatus appends a STATUS= field for status, made one line, unless it is
// empty.
func withStatus(fields []string, status string) []string {
	if status == "" {
		return fields
	}
	status = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == 0 {
			return ' '
		}
		return r
	}, status)
	return append(fields, "STATUS="+status)
}
