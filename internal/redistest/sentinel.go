package redistest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Kill stops the server with SIGKILL, as a crash would, and waits for it to
// exit. Killing a stopped server does nothing; Restart starts it again.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exit
	s.cmd = nil
}

// Signal sends sig to the server process (such as SIGSTOP and SIGCONT, to
// freeze it without closing its sockets). It does nothing on a stopped
// server.
func (s *Server) Signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// Sentinel timings of StartSentinel: the master is declared down after
// SentinelDownAfter without an answer, and a failover may take up to
// SentinelFailoverTimeout.
const (
	SentinelDownAfter       = 1000 * time.Millisecond
	SentinelFailoverTimeout = 3000 * time.Millisecond
)

// StartReplica starts a redis-server replicating master, and waits until
// master sees it connected.
func StartReplica(t testing.TB, master *Server) *Server {
	t.Helper()
	r := StartArgs(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port()))
	deadline := time.Now().Add(startWait)
	for !strings.Contains(command(t, master.Addr(), "INFO", "replication"), "connected_slaves:1") {
		if time.Now().After(deadline) {
			t.Fatalf("redistest: replica %s never connected to master %s", r.Addr(), master.Addr())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return r
}

// StartSentinel starts one Redis Sentinel (redis-server --sentinel) on a
// free loopback port, watching master under name with a quorum of 1 and
// short timings (SentinelDownAfter, SentinelFailoverTimeout), and waits
// until it knows replicas of master (0 means none expected). Its stop is
// registered with t.Cleanup.
func StartSentinel(t testing.TB, name string, master *Server, replicas int) *Server {
	t.Helper()
	bin := lookPath(t, "redis-server")
	s := &Server{t: t, bin: bin, port: freePort(t), dir: t.TempDir()}
	conf := filepath.Join(s.dir, "sentinel.conf")
	text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\n"+
		"sentinel monitor %s 127.0.0.1 %d 1\n"+
		"sentinel down-after-milliseconds %s %d\n"+
		"sentinel failover-timeout %s %d\n"+
		"sentinel parallel-syncs %s 1\n",
		s.port, s.dir, name, master.Port(), name, SentinelDownAfter.Milliseconds(),
		name, SentinelFailoverTimeout.Milliseconds(), name)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	s.conf = conf
	s.args = []string{"--sentinel"}
	t.Cleanup(s.Stop)
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(startWait)
	for replicas > 0 && countReplicas(command(t, s.Addr(), "SENTINEL", "replicas", name)) < replicas {
		if time.Now().After(deadline) {
			t.Fatalf("redistest: sentinel on %s never saw %d replicas of %s", s.Addr(), replicas, name)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return s
}

// MasterAddr asks the sentinel s which address is the master named name.
func (s *Server) MasterAddr(name string) string {
	s.t.Helper()
	r := command(s.t, s.Addr(), "SENTINEL", "get-master-addr-by-name", name)
	f := strings.Fields(r)
	if len(f) != 2 {
		return ""
	}
	return net.JoinHostPort(f[0], f[1])
}

// countReplicas counts the replicas in the reply of SENTINEL replicas:
// one "name" field each.
func countReplicas(reply string) int {
	n := 0
	for _, l := range strings.Split(reply, "\n") {
		if l == "name" {
			n++
		}
	}
	return n
}

// command sends one command in RESP and returns the reply's bulk strings
// and simple strings, one per line (enough for INFO, SENTINEL replies).
func command(t testing.TB, addr string, args ...string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return ""
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return ""
	}
	var out strings.Builder
	readReply(bufio.NewReader(c), &out)
	return out.String()
}

// readReply reads one RESP reply, writing its strings to out, one a line.
func readReply(r *bufio.Reader, out *strings.Builder) {
	line, err := r.ReadString('\n')
	if err != nil || len(line) < 3 {
		return
	}
	line = strings.TrimRight(line, "\r\n")
	switch line[0] {
	case '+', '-', ':':
		out.WriteString(line[1:] + "\n")
	case '$':
		n, _ := strconv.Atoi(line[1:])
		if n < 0 {
			return
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return
		}
		out.Write(buf[:n])
		out.WriteString("\n")
	case '*':
		n, _ := strconv.Atoi(line[1:])
		for range n {
			readReply(r, out)
		}
	}
}
