package redisstore_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/redistest"
	"github.com/seed-a07d1050/portcullis/limit"
	"github.com/seed-a07d1050/portcullis/limit/redisstore"
)

// A partition of one node: node a reaches Redis through a proxy that then
// drops every byte, node b directly. a's permits come back to the cluster
// within one lease (b takes them) while a decides on its own node share;
// when the partition heals, a's heartbeat writes back what it holds, so
// Redis counts what every node holds again within one heartbeat (the
// cluster is over its limit until a releases: the cost of on_error open).
func TestPartitionOfOneNode(t *testing.T) {
	srv := redistest.Start(t)
	px := redistest.NewProxy(t, srv.Addr())
	const lease = time.Second
	a := newNode(t, "", redisstore.Config{Client: newClient(t, px.Addr()), NodeID: "a", Lease: lease, Timeout: 100 * time.Millisecond,
		NodeShare: 0.5, BreakerBackoff: 200 * time.Millisecond}, limit.Config[string]{Policy: limit.Policy[string]{Permits: 4}})
	b := newNode(t, srv.Addr(), redisstore.Config{NodeID: "b", Lease: lease}, limit.Config[string]{Policy: limit.Policy[string]{Permits: 4}})
	pa := acquireN(t, a, "k", 2)
	pb := acquireN(t, b, "k", 2)
	if _, err := b.l.Acquire(context.Background(), "k"); !errors.Is(err, limit.ErrLimited) {
		t.Fatalf("b over the cluster limit before the partition: %v", err)
	}
	px.Blackhole(true)
	cut := time.Now()
	waitFor(t, "b to take a's permits", 3*lease, func() bool {
		if p, err := b.l.Acquire(context.Background(), "k"); err == nil {
			pb = append(pb, p)
		}
		return len(pb) == 4
	})
	t.Logf("a's permits came back to the cluster %v after the partition (lease %v)", time.Since(cut), lease)
	if took := time.Since(cut); took > lease+lease/2 {
		t.Errorf("a's permits came back after %v, lease %v", took, lease)
	}
	// a alone: node cap ceil(4 × 0.5) = 2, which it holds already.
	if _, err := a.l.Acquire(context.Background(), "k"); !errors.Is(err, limit.ErrLimited) {
		t.Fatalf("a over its node share during the partition: %v", err)
	}
	px.Blackhole(false)
	healed := time.Now()
	c := newClient(t, srv.Addr())
	waitFor(t, "Redis to count a's permits again", 3*lease, func() bool { return sameCounts(t, c, "k", a, b) })
	t.Logf("Redis counted a's permits again %v after the partition healed", time.Since(healed))
	releaseAll(pa)
	releaseAll(pb)
	waitFor(t, "counts back to zero", 3*lease, func() bool { return len(counts(t, c, "k")) == 0 })
}

// helperEnv names the Redis address a helper node process (started by
// TestSIGSTOPOfANodeHoldingPermits) counts on.
const helperEnv = "PORTCULLIS_REDISSTORE_HELPER_REDIS"

// TestMain runs the helper node of TestSIGSTOPOfANodeHoldingPermits when
// started as one, and the tests otherwise.
func TestMain(m *testing.M) {
	if addr := os.Getenv(helperEnv); addr != "" {
		helperNode(addr)
		return
	}
	os.Exit(m.Run())
}

// helperNode, run as a separate process, takes 3 permits of key "k" as node
// "stopped", says "held", and waits (at most 20 s) to be stopped,
// continued and killed.
func helperNode(addr string) {
	client, err := redisstore.NewClient(redisstore.ClientOptions{Addrs: []string{addr}})
	if err != nil {
		panic(err)
	}
	st, err := redisstore.New[string](redisstore.Config{Client: client, Prefix: testPrefix, NodeID: "stopped", Lease: time.Second, Timeout: 200 * time.Millisecond, Logger: quiet}, nil)
	if err != nil {
		panic(err)
	}
	l, err := limit.New(limit.Config[string]{Policy: limit.Policy[string]{Permits: 3}, Store: st})
	if err != nil {
		panic(err)
	}
	for range 3 {
		if _, err := l.Acquire(context.Background(), "k"); err != nil {
			panic(err)
		}
	}
	os.Stdout.WriteString("held\n")
	time.Sleep(20 * time.Second)
}

// A node process holding permits is frozen with SIGSTOP (its sockets stay
// open; it just stops renewing): the others get its permits within one
// lease. Continued with SIGCONT, it writes back what it still holds, and
// killed with SIGKILL, its permits come back within one lease again.
func TestSIGSTOPOfANodeHoldingPermits(t *testing.T) {
	srv := redistest.Start(t)
	const lease = time.Second
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+srv.Addr())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-exited
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "held" {
		t.Fatalf("helper node: %q %v", line, err)
	}
	b := newNode(t, srv.Addr(), redisstore.Config{NodeID: "b", Lease: lease}, limit.Config[string]{Policy: limit.Policy[string]{Permits: 3}})
	if _, err := b.l.Acquire(context.Background(), "k"); !errors.Is(err, limit.ErrLimited) {
		t.Fatalf("b over the cluster limit while the helper holds 3: %v", err)
	}
	// takeAll has b take the 3 permits within a bound and returns them.
	takeAll := func(what string) []limit.Permit[string] {
		var got []limit.Permit[string]
		start := time.Now()
		waitFor(t, what, 3*lease, func() bool {
			if p, err := b.l.Acquire(context.Background(), "k"); err == nil {
				got = append(got, p)
			}
			return len(got) == 3
		})
		t.Logf("%s: %v (lease %v)", what, time.Since(start), lease)
		if took := time.Since(start); took > lease+lease/2 {
			t.Errorf("%s took %v, lease %v", what, took, lease)
		}
		return got
	}
	_ = cmd.Process.Signal(syscall.SIGSTOP)
	got := takeAll("b takes the permits of the stopped node")
	releaseAll(got)
	c := newClient(t, srv.Addr())
	waitFor(t, "b's release", time.Second, func() bool { return counts(t, c, "k")["b"] == 0 })
	_ = cmd.Process.Signal(syscall.SIGCONT)
	waitFor(t, "the continued node to write back its 3 permits", 3*lease, func() bool { return counts(t, c, "k")["stopped"] == 3 })
	_ = cmd.Process.Kill()
	<-exited
	got = takeAll("b takes the permits of the killed node")
	releaseAll(got)
}
