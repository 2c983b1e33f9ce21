package forward

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/seed-a07d1050/portcullis/internal/upstream"
)

// Defaults used where a [Config] field is left zero.
const (
	DefaultUpstreamTimeout   = 60 * time.Second
	DefaultTunnelIdleTimeout = 5 * time.Minute
	DefaultTunnelLifetime    = 24 * time.Hour
	DefaultVia               = "portcullis"
	DefaultMaxIdleConns      = 1024
	DefaultMaxIdlePerTarget  = 16
	DefaultIdleConnTimeout   = 30 * time.Second
)

// Config configures a [Proxy]. The zero Config is valid: the default
// destination policy, the system resolver, 10 s dials, 60 s for a
// response head, tunnels closed after 5 idle minutes or 24 hours.
type Config struct {
	// Policy decides which destinations may be reached. Nil means
	// NewPolicy(PolicyConfig{}): the built-in special-purpose ranges
	// refused, ports 80, 443 and 1024-65535 allowed to absolute-form
	// requests, 443 to CONNECT.
	Policy *Policy

	// Resolver resolves target names. Nil means net.DefaultResolver.
	Resolver Resolver

	// DialTimeout bounds connecting to a target, name resolution included.
	// Zero means 10 s; negative means no bound but the request's context.
	DialTimeout time.Duration

	// UpstreamTimeout bounds the wait for a target's response head once an
	// absolute-form request is sent; past it the client gets 504. It does
	// not bound the body. Zero means 60 s; negative means no bound.
	UpstreamTimeout time.Duration

	// TunnelIdleTimeout closes a CONNECT tunnel when no byte went either
	// way, and when a write to either side made no progress, for this
	// long. Zero means 5 minutes; negative means never.
	TunnelIdleTimeout time.Duration

	// TunnelLifetime closes a CONNECT tunnel this long after it opened,
	// however busy. Zero means 24 hours; negative means never.
	TunnelLifetime time.Duration

	// MaxIdleConnsPerTarget is how many idle connections to one target
	// host:port are kept for reuse by later absolute-form requests. Zero
	// means 16; negative means none (a connection per request).
	MaxIdleConnsPerTarget int

	// MaxIdleConns caps the idle target connections kept over every
	// target together: when that many are idle, the one idle longest is
	// closed to keep a newer one, so that clients reaching many hosts
	// cannot make the proxy hold an unbounded number of sockets. Zero
	// means 1024. It must not be negative; with MaxIdleConnsPerTarget
	// negative nothing is kept anyway.
	MaxIdleConns int

	// IdleConnTimeout is how long an idle target connection is kept. Zero
	// means 30 s; negative means until the target closes it.
	IdleConnTimeout time.Duration

	// Via is the pseudonym the proxy adds to the Via header of requests
	// and responses it forwards ("1.1 portcullis", RFC 9110 §7.6.3). A
	// request whose Via already holds it has looped through this proxy and
	// is answered 508 Loop Detected; give each proxy of a chain its own.
	// Empty means "portcullis". It must be a token (letters, digits and
	// !#$%&'*+-.^_`|~).
	Via string

	// Transport sends absolute-form requests. Nil means an
	// internal/upstream Transport dialling through the policy Dialer, with
	// the idle settings above. A Transport set here must dial through
	// [Proxy.Dialer] itself, or the policy is not applied to it.
	Transport http.RoundTripper

	// Logger receives the refusals and target failures, at most one line
	// per second of each, at INFO and WARN. Nil means slog.Default().
	Logger *slog.Logger

	// OnRefuse, if set, is called for every request the proxy refuses
	// itself, on the request's goroutine, before the answer is written,
	// with its status and reason: "denied" (a destination the policy
	// refuses, 403), "origin_form" and "bad_target" (400), "loop" (508),
	// "closed" (503, the proxy shutting down). It serves access logs: it
	// must be fast, must not block and must not write the response. Nil
	// means no callback.
	OnRefuse func(w http.ResponseWriter, r *http.Request, status int, reason string)

	// OnTargetError, if set, is called for every request (plain or
	// CONNECT) whose target could not be reached or failed before its
	// response head, on the request's goroutine, before the 502 or 504 is
	// written; not when the client went away first. It serves metrics: it
	// must be fast and must not block. Nil means no callback.
	OnTargetError func(r *http.Request, err error)
}

// A Proxy is the forward-proxy handler: it proxies absolute-form HTTP/1.x
// requests to their target and opens CONNECT tunnels (HTTP/1.1 by hijacking
// the connection, HTTP/2 as a full-duplex stream). Place it behind the
// authentication and limit middleware. A Proxy is safe for concurrent use;
// make it with [New], and end it with [Proxy.Shutdown] or [Proxy.Close].
type Proxy struct {
	dialer    *Dialer
	rp        *httputil.ReverseProxy
	transport http.RoundTripper
	closeIdle func()
	via       string // "1.1 " + pseudonym
	idle      time.Duration
	lifetime  time.Duration
	log       *slog.Logger
	onRefuse  func(http.ResponseWriter, *http.Request, int, string) // nil: none
	onFailed  func(*http.Request, error)                            // nil: none
	refusals  logGate
	failures  logGate

	mu      sync.Mutex
	tunnels map[*relay]struct{}
	closed  bool
	drained chan struct{} // made by Shutdown; closed once closed with no tunnel left
	open    atomic.Int64
	stats   counters
}

// counters are a Proxy's totals since New.
type counters struct {
	opened, denied, refused, failed atomic.Uint64
}

// New returns the Proxy of cfg, or an error naming the first invalid
// field.
func New(cfg Config) (*Proxy, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	d, err := NewDialer(DialerConfig{Policy: cfg.Policy, Resolver: cfg.Resolver, Timeout: cfg.DialTimeout})
	if err != nil {
		return nil, err
	}
	p := &Proxy{
		dialer:   d,
		idle:     orDefault(cfg.TunnelIdleTimeout, DefaultTunnelIdleTimeout),
		lifetime: orDefault(cfg.TunnelLifetime, DefaultTunnelLifetime),
		log:      cfg.Logger,
		onRefuse: cfg.OnRefuse,
		onFailed: cfg.OnTargetError,
		tunnels:  make(map[*relay]struct{}),
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	via := cfg.Via
	if via == "" {
		via = DefaultVia
	}
	p.via = "1.1 " + via
	p.refusals.every, p.failures.every = time.Second, time.Second
	p.transport = cfg.Transport
	if p.transport == nil {
		t, err := upstream.New(upstream.Config{
			DialContext:         d.DialContext,
			DialTimeout:         -1, // the Dialer bounds its dials
			MaxIdleConnsPerHost: orDefaultInt(cfg.MaxIdleConnsPerTarget, DefaultMaxIdlePerTarget),
			MaxIdleConns:        orDefaultInt(cfg.MaxIdleConns, DefaultMaxIdleConns),
			IdleConnTimeout:     orDefault(cfg.IdleConnTimeout, DefaultIdleConnTimeout),
		})
		if err != nil {
			return nil, fmt.Errorf("forward: target transport: %w", err)
		}
		p.transport, p.closeIdle = t.WithHeadTimeout(orDefault(cfg.UpstreamTimeout, DefaultUpstreamTimeout)), t.CloseIdleConnections
	}
	p.rp = p.newReverseProxy()
	return p, nil
}

func (c Config) validate() error {
	if c.Via != "" && !isToken(c.Via) {
		return fmt.Errorf("forward: Via must be a token (got %q)", c.Via)
	}
	if c.MaxIdleConns < 0 {
		return fmt.Errorf("forward: MaxIdleConns must not be negative (got %d)", c.MaxIdleConns)
	}
	return nil
}

func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if !httpguts.IsTokenRune(rune(s[i])) {
			return false
		}
	}
	return s != ""
}

// orDefault is d for zero, no bound (0) for negative, v otherwise.
func orDefault(v, d time.Duration) time.Duration {
	switch {
	case v == 0:
		return d
	case v < 0:
		return 0
	}
	return v
}

func orDefaultInt(v, d int) int {
	if v == 0 {
		return d
	}
	return v
}

// Dialer returns the policy Dialer the Proxy connects to targets with.
func (p *Proxy) Dialer() *Dialer { return p.dialer }

// ServeHTTP proxies one request:
//
//   - CONNECT host:port: the target is dialled under the policy; on
//     success the client gets 200 and the tunnel relays bytes both ways,
//     half-closes included, until either side closes, the tunnel is idle
//     for TunnelIdleTimeout or older than TunnelLifetime, or the Proxy is
//     closed;
//   - an absolute-form request (GET http://host/path): sent to the target
//     over a pooled connection, with the hop-by-hop headers removed
//     (Connection and the headers it names, Proxy-Connection, Keep-Alive,
//     Proxy-Authorization, Proxy-Authenticate, TE, Trailer,
//     Transfer-Encoding, Upgrade unless upgrading) and Via added;
//   - an origin-form request (GET /path): 400, this is a proxy.
//
// Refusals and failures are answered in plain text naming the reason: 400
// for a bad target, 403 when the destination policy refuses (naming the
// rule), 502 when the target cannot be resolved, refuses or fails, 504
// when it does not answer in time, 508 for a request that looped through
// this proxy, 503 once the Proxy is closed.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t, err := TargetOf(r)
	if err != nil {
		p.refuse(w, r, err)
		return
	}
	if p.looped(r) {
		p.refuse(w, r, errLoop)
		return
	}
	if r.Method == http.MethodConnect {
		if err := p.dialer.policy.CheckConnectPort(t.Port()); err != nil {
			err.(*DeniedError).Target = t.String()
			p.refuse(w, r, err)
			return
		}
		p.serveConnect(w, r, t)
		return
	}
	if err := p.dialer.policy.CheckPort(t.Port()); err != nil {
		err.(*DeniedError).Target = t.String()
		p.refuse(w, r, err)
		return
	}
	if _, err := dialAddress(r, t); err != nil && err != errNoPin {
		p.targetFailed(w, r, err) // ResolveTargets found no address
		return
	}
	p.rp.ServeHTTP(w, r)
}

// errLoop is why a request that already passed through this proxy is
// refused.
var errLoop = errors.New("forward: request looped through this proxy (its Via names it)")

// looped reports whether r's Via header holds this proxy's own entry.
func (p *Proxy) looped(r *http.Request) bool {
	for _, v := range r.Header["Via"] {
		for entry := range strings.SplitSeq(v, ",") {
			entry = strings.TrimSpace(entry)
			if entry == p.via || strings.HasPrefix(entry, p.via+" ") {
				return true
			}
		}
	}
	return false
}

// Tunnels returns the number of CONNECT tunnels open now.
func (p *Proxy) Tunnels() int { return int(p.open.Load()) }

// Stats are a Proxy's counts.
type Stats struct {
	TunnelsOpen    int    // CONNECT tunnels open now
	TunnelsOpened  uint64 // CONNECT tunnels opened since New
	Denied         uint64 // requests answered 403: the destination policy refused the target
	Refused        uint64 // requests answered 400, 503 or 508: a bad target, an origin-form request, a loop, a closed proxy
	TargetFailures uint64 // requests answered 502 or 504: the target could not be resolved or reached, or failed
}

// Stats returns the Proxy's counts.
func (p *Proxy) Stats() Stats {
	return Stats{
		TunnelsOpen:    p.Tunnels(),
		TunnelsOpened:  p.stats.opened.Load(),
		Denied:         p.stats.denied.Load(),
		Refused:        p.stats.refused.Load(),
		TargetFailures: p.stats.failed.Load(),
	}
}

// Shutdown refuses new CONNECT requests (503) and waits, without polling,
// until the open tunnels have ended by themselves or ctx ends, then closes
// those left, as Close does. It returns ctx.Err() if it had to close some,
// nil otherwise. Absolute-form exchanges are the http.Server's to drain.
func (p *Proxy) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	if p.drained == nil {
		p.drained = make(chan struct{})
		if len(p.tunnels) == 0 {
			close(p.drained)
		}
	}
	drained := p.drained
	p.mu.Unlock()
	select {
	case <-drained:
		p.Close()
		return nil
	case <-ctx.Done():
		p.Close()
		return ctx.Err()
	}
}

// Close refuses new CONNECT requests (503), cuts every open tunnel (both
// connections are closed, so the handlers serving them return and their
// permits are released) and closes the idle target connections. It is
// idempotent and returns nil.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	open := make([]*relay, 0, len(p.tunnels))
	for t := range p.tunnels {
		open = append(open, t)
	}
	p.mu.Unlock()
	for _, t := range open {
		t.abort()
	}
	if p.closeIdle != nil {
		p.closeIdle()
	}
	return nil
}

// track registers a tunnel so that Close can cut it; it reports false once
// the Proxy is closed.
func (p *Proxy) track(t *relay) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.tunnels[t] = struct{}{}
	p.open.Add(1)
	p.stats.opened.Add(1)
	return true
}

func (p *Proxy) untrack(t *relay) {
	p.mu.Lock()
	delete(p.tunnels, t)
	p.open.Add(-1)
	if p.drained != nil && len(p.tunnels) == 0 {
		select {
		case <-p.drained:
		default:
			close(p.drained)
		}
	}
	p.mu.Unlock()
}

func (p *Proxy) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}
