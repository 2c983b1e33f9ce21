package intercept

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/forward"
)

// Defaults used where a [Config] field is left zero.
const (
	DefaultHandshakeTimeout  = 10 * time.Second
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout       = 5 * time.Minute
	// DefaultResolveTimeout bounds the look-up of a CONNECT's host name
	// when address or network rules must be matched against it.
	DefaultResolveTimeout = 5 * time.Second
)

// Config configures an [Interceptor]. Leaves and Handler are required; the
// other fields may be left zero.
type Config struct {
	// Leaves mints the certificates shown to clients. Required: nil is
	// refused by New.
	Leaves *Leaves

	// Handler serves each request inside an intercepted session, as a
	// forward-proxy exchange: its URL is https://target/path, target being
	// the host the client named in SNI (or the CONNECT's host without SNI)
	// and the CONNECT's port; its context carries the CONNECT's verified
	// user (proxyauth.User) and the target
	// (forward.InterceptedTarget, which forward.ByTargetHost keys by); its
	// RemoteAddr, Forwarded and X-Forwarded-For are the CONNECT's, so that
	// client keys are those of the CONNECT. The daemon gives its limiters
	// wrapped around an [Upstream], so that every request takes and
	// releases its own permits. Required: nil is refused by New.
	Handler http.Handler

	// Intercept selects the targets to intercept. Nil or empty means every
	// target that Bypass does not name.
	Intercept *Rules

	// Bypass names the targets left as plain tunnels (the next handler
	// serves their CONNECT), for clients that pin their server's
	// certificate and would fail on ours. It wins over Intercept. Nil
	// means none. Targets the CA's name constraints exclude are always
	// left as plain tunnels.
	Bypass *Rules

	// Policy is the destination policy of the proxy: a CONNECT whose port,
	// or IP address, it refuses is left to the next handler, which refuses
	// it (403) as it refuses any CONNECT. Targets named by a host name are
	// checked when a request inside dials them. Nil means no check here.
	Policy *forward.Policy

	// Resolver looks up a CONNECT's host name when Intercept or Bypass has
	// address or network rules: a name matches them through its addresses.
	// A look-up that fails or takes over DefaultResolveTimeout matches
	// none. Nil means net.DefaultResolver.
	Resolver forward.Resolver

	// HandshakeTimeout bounds the client's TLS handshake, its first bytes
	// included; the CONNECT's permits are held during it. Zero means
	// DefaultHandshakeTimeout (10 s); negative means no bound.
	HandshakeTimeout time.Duration

	// ReadHeaderTimeout bounds reading the head of each request inside a
	// session, as http.Server's. Zero means DefaultReadHeaderTimeout
	// (10 s); negative means no bound.
	ReadHeaderTimeout time.Duration

	// IdleTimeout closes a session that waits this long for its next
	// request, as http.Server's. Zero means DefaultIdleTimeout (5 min);
	// negative means no bound.
	IdleTimeout time.Duration

	// ReadTimeout and WriteTimeout bound each request inside a session,
	// as http.Server's: reading it whole, body included, and writing its
	// answer. Zero means no bound (the daemon gives its listener's);
	// negative is invalid.
	ReadTimeout, WriteTimeout time.Duration

	// MaxHeaderBytes bounds the head of each request inside a session, as
	// http.Server's. Zero means net/http's default (1 MiB); negative is
	// invalid.
	MaxHeaderBytes int

	// DisableHTTP2 offers only HTTP/1.1 to clients by ALPN. False offers
	// h2 and http/1.1.
	DisableHTTP2 bool

	// Logger receives the sessions (DEBUG), failed handshakes and clients
	// that do not speak TLS (DEBUG, with the reason), and failures to mint
	// a leaf (WARN, at most one line a second). Nil means slog.Default().
	Logger *slog.Logger
}

// An Interceptor takes over the CONNECT tunnels it is asked to intercept:
// it answers 200, takes the client's TLS handshake with a leaf certificate
// minted for the name the client asked for, and serves the requests
// inside, each one as an exchange of its own through Config.Handler. Its
// [Interceptor.Wrap] puts it in front of a forward proxy, which keeps the
// CONNECTs it does not intercept. It is safe for concurrent use; make it
// with [New], end it with [Interceptor.Shutdown] or [Interceptor.Close].
// It cannot be started again.
type Interceptor struct {
	leaves     *Leaves
	handler    http.Handler
	intercept  *Rules
	bypass     *Rules
	policy     *forward.Policy
	resolver   forward.Resolver
	handshake  time.Duration
	log        *slog.Logger
	tlsConf    *tls.Config
	srv        *http.Server
	ln         *sessionListener
	served     chan struct{} // closed when srv.Serve returned
	mintErrLog logGate

	mu       sync.Mutex
	sessions map[*session]struct{}
	closed   bool
	open     atomic.Int64

	stats counters
}

type counters struct {
	connects, tunnelled, sessions, handshakeFailures, notTLS, requests, misdirected atomic.Uint64
}

// New returns the Interceptor of cfg, serving, or an error naming the
// first invalid field.
func New(cfg Config) (*Interceptor, error) {
	switch {
	case cfg.Leaves == nil:
		return nil, errors.New("intercept: Config.Leaves is required")
	case cfg.Handler == nil:
		return nil, errors.New("intercept: Config.Handler is required")
	case cfg.ReadTimeout < 0 || cfg.WriteTimeout < 0:
		return nil, fmt.Errorf("intercept: Config.ReadTimeout and WriteTimeout must not be negative (got %s, %s)", cfg.ReadTimeout, cfg.WriteTimeout)
	case cfg.MaxHeaderBytes < 0:
		return nil, fmt.Errorf("intercept: Config.MaxHeaderBytes must not be negative (got %d)", cfg.MaxHeaderBytes)
	}
	i := &Interceptor{
		leaves:    cfg.Leaves,
		handler:   cfg.Handler,
		intercept: cfg.Intercept,
		bypass:    cfg.Bypass,
		policy:    cfg.Policy,
		resolver:  cfg.Resolver,
		handshake: orDefault(cfg.HandshakeTimeout, DefaultHandshakeTimeout),
		log:       cfg.Logger,
		ln:        newSessionListener(),
		served:    make(chan struct{}),
		sessions:  make(map[*session]struct{}),
	}
	if i.log == nil {
		i.log = slog.Default()
	}
	if i.resolver == nil {
		i.resolver = net.DefaultResolver
	}
	i.mintErrLog.every = time.Second
	i.tlsConf = newTLSConfig(i, !cfg.DisableHTTP2)
	i.srv = &http.Server{
		Handler:           http.HandlerFunc(i.serveInner),
		ReadHeaderTimeout: orDefault(cfg.ReadHeaderTimeout, DefaultReadHeaderTimeout),
		IdleTimeout:       orDefault(cfg.IdleTimeout, DefaultIdleTimeout),
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		ConnContext:       withSession,
		ErrorLog:          slog.NewLogLogger(i.log.Handler(), slog.LevelDebug),
	}
	if cfg.DisableHTTP2 {
		i.srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
	}
	go func() {
		defer close(i.served)
		_ = i.srv.Serve(i.ln)
	}()
	return i, nil
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

// Wrap returns a handler that intercepts the CONNECTs Intercepts selects
// and passes every other request, and every other CONNECT, to next (the
// forward proxy, which tunnels them). Put it inside the authentication
// and limit middleware, so that a CONNECT is authenticated and holds its
// permits until interception starts, and so that its user rides on into
// the requests inside.
func (i *Interceptor) Wrap(next http.Handler) http.Handler {
	if next == nil {
		next = http.NotFoundHandler()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect {
			next.ServeHTTP(w, r)
			return
		}
		t, err := forward.TargetOf(r)
		if err != nil {
			next.ServeHTTP(w, r) // the proxy answers a bad target
			return
		}
		switch i.decide(r.Context(), t) {
		case decideIntercept:
			i.serveConnect(w, r, t)
		case decideTunnel:
			i.stats.tunnelled.Add(1)
			next.ServeHTTP(w, r)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

type decision int

const (
	decideIntercept decision = iota
	decideTunnel             // the rules or the CA leave it as a plain tunnel
	decideRefused            // the policy refuses it: the proxy answers
)

// Intercepts reports whether a CONNECT to t would be intercepted: the
// destination policy allows its port (and its address, for an IP
// literal), the CA may sign for its host, Intercept selects it (or is
// empty) and Bypass does not name it. A host name is looked up only when
// the rules have address or network entries.
func (i *Interceptor) Intercepts(ctx context.Context, t forward.Target) bool {
	return i.decide(ctx, t) == decideIntercept
}

func (i *Interceptor) decide(ctx context.Context, t forward.Target) decision {
	if i.policy != nil {
		if i.policy.CheckConnectPort(t.Port()) != nil {
			return decideRefused
		}
		if a := t.Addr(); a.IsValid() && i.policy.Check(netip.AddrPortFrom(a, t.Port())) != nil {
			return decideRefused
		}
	}
	if !i.leaves.ca.Permits(t.Host()) {
		return decideTunnel
	}
	var addrs []netip.Addr
	if !t.Addr().IsValid() && (i.intercept.HasNetworks() || i.bypass.HasNetworks()) {
		addrs = i.lookup(ctx, t.Host())
	}
	if i.intercept.Len() > 0 && !i.intercept.MatchTarget(t, addrs) {
		return decideTunnel
	}
	if i.bypass.MatchTarget(t, addrs) {
		return decideTunnel
	}
	return decideIntercept
}

func (i *Interceptor) lookup(ctx context.Context, host string) []netip.Addr {
	ctx, cancel := context.WithTimeout(ctx, DefaultResolveTimeout)
	defer cancel()
	addrs, err := i.resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil
	}
	return addrs
}

// track registers a session so that Close can end it; it reports false
// once the Interceptor is closed.
func (i *Interceptor) track(s *session) bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.closed {
		return false
	}
	i.sessions[s] = struct{}{}
	i.open.Add(1)
	return true
}

func (i *Interceptor) untrack(s *session) {
	i.mu.Lock()
	_, ok := i.sessions[s]
	delete(i.sessions, s)
	i.mu.Unlock()
	if ok {
		i.open.Add(-1)
	}
}

func (i *Interceptor) isClosed() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.closed
}

// Sessions returns the number of intercepted sessions open now, those
// still in their handshake included.
func (i *Interceptor) Sessions() int { return int(i.open.Load()) }

// Shutdown stops intercepting (new intercepted CONNECTs get 503), lets
// the requests under way finish, closes idle sessions as they become
// idle, and waits until every session has ended or ctx ends; then it
// closes what is left, as Close does, and returns ctx.Err(). It returns
// nil when every session ended by itself.
func (i *Interceptor) Shutdown(ctx context.Context) error {
	i.mu.Lock()
	i.closed = true
	i.mu.Unlock()
	err := i.srv.Shutdown(ctx)
	if err == nil {
		// Sessions the server no longer sees (a handshake under way, a
		// connection upgraded by a request inside) end by themselves.
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for i.open.Load() > 0 && err == nil {
			select {
			case <-ctx.Done():
				err = ctx.Err()
			case <-t.C:
			}
		}
	}
	i.Close()
	return err
}

// Close stops intercepting (new intercepted CONNECTs get 503) and ends
// every session at once: the client connections are closed (an HTTP/2
// CONNECT stream is reset), the requests under way are cancelled, and so
// every permit they held is released. It is idempotent and returns nil.
func (i *Interceptor) Close() error {
	i.mu.Lock()
	i.closed = true
	open := make([]*session, 0, len(i.sessions))
	for s := range i.sessions {
		open = append(open, s)
	}
	i.mu.Unlock()
	_ = i.srv.Close()
	for _, s := range open {
		s.abort()
	}
	<-i.served
	return nil
}
