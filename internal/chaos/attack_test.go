package chaos

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// actionLimit bounds one attacker action; every socket it opens has this
// deadline at most.
const actionLimit = 3 * time.Second

// tally counts what the attackers did, by action and outcome, and collects
// violations: what an attacker saw that the daemon must never do.
type tally struct {
	mu         sync.Mutex
	counts     map[string]int
	violations []string
}

func newTally() *tally { return &tally{counts: make(map[string]int)} }

func (t *tally) add(action, outcome string) {
	t.mu.Lock()
	t.counts[action]++
	t.counts[action+" → "+outcome]++
	t.mu.Unlock()
}

func (t *tally) violate(format string, args ...any) {
	t.mu.Lock()
	if len(t.violations) < 50 {
		t.violations = append(t.violations, fmt.Sprintf(format, args...))
	}
	t.mu.Unlock()
}

func (t *tally) count(name string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.counts[name]
}

// summary lists the counts, one per line, sorted.
func (t *tally) summary() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := make([]string, 0, len(t.counts))
	for k, n := range t.counts {
		lines = append(lines, fmt.Sprintf("  %-48s %6d", k, n))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// attacker is one abusive client. It owns a few source addresses no other
// client uses, so that what the per-client caps do to it can be checked,
// and it runs one random action at a time until its context ends.
type attacker struct {
	env   *env
	rng   *rand.Rand
	addrs []string
	tally *tally
	plain *http.Client // HTTP/1.1 to the web listener from addrs[0]
	h2    *http.Client // HTTP/2 to the tls listener from addrs[0]
}

func newAttacker(e *env, rng *rand.Rand, addrs []string, t *tally) *attacker {
	return &attacker{
		env: e, rng: rng, addrs: addrs, tally: t,
		plain: clientFrom(addrs[0], nil),
		h2:    clientFrom(addrs[0], e.tlsConfig("h2")),
	}
}

// action is one kind of abuse. run returns a short outcome for the tally.
type action struct {
	name   string
	weight int
	run    func(a *attacker, ctx context.Context) string
}

// actions is what attackers choose from, by weight.
var actions = []action{
	{"reset mid-head", 3, (*attacker).resetMidHead},
	{"reset mid-response", 3, (*attacker).resetMidResponse},
	{"half-open", 3, (*attacker).halfOpen},
	{"tls garbage", 2, (*attacker).tlsGarbage},
	{"tls handshake cut", 2, (*attacker).tlsHandshakeCut},
	{"slowloris", 2, (*attacker).slowloris},
	{"cancelled upload", 3, (*attacker).cancelledUpload},
	{"queue wait cancelled", 3, (*attacker).queueCancel},
	{"websocket dropped", 3, (*attacker).wsDrop},
	{"panicking handler", 3, (*attacker).panicking},
	{"raw tcp abuse", 2, (*attacker).rawTCP},
	{"connection flood", 1, (*attacker).connFlood},
}

// run performs random actions until ctx ends; each is bounded by
// actionLimit and by ctx.
func (a *attacker) run(ctx context.Context) {
	total := 0
	for _, ac := range actions {
		total += ac.weight
	}
	defer a.plain.CloseIdleConnections()
	defer a.h2.CloseIdleConnections()
	for ctx.Err() == nil {
		n := a.rng.IntN(total)
		var ac action
		for _, ac = range actions {
			if n < ac.weight {
				break
			}
			n -= ac.weight
		}
		// The action draws from a stream of its own, so that the sequence
		// of actions a seed replays does not depend on how many draws an
		// action made (slowloris rounds, for one, follow the clock).
		b := *a
		b.rng = rand.New(rand.NewPCG(a.rng.Uint64(), a.rng.Uint64()))
		actx, cancel := context.WithTimeout(ctx, actionLimit)
		got := ac.run(&b, actx)
		cancel()
		if ctx.Err() == nil { // outcomes cut by the end of the run say nothing
			a.tally.add(ac.name, got)
		}
	}
}

// between returns a random duration in [lo, hi).
func (a *attacker) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(a.rng.Int64N(int64(hi-lo)))
}

func (a *attacker) pick(choices ...string) string { return choices[a.rng.IntN(len(choices))] }

func (a *attacker) src() string { return a.addrs[a.rng.IntN(len(a.addrs))] }

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// conn is an attacker's connection: the TCP socket and what speaks over it
// (the socket itself, or TLS on it).
type conn struct {
	tcp *net.TCPConn
	net.Conn
}

// reset closes the socket with an RST (SO_LINGER 0).
func (c *conn) reset() {
	_ = c.tcp.SetLinger(0)
	_ = c.tcp.Close()
}

// dialFrom connects from source address src to addr, with ctx's deadline
// on the socket.
func dialFrom(ctx context.Context, src, addr string) (*net.TCPConn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	tc := c.(*net.TCPConn)
	if dl, ok := ctx.Deadline(); ok {
		_ = tc.SetDeadline(dl)
	}
	return tc, nil
}

// open connects to the daemon listener ln ("web", "tls" or "raw") from
// src; for "tls" it completes an HTTP/1.1 TLS handshake.
func (a *attacker) open(ctx context.Context, ln, src string) (*conn, error) {
	return a.openAt(ctx, ln, a.env.addr(ln), src)
}

// openAt is open to the address addr of listener ln, which a caller
// opening several connections reads once: a reload may move a listener,
// and the per-client cap counts per socket.
func (a *attacker) openAt(ctx context.Context, ln, addr, src string) (*conn, error) {
	tc, err := dialFrom(ctx, src, addr)
	if err != nil {
		return nil, err
	}
	c := &conn{tcp: tc, Conn: tc}
	if ln == "tls" {
		t := tls.Client(tc, a.env.tlsConfig("http/1.1"))
		if err := t.HandshakeContext(ctx); err != nil {
			c.reset()
			return nil, fmt.Errorf("handshake: %w", err)
		}
		c.Conn = t
	}
	return c, nil
}

// head returns a complete request head for a random route.
func (a *attacker) head() string {
	switch a.rng.IntN(4) {
	case 0:
		return requestHead("GET", hostSteady, "/")
	case 1:
		return requestHead("GET", hostQueue, fmt.Sprintf("/slow?ms=%d", 50+a.rng.IntN(400)))
	case 2:
		return requestHead("GET", hostFlaky, "/bytes?n=65536")
	default:
		return requestHead("GET", hostLib, fmt.Sprintf("/?ms=%d", a.rng.IntN(200)))
	}
}

func requestHead(method, host, path string, extra ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: chaos\r\n", method, path, host)
	for _, h := range extra {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("\r\n")
	return b.String()
}

// outcome names an error for the tally.
func outcome(err error) string {
	var ne net.Error
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "eof"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "reset by daemon"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case strings.HasPrefix(err.Error(), "handshake"):
		return "handshake failed"
	}
	return "error"
}

// clientFrom returns an HTTP client whose connections come from source
// address src; with tlsCfg it speaks HTTPS (HTTP/2 when tlsCfg offers h2).
func clientFrom(src string, tlsCfg *tls.Config) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: actionLimit}
	tr := &http.Transport{
		DialContext:         d.DialContext,
		MaxConnsPerHost:     4, // well under the daemon's per-client cap
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     time.Second,
		DisableCompression:  true,
		TLSClientConfig:     tlsCfg,
		ForceAttemptHTTP2:   tlsCfg != nil,
	}
	return &http.Client{Transport: tr, Timeout: actionLimit}
}
