package redistest_test

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/redistest"
)

func TestStartStopRestart(t *testing.T) {
	s := redistest.Start(t)
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") || !s.Running() {
		t.Fatalf("Addr %q, Running %v", s.Addr(), s.Running())
	}
	setGet(t, s.Addr(), true)
	s.Stop()
	if s.Running() {
		t.Fatal("still running after Stop")
	}
	if c, err := net.DialTimeout("tcp", s.Addr(), time.Second); err == nil {
		c.Close()
		t.Fatal("port still accepts connections after Stop")
	}
	s.Stop() // a second Stop does nothing
	s.Restart()
	// The data did not survive: no persistence.
	setGet(t, s.Addr(), false)
}

// setGet checks the key "k" is present (want true) or absent, then sets it.
func setGet(t *testing.T, addr string, set bool) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	r := bufio.NewReader(c)
	send := func(cmd string) string {
		if _, err := c.Write([]byte(cmd + "\r\n")); err != nil {
			t.Fatal(err)
		}
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		return line
	}
	if set {
		if got := send("SET k v"); got != "+OK\r\n" {
			t.Fatalf("SET: %q", got)
		}
		if got := send("EXISTS k"); got != ":1\r\n" {
			t.Fatalf("EXISTS after SET: %q", got)
		}
		return
	}
	if got := send("EXISTS k"); got != ":0\r\n" {
		t.Fatalf("EXISTS on a restarted server: %q", got)
	}
}

// Without redis-server on PATH, Start skips with an install hint, or fails
// when CI=true. The test runs itself in a child process with an empty PATH.
func TestNoRedisOnPath(t *testing.T) {
	if os.Getenv("REDISTEST_CHILD") == "1" {
		redistest.Start(t)
		return
	}
	for _, tc := range []struct {
		name     string
		ci       string
		wantFail bool
		wantText string
	}{
		{"skips with a hint", "", false, "--- SKIP"},
		{"fails under CI", "true", true, "CI=true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestNoRedisOnPath$", "-test.v")
			var env []string
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "CI=") {
					env = append(env, kv)
				}
			}
			cmd.Env = append(env, "PATH="+t.TempDir(), "REDISTEST_CHILD=1", "CI="+tc.ci)
			out, err := cmd.CombinedOutput()
			if (err != nil) != tc.wantFail {
				t.Fatalf("child failed = %v, want %v; output:\n%s", err != nil, tc.wantFail, out)
			}
			if !strings.Contains(string(out), tc.wantText) || !strings.Contains(string(out), "apt-get install -y redis-server") {
				t.Fatalf("output lacks %q or the install hint:\n%s", tc.wantText, out)
			}
		})
	}
}
