// Command headflood measures what connections holding unfinished request
// heads cost the portcullis daemon in resident memory, and how much of it
// the daemon gives back once they close (see docs/deploy.md, "Memory after
// a burst"). For each environment given (GOGC and GOMEMLIMIT settings), it
// starts the daemon binary with a config of one plain listener on
// loopback, reads its VmRSS idle, opens -conns connections in batches of
// -batch, each sending -size bytes of a head without its end, reads VmRSS
// with all of them open (peak), closes them all, and reads VmRSS every
// second for -after. Traffic goes to loopback only; every wait is bounded.
//
// Usage: headflood -bin PATH [-conns 5000] [-batch 500] [-size 36352]
// [-after 10s] [-max-header-bytes N] ENV...
//
// where each ENV is a space-separated list of settings for the daemon's
// environment ("GOGC=400", "GOGC=100 GOMEMLIMIT=64MiB", "" for none). It
// prints one line per ENV.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

type options struct {
	bin            string
	conns, batch   int
	size           int
	after          time.Duration
	maxHeaderBytes int
}

func run(args []string) int {
	fs := flag.NewFlagSet("headflood", flag.ContinueOnError)
	var o options
	fs.StringVar(&o.bin, "bin", "", "the portcullis binary")
	fs.IntVar(&o.conns, "conns", 5000, "connections to hold at once")
	fs.IntVar(&o.batch, "batch", 500, "connections opened at once")
	fs.IntVar(&o.size, "size", 32<<10+4096-512, "bytes of unfinished head each connection sends")
	fs.DurationVar(&o.after, "after", 10*time.Second, "how long to watch VmRSS after the connections close")
	fs.IntVar(&o.maxHeaderBytes, "max-header-bytes", 0, "the listener's max_header_bytes (0: its default)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if o.bin == "" || fs.NArg() == 0 || o.conns < 1 || o.batch < 1 || o.size < 64 || o.after > time.Minute {
		fmt.Fprintln(os.Stderr, "usage: headflood -bin PATH [-conns N] [-batch N] [-size N] [-after D<=1m] ENV...")
		return 2
	}
	dir, err := os.MkdirTemp("", "headflood")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	fmt.Printf("%d connections, %d bytes of head each, in batches of %d\n", o.conns, o.size, o.batch)
	fmt.Printf("%-32s %10s %10s %10s %10s  %s\n", "environment", "idle MB", "peak MB", "closed MB", "+"+o.after.String()+" MB", "each second after close (MB)")
	for _, env := range fs.Args() {
		if err := measure(o, dir, env); err != nil {
			fmt.Fprintf(os.Stderr, "%q: %v\n", env, err)
			return 1
		}
	}
	return 0
}

// measure runs the daemon under env and prints its line.
func measure(o options, dir, env string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	extra := ""
	if o.maxHeaderBytes > 0 {
		extra = fmt.Sprintf("\n    max_header_bytes: %d", o.maxHeaderBytes)
	}
	cfgPath := filepath.Join(dir, "flood.yaml")
	cfg := fmt.Sprintf(`log: {level: error}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:%d"
    max_conns_per_client: -1
    read_header_timeout: 60s%s
    routes:
      - upstreams: ["http://127.0.0.1:9"]
`, port, extra)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, o.bin, "run", "--config", cfgPath)
	cmd.Env = append(withoutGC(os.Environ()), strings.Fields(env)...)
	cmd.Stdout, cmd.Stderr = nil, os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if err := waitListening(addr, 10*time.Second); err != nil {
		return err
	}
	time.Sleep(2 * time.Second) // settle: the idle level
	pid := cmd.Process.Pid
	idle, err := vmRSS(pid)
	if err != nil {
		return err
	}
	conns, err := flood(addr, o)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	if err != nil {
		return err
	}
	readIn, err := waitRead(port, o.conns, time.Minute)
	if err != nil {
		return err
	}
	peak, err := vmRSS(pid)
	if err != nil {
		return err
	}
	for _, c := range conns {
		_ = c.Close()
	}
	conns = nil
	time.Sleep(100 * time.Millisecond)
	closed, _ := vmRSS(pid)
	var trail []string
	var last int
	for range int(o.after / time.Second) {
		time.Sleep(time.Second)
		if last, err = vmRSS(pid); err != nil {
			return err
		}
		trail = append(trail, fmt.Sprintf("%.0f", mb(last)))
	}
	name := env
	if name == "" {
		name = "(binary's default)"
	}
	fmt.Printf("%-32s %10.1f %10.1f %10.1f %10.1f  %s (heads read in %v)\n", name, mb(idle), mb(peak), mb(closed), mb(last), strings.Join(trail, " "), readIn.Round(10*time.Millisecond))
	return nil
}

// flood opens o.conns connections to addr, o.batch at a time, each
// sending o.size bytes of head without its end, and returns them open.
func flood(addr string, o options) ([]net.Conn, error) {
	head := unfinishedHead(o.size)
	conns := make([]net.Conn, 0, o.conns)
	for len(conns) < o.conns {
		n := min(o.batch, o.conns-len(conns))
		batch := make([]net.Conn, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := net.DialTimeout("tcp", addr, 5*time.Second)
				if err != nil {
					errs[i] = err
					return
				}
				batch[i] = c
				_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
				_, errs[i] = c.Write(head)
			}()
		}
		wg.Wait()
		for _, c := range batch {
			if c != nil {
				conns = append(conns, c)
			}
		}
		if err := errors.Join(errs...); err != nil {
			return conns, fmt.Errorf("after %d connections: %w", len(conns), err)
		}
	}
	return conns, nil
}

// unfinishedHead returns n bytes of a GET head without the empty line
// that would end it, padded in fields of at most 4000 bytes.
func unfinishedHead(n int) []byte {
	var b bytes.Buffer
	b.WriteString("GET / HTTP/1.1\r\nHost: flood.test\r\n")
	for i := 0; b.Len() < n; i++ {
		name := fmt.Sprintf("X-Pad-%d: ", i)
		v := min(4000, n-b.Len()-len(name)-2)
		if v < 1 {
			b.WriteString(strings.Repeat("p", n-b.Len()))
			break
		}
		b.WriteString(name + strings.Repeat("p", v) + "\r\n")
	}
	return b.Bytes()[:n]
}

func withoutGC(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "GOGC=") && !strings.HasPrefix(kv, "GOMEMLIMIT=") {
			out = append(out, kv)
		}
	}
	return out
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func waitListening(addr string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			return c.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the daemon did not listen on %s: %w", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitRead waits until n established sockets have local port port (the
// daemon's side of the connections) and none has bytes not read yet, and
// returns how long that took.
func waitRead(port, n int, limit time.Duration) (time.Duration, error) {
	start := time.Now()
	want := fmt.Sprintf(":%04X", port)
	for {
		data, err := os.ReadFile("/proc/net/tcp")
		if err != nil {
			return 0, err
		}
		socks, queued := 0, 0
		for _, line := range strings.Split(string(data), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 5 || !strings.HasSuffix(f[1], want) || f[3] != "01" {
				continue
			}
			socks++
			if _, rx, _ := strings.Cut(f[4], ":"); strings.TrimLeft(rx, "0") != "" {
				queued++
			}
		}
		if socks >= n && queued == 0 {
			return time.Since(start), nil
		}
		if time.Since(start) > limit {
			return 0, fmt.Errorf("the daemon did not read the heads within %v: %d of %d sockets, %d with bytes unread", limit, socks, n, queued)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// vmRSS returns the resident set of process pid in bytes.
func vmRSS(pid int) (int, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmRSS in /proc/PID/status")
}

func mb(b int) float64 { return float64(b) / (1 << 20) }
