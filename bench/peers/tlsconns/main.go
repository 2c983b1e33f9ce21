// Command tlsconns is the load of the TLS-handshake scenarios of
// bench/peers (run.sh --tls): workers that each open a TLS connection,
// send one HTTP/1.1 request with "Connection: close", read the answer to
// its end and start again, for a fixed time. Each worker binds a source
// address of its own (127.0.0.2, 127.0.0.3, ...), so that per-client caps
// count one connection for it and no address runs out of ports.
//
// With -resume each worker keeps the session ticket of its last connection
// and offers it on the next (TLS 1.3 resumption, a PSK with a new key
// exchange but no certificate signature); without it every handshake is a
// full one. The key exchange is X25519 (see worker.run). The certificate is not verified: the server's signature is
// what the scenario measures, not the client's checks.
//
// Usage: tlsconns -addr HOST:PORT -workers N -duration D [-resume]
//
// It prints one JSON object: connections completed with a 200 answer
// ("ok"), how many of them resumed a session, errors (and the first one),
// and the seconds measured. Exit status: 0 when at least one connection
// completed, 1 when none did, 2 for bad flags.
package main

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"
)

// Result is what tlsconns prints.
type Result struct {
	OK         int64   `json:"ok"`
	Resumed    int64   `json:"resumed"`
	Errors     int64   `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	Seconds    float64 `json:"seconds"`
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("tlsconns", flag.ContinueOnError)
	addr := fs.String("addr", "", "HOST:PORT of the TLS server (required)")
	workers := fs.Int("workers", 16, "concurrent connections, each from its own source address (1..200)")
	duration := fs.Duration("duration", 10*time.Second, "how long to run (1s..15m)")
	resume := fs.Bool("resume", false, "offer each worker's last session ticket on its next connection")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *addr == "" || fs.NArg() > 0 || *workers < 1 || *workers > 200 || *duration < time.Second || *duration > 15*time.Minute {
		fmt.Fprintln(os.Stderr, "usage: tlsconns -addr HOST:PORT [-workers 1..200] [-duration 1s..15m] [-resume]")
		return 2
	}
	res := load(*addr, *workers, *duration, *resume)
	_ = json.NewEncoder(os.Stdout).Encode(res)
	if res.OK == 0 {
		return 1
	}
	return 0
}

// load runs the workers for d and sums their counts.
func load(addr string, workers int, d time.Duration, resume bool) Result {
	var mu sync.Mutex
	var res Result
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for i := range workers {
		src := netip.AddrFrom4([4]byte{127, 0, 0, byte(2 + i)})
		wg.Go(func() {
			w := worker{addr: addr, src: src, resume: resume}
			ok, resumed, errs, first := w.run(deadline)
			mu.Lock()
			defer mu.Unlock()
			res.OK += ok
			res.Resumed += resumed
			res.Errors += errs
			if res.FirstError == "" && first != nil {
				res.FirstError = first.Error()
			}
		})
	}
	wg.Wait()
	res.Seconds = time.Since(start).Seconds()
	return res
}

type worker struct {
	addr   string
	src    netip.Addr
	resume bool
}

// run opens connections one after another until deadline.
func (w worker) run(deadline time.Time) (ok, resumed, errs int64, first error) {
	conf := &tls.Config{
		InsecureSkipVerify: true, // loopback load: the server's cost is measured, not the client's checks
		NextProtos:         []string{"http/1.1"},
		MinVersion:         tls.VersionTLS13,
		// What wrk and h2load (OpenSSL 3.0) offer: no X25519MLKEM768,
		// which Go's servers would pick over X25519 and which costs them
		// about a third more CPU per handshake than nginx and HAProxy
		// (OpenSSL 3.0 has no ML-KEM) are asked to spend.
		CurvePreferences: []tls.CurveID{tls.X25519, tls.CurveP256},
	}
	if w.resume {
		conf.ClientSessionCache = tls.NewLRUClientSessionCache(1)
	}
	dialer := &net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(w.src, 0)), Deadline: deadline.Add(5 * time.Second)}
	req := "GET / HTTP/1.1\r\nHost: " + w.addr + "\r\nConnection: close\r\n\r\n"
	for time.Now().Before(deadline) {
		didResume, err := exchange(dialer, w.addr, conf, req)
		if err != nil {
			errs++
			if first == nil {
				first = err
			}
			continue
		}
		ok++
		if didResume {
			resumed++
		}
	}
	return ok, resumed, errs, first
}

// exchange makes one connection with one request and reports whether its
// handshake resumed a session.
func exchange(dialer *net.Dialer, addr string, conf *tls.Config, req string) (bool, error) {
	raw, err := dialer.Dial("tcp", addr)
	if err != nil {
		return false, fmt.Errorf("dial: %w", err)
	}
	c := tls.Client(raw, conf)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := c.Handshake(); err != nil {
		return false, fmt.Errorf("handshake: %w", err)
	}
	if _, err := io.WriteString(c, req); err != nil {
		return false, fmt.Errorf("write: %w", err)
	}
	br := bufio.NewReader(c)
	status, err := br.ReadString('\n')
	if err != nil {
		return false, fmt.Errorf("read status: %w", err)
	}
	if !strings.HasPrefix(status, "HTTP/1.1 200") {
		return false, fmt.Errorf("status %q", strings.TrimSpace(status))
	}
	// To the end: the session ticket of TLS 1.3 may follow the answer.
	if _, err := io.Copy(io.Discard, br); err != nil && !errors.Is(err, io.EOF) {
		return false, fmt.Errorf("read body: %w", err)
	}
	return c.ConnectionState().DidResume, nil
}
