// Package redistest starts throwaway redis-server processes for tests: one
// per call, on a free loopback port, with no persistence, stopped by its PID
// when the test ends.
//
// Without a redis-server on PATH, [Start] skips the test with a message that
// says how to install one; when the environment variable CI is "true" it
// fails the test instead, so that a CI run cannot pass by skipping.
package redistest

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startWait bounds how long Start and Restart wait for the server to accept
// connections, and stopWait how long Stop waits for it to exit.
const (
	startWait = 10 * time.Second
	stopWait  = 10 * time.Second
)

// installHint is what a developer without redis-server is told.
const installHint = "install it with `apt-get install -y redis-server` (Debian/Ubuntu) " +
	"or `brew install redis`; the tests start their own server and leave the system service alone"

// A Server is one redis-server process started by a test. Its methods are
// safe for concurrent use.
type Server struct {
	t    testing.TB
	bin  string
	port int
	dir  string
	args []string    // extra redis-server arguments
	conf string      // a configuration file, the first argument; "" none
	tls  *tls.Config // TLS on the port (no plain port); nil plain TCP

	mu   sync.Mutex
	cmd  *exec.Cmd
	exit chan struct{} // closed when cmd has been waited for
}

// Start starts a redis-server on 127.0.0.1 at a free port and registers its
// stop with t.Cleanup. It skips t (or fails it when CI=true) if no
// redis-server is on PATH, and fails t if the server does not come up.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartArgs(t)
}

// StartTLS starts a redis-server that speaks only TLS on its port, with
// the certificate and key in certFile and keyFile, not asking clients for
// certificates; clientTLS is how Start checks it is up (trusting that
// certificate).
func StartTLS(t testing.TB, certFile, keyFile string, clientTLS *tls.Config) *Server {
	t.Helper()
	bin := lookPath(t, "redis-server")
	s := &Server{t: t, bin: bin, port: freePort(t), dir: t.TempDir(), tls: clientTLS}
	s.args = []string{"--port", "0", "--tls-port", strconv.Itoa(s.port), "--tls-cert-file", certFile,
		"--tls-key-file", keyFile, "--tls-auth-clients", "no"}
	t.Cleanup(s.Stop)
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	return s
}

// StartArgs is Start with extra redis-server arguments, such as
// "--requirepass", "secret" or "--replicaof", "127.0.0.1", "6379"; they
// are kept for Restart.
func StartArgs(t testing.TB, args ...string) *Server {
	t.Helper()
	bin := lookPath(t, "redis-server")
	s := &Server{t: t, bin: bin, port: freePort(t), dir: t.TempDir(), args: args}
	t.Cleanup(s.Stop)
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	return s
}

// Addr returns the server's address, "127.0.0.1:port". It stays the same
// across Stop and Restart.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port returns the server's TCP port.
func (s *Server) Port() int { return s.port }

// Running reports whether the server process is running.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// Stop stops the server by its PID (SIGTERM, then SIGKILL if it has not
// exited within a few seconds) and waits for it to exit. Stopping a stopped
// server does nothing. The data is lost: the server runs without
// persistence.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exit:
	case <-time.After(stopWait):
		_ = s.cmd.Process.Kill()
		<-s.exit
	}
	s.cmd = nil
}

// Restart starts the server again on the same port after [Server.Stop],
// with empty data. It fails the test if the server does not come up; on a
// running server it fails the test too.
func (s *Server) Restart() {
	s.t.Helper()
	if s.Running() {
		s.t.Fatal("redistest: Restart of a running server")
	}
	if err := s.start(); err != nil {
		s.t.Fatal(err)
	}
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd := exec.Command(s.bin,
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--loglevel", "warning",
	)
	cmd.Args = append(cmd.Args, s.args...)
	if s.conf != "" {
		cmd.Args = append([]string{cmd.Args[0], s.conf}, cmd.Args[1:]...)
	}
	var log logTail
	cmd.Stdout = &log
	cmd.Stderr = &log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redistest: start redis-server: %w", err)
	}
	exit := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exit)
	}()
	if err := waitReady(s.Addr(), s.tls, exit); err != nil {
		_ = cmd.Process.Kill()
		<-exit
		return fmt.Errorf("redistest: redis-server on port %d: %w; output:\n%s", s.port, err, log.String())
	}
	s.cmd, s.exit = cmd, exit
	return nil
}

// waitReady waits until the server answers PING, it exits, or startWait
// passes.
func waitReady(addr string, tc *tls.Config, exit <-chan struct{}) error {
	deadline := time.Now().Add(startWait)
	for time.Now().Before(deadline) {
		select {
		case <-exit:
			return errors.New("server exited at start")
		default:
		}
		if ping(addr, tc) == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("no answer to PING within %v", startWait)
}

// ping sends one inline PING and expects +PONG (or -NOAUTH).
func ping(addr string, tc *tls.Config) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var d net.Dialer
	var c net.Conn
	var err error
	if tc != nil {
		c, err = (&tls.Dialer{NetDialer: &d, Config: tc}).DialContext(ctx, "tcp", addr)
	} else {
		c, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	// A server with requirepass answers NOAUTH: it is up all the same.
	if !strings.HasPrefix(line, "+PONG") && !strings.HasPrefix(line, "-NOAUTH") {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// lookPath finds bin on PATH, or skips t (fails it when CI=true).
func lookPath(t testing.TB, bin string) string {
	t.Helper()
	p, err := exec.LookPath(bin)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redistest: no %s on PATH (CI=true, so this fails instead of skipping); %s", bin, installHint)
		}
		t.Skipf("redistest: no %s on PATH; %s", bin, installHint)
	}
	return p
}

// freePort asks the kernel for a free loopback port. Another process could
// take it before redis-server binds it; Start then fails clearly.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: find a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// logTail keeps the last few KiB a server wrote, for error messages.
type logTail struct {
	mu  sync.Mutex
	buf []byte
}

const logTailMax = 4 << 10

func (l *logTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	if len(l.buf) > logTailMax {
		l.buf = append(l.buf[:0], l.buf[len(l.buf)-logTailMax:]...)
	}
	return len(p), nil
}

func (l *logTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.buf)
}
