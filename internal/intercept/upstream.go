package intercept

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/seed-a07d1050/portcullis/internal/forward"
	"github.com/seed-a07d1050/portcullis/internal/upstream"
)

// Defaults used where an [UpstreamConfig] field is left zero.
const (
	DefaultUpstreamTimeout     = 60 * time.Second
	DefaultTLSHandshakeTimeout = 10 * time.Second
	DefaultCertLogInterval     = time.Minute
)

// UpstreamConfig configures an [Upstream]. The zero UpstreamConfig is
// valid: the default destination policy, the system's roots, 60 s for a
// response head.
type UpstreamConfig struct {
	// Dialer connects to targets under the destination policy. Give the
	// forward proxy's (forward.Proxy.Dialer) so that both apply one policy
	// and one resolver. Nil means forward.NewDialer(forward.DialerConfig{}):
	// the built-in policy, the system resolver.
	Dialer *forward.Dialer

	// RootCAs are the authorities a target's certificate must chain to.
	// Nil means the system's roots. [LoadRoots] reads a PEM file.
	RootCAs *x509.CertPool

	// InsecureSkipVerifyUpstream accepts any certificate from targets,
	// expired, self-signed or for another name: the proxy then vouches, to
	// clients that trust its CA, for servers it has not authenticated.
	// Only for tests and closed networks. False verifies the chain and the
	// name.
	InsecureSkipVerifyUpstream bool

	// UpstreamTimeout bounds the wait for a target's response head once
	// the request is sent; past it the client gets 504. Zero means
	// DefaultUpstreamTimeout (60 s); negative means no bound.
	UpstreamTimeout time.Duration

	// TLSHandshakeTimeout bounds the TLS handshake with a target. Zero
	// means DefaultTLSHandshakeTimeout (10 s); negative means no bound.
	TLSHandshakeTimeout time.Duration

	// MaxIdleConnsPerTarget is how many idle connections to one target
	// are kept for later requests, of any client. Zero means 16; negative
	// means none.
	MaxIdleConnsPerTarget int

	// MaxIdleConns caps the idle target connections kept over every
	// target together, HTTP/2 ones included: when more are idle, those
	// idle longest are closed. So the connections an Upstream holds are
	// at most the requests in progress plus MaxIdleConns. Zero means
	// forward.DefaultMaxIdleConns (1024); negative is invalid.
	MaxIdleConns int

	// IdleConnTimeout is how long an idle target connection is kept. Zero
	// means 30 s; negative means until the target closes it.
	IdleConnTimeout time.Duration

	// Via is the proxy's pseudonym in the Via header, as
	// forward.Config.Via; a request whose Via holds it already is answered
	// 508. Empty means forward.DefaultVia ("portcullis").
	Via string

	// Logger receives target failures (WARN, at most one line a second)
	// and refused target certificates (WARN, at most one line per host per
	// minute). Nil means slog.Default().
	Logger *slog.Logger
}

// An Upstream is the handler that carries the requests of intercepted
// sessions to their targets over TLS: it verifies each target's
// certificate for the name the client asked for, dials through the
// destination policy, and keeps idle connections per target. It serves
// only requests an [Interceptor] prepared (their context names the
// target); others get 400. It is safe for concurrent use.
type Upstream struct {
	pool      *connPool
	rp        *httputil.ReverseProxy
	transport *http.Transport
	h1        *http.Transport // for upgrades: HTTP/1.1 only
	via       string
	log       *slog.Logger
	failures  logGate
	certLog   hostGate

	badCerts, targetFailures, unverified atomic.Uint64
}

// NewUpstream returns the Upstream of cfg, or an error naming the first
// invalid field.
func NewUpstream(cfg UpstreamConfig) (*Upstream, error) {
	if cfg.Via != "" && !isToken(cfg.Via) {
		return nil, fmt.Errorf("intercept: UpstreamConfig.Via must be a token (got %q)", cfg.Via)
	}
	if cfg.MaxIdleConns < 0 {
		return nil, fmt.Errorf("intercept: UpstreamConfig.MaxIdleConns must not be negative (got %d)", cfg.MaxIdleConns)
	}
	d := cfg.Dialer
	if d == nil {
		var err error
		if d, err = forward.NewDialer(forward.DialerConfig{}); err != nil {
			return nil, err
		}
	}
	u := &Upstream{log: cfg.Logger}
	if u.log == nil {
		u.log = slog.Default()
	}
	via := cfg.Via
	if via == "" {
		via = forward.DefaultVia
	}
	u.via = "1.1 " + via
	u.failures.every = time.Second
	u.certLog = hostGate{every: DefaultCertLogInterval, now: time.Now, next: make(map[string]hostGateEntry)}
	maxIdle := cfg.MaxIdleConnsPerTarget
	switch {
	case maxIdle == 0:
		maxIdle = 16
	case maxIdle < 0:
		maxIdle = 0
	}
	maxAll := cfg.MaxIdleConns
	if maxAll == 0 {
		maxAll = forward.DefaultMaxIdleConns
	}
	u.pool = newConnPool(d.DialContext, maxAll, maxIdle)
	u.transport = &http.Transport{
		DialContext:  u.pool.DialContext,
		MaxIdleConns: maxAll,
		TLSClientConfig: &tls.Config{
			RootCAs:            cfg.RootCAs,
			InsecureSkipVerify: cfg.InsecureSkipVerifyUpstream,
			MinVersion:         tls.VersionTLS12,
		},
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   orDefault(cfg.TLSHandshakeTimeout, DefaultTLSHandshakeTimeout),
		ResponseHeaderTimeout: orDefault(cfg.UpstreamTimeout, DefaultUpstreamTimeout),
		MaxIdleConnsPerHost:   maxIdle,
		DisableKeepAlives:     maxIdle == 0,
		IdleConnTimeout:       orDefault(cfg.IdleConnTimeout, 30*time.Second),
		ExpectContinueTimeout: time.Second,
		// The client's Accept-Encoding goes to the target as it was sent
		// (none stays none), and the target's bytes come back as they
		// were: no gzip asked for behind the client's back, nothing
		// decompressed.
		DisableCompression: true,
	}
	if cfg.InsecureSkipVerifyUpstream {
		// Called on every handshake, verification skipped or not: each
		// one counts as a target session nobody authenticated.
		u.transport.TLSClientConfig.VerifyConnection = func(tls.ConnectionState) error {
			u.unverified.Add(1)
			return nil
		}
	}
	// Upgrades (WebSocket and others) need HTTP/1.1 to the target;
	// net/http's Transport keeps only WebSocket ones off HTTP/2, so
	// every upgrade goes through a twin that never offers h2.
	u.h1 = u.transport.Clone()
	u.h1.ForceAttemptHTTP2 = false
	u.h1.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	u.h1.TLSClientConfig.NextProtos = []string{"http/1.1"}
	handshake := orDefault(cfg.TLSHandshakeTimeout, DefaultTLSHandshakeTimeout)
	u.transport.DialTLSContext = u.dialTLS(u.transport.TLSClientConfig, []string{"h2", "http/1.1"}, handshake)
	u.h1.DialTLSContext = u.dialTLS(u.h1.TLSClientConfig, []string{"http/1.1"}, handshake)
	u.rp = &httputil.ReverseProxy{
		Rewrite:        u.rewrite,
		Transport:      roundTripFunc(u.roundTrip),
		ModifyResponse: u.addResponseVia,
		ErrorHandler:   u.failed,
		ErrorLog:       slog.NewLogLogger(u.log.Handler(), slog.LevelDebug),
	}
	return u, nil
}

func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if !httpguts.IsTokenRune(rune(s[i])) {
			return false
		}
	}
	return s != ""
}

// LoadRoots reads the PEM certificates of file into a pool, for
// UpstreamConfig.RootCAs. It fails if the file holds no certificate or one
// that does not parse.
func LoadRoots(file string) (*x509.CertPool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("intercept: read upstream CA file: %w", err)
	}
	pool := x509.NewCertPool()
	n := 0
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("intercept: upstream CA file %s: certificate %d: %w", file, n+1, err)
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("intercept: upstream CA file %s holds no PEM CERTIFICATE", file)
	}
	return pool, nil
}

// ServeHTTP forwards r to the target of its session over TLS and relays
// the answer, with the hop-by-hop headers removed and Via added. A request
// no Interceptor prepared gets 400; one that looped through this proxy,
// 508. Failures are answered in plain text naming the reason: 403 when the
// destination policy refuses the target's address (naming the rule), 502
// when the target's certificate is refused (naming why: unknown authority,
// expired, another name), when it cannot be resolved, refuses, fails or
// does not speak TLS, and 504 when it does not answer in time.
func (u *Upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, ok := forward.InterceptedTarget(r.Context()); !ok {
		writePlain(w, http.StatusBadRequest, "bad request: this handler serves requests inside intercepted TLS sessions only\n")
		return
	}
	if u.looped(r) {
		writePlain(w, http.StatusLoopDetected, "loop detected: the request already passed through this proxy\n")
		return
	}
	u.rp.ServeHTTP(w, r)
}

func (u *Upstream) looped(r *http.Request) bool {
	for _, v := range r.Header["Via"] {
		for entry := range strings.SplitSeq(v, ",") {
			entry = strings.TrimSpace(entry)
			if entry == u.via || strings.HasPrefix(entry, u.via+" ") {
				return true
			}
		}
	}
	return false
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (u *Upstream) roundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get("Upgrade") != "" {
		return u.pool.roundTrip(u.h1, r)
	}
	return u.pool.roundTrip(u.transport, r)
}

// dialTLS returns the TLS dialer of a Transport: it dials through the
// pool and shakes hands with conf for the target's name, offering protos.
// A connection that agreed on HTTP/2 is returned as the *tls.Conn, which
// the Transport hands to its HTTP/2 client; one that speaks HTTP/1.1 is
// returned inside an upstream.TapConn, which records each response's head so that
// the fields a Connection field saying "close" names are dropped (net/http
// drops that Connection field whole, see tap.go).
func (u *Upstream) dialTLS(conf *tls.Config, protos []string, timeout time.Duration) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		raw, err := u.pool.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		host, _, _ := net.SplitHostPort(addr)
		c := conf.Clone()
		c.ServerName, c.NextProtos = host, protos
		tc := tls.Client(raw, c)
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		if err := tc.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, err
		}
		if tc.ConnectionState().NegotiatedProtocol == "h2" {
			return tc, nil
		}
		return &upstream.TapConn{Conn: tc}, nil
	}
}

// TargetConns returns the target connections the Upstream holds open now,
// busy and idle.
func (u *Upstream) TargetConns() int { return u.pool.Open() }

// rewrite points the outbound request at the session's target.
func (u *Upstream) rewrite(pr *httputil.ProxyRequest) {
	t, _ := forward.InterceptedTarget(pr.In.Context())
	pr.Out.URL.Scheme = "https"
	pr.Out.URL.Host = t.String()
	pr.Out.URL.User = nil
	// ReverseProxy drops query parameters it cannot parse; a proxy passes
	// the query on as the client wrote it.
	pr.Out.URL.RawQuery = pr.In.URL.RawQuery
	pr.Out.Host = hostHeader(t)
	pr.Out.Header["Via"] = append(pr.Out.Header["Via"], u.via)
	// Rewrite drops the X-Forwarded-* and Forwarded fields a client sent;
	// X-Real-IP is one more claim of the client about itself.
	delete(pr.Out.Header, "X-Real-Ip")
}

// hostHeader is t without the port when it is 443, as clients write it.
func hostHeader(t forward.Target) string {
	if t.Port() == forward.DefaultConnectPort {
		return strings.TrimSuffix(t.String(), ":"+strconv.Itoa(forward.DefaultConnectPort))
	}
	return t.String()
}

func (u *Upstream) addResponseVia(resp *http.Response) error {
	resp.Header["Via"] = append(resp.Header["Via"], u.via)
	return nil
}

// failed answers a request whose target could not be reached or failed.
func (u *Upstream) failed(w http.ResponseWriter, r *http.Request, err error) {
	t, _ := forward.InterceptedTarget(r.Context())
	var denied *forward.DeniedError
	switch {
	case errors.As(err, &denied):
		writePlain(w, http.StatusForbidden, "forbidden: destination "+denied.Destination()+" refused by rule \""+denied.Rule+"\"\n")
		return
	case r.Context().Err() != nil:
		// The client went away or the session is ending: nobody reads this.
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	u.targetFailures.Add(1)
	if reason, ok := certificateProblem(err); ok {
		u.badCerts.Add(1)
		if ok, held := u.certLog.allow(t.Host()); ok {
			u.log.LogAttrs(r.Context(), slog.LevelWarn, "intercept: target certificate refused",
				slog.String("target", t.String()),
				slog.String("reason", reason),
				slog.Int64("not_logged_since_last", held))
		}
		writePlain(w, http.StatusBadGateway, "Bad Gateway: "+t.String()+": the target's certificate was refused: "+reason+"\n")
		return
	}
	status, reason := forward.ClassifyFailure(err)
	var rh tls.RecordHeaderError
	if errors.As(err, &rh) {
		reason = "the target does not speak TLS"
	}
	if ok, held := u.failures.allow(); ok {
		u.log.LogAttrs(r.Context(), slog.LevelWarn, "intercept: target failed",
			slog.Int("status", status),
			slog.String("method", r.Method),
			slog.String("target", t.String()),
			slog.String("err", err.Error()),
			slog.Int64("not_logged_since_last", held))
	}
	writePlain(w, status, http.StatusText(status)+": "+t.String()+": "+reason+"\n")
}

// certificateProblem reports whether err is the refusal of a target's
// certificate, and why, in words fit for the client.
func certificateProblem(err error) (string, bool) {
	var cve *tls.CertificateVerificationError
	if !errors.As(err, &cve) {
		return "", false
	}
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	switch {
	case errors.As(cve.Err, &ua):
		return "signed by an unknown authority (" + strings.TrimPrefix(ua.Error(), "x509: ") + ")", true
	case errors.As(cve.Err, &he):
		return strings.TrimPrefix(he.Error(), "x509: "), true
	case errors.As(cve.Err, &ci):
		return strings.TrimPrefix(ci.Error(), "x509: "), true
	}
	return strings.TrimPrefix(cve.Err.Error(), "x509: "), true
}

// Close closes the idle target connections. Requests under way are not
// affected. It returns nil.
func (u *Upstream) Close() error {
	u.transport.CloseIdleConnections()
	u.h1.CloseIdleConnections()
	return nil
}

// UpstreamStats are the counts of an [Upstream].
type UpstreamStats struct {
	Failures        uint64 // requests answered 502 or 504 because of the target, refused certificates included
	BadCertificates uint64 // requests answered 502 because the target's certificate was refused
	Unverified      uint64 // TLS sessions opened with targets whose certificate was not verified (InsecureSkipVerifyUpstream)
}

// Stats returns the counts of u.
func (u *Upstream) Stats() UpstreamStats {
	return UpstreamStats{Failures: u.targetFailures.Load(), BadCertificates: u.badCerts.Load(), Unverified: u.unverified.Load()}
}

// hostGate lets at most one line per host through per period. It keeps at
// most maxHostGate hosts, forgetting those whose period is over first.
type hostGate struct {
	every time.Duration
	now   func() time.Time

	mu   sync.Mutex
	next map[string]hostGateEntry
}

type hostGateEntry struct {
	next    time.Time
	skipped int64
}

const maxHostGate = 4096

func (g *hostGate) allow(host string) (bool, int64) {
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	e, ok := g.next[host]
	if ok && now.Before(e.next) {
		e.skipped++
		g.next[host] = e
		return false, 0
	}
	if !ok && len(g.next) >= maxHostGate {
		for h, e := range g.next {
			if !now.Before(e.next) {
				delete(g.next, h)
			}
		}
		if len(g.next) >= maxHostGate {
			clear(g.next) // a flood of hosts: start over rather than grow
		}
	}
	g.next[host] = hostGateEntry{next: now.Add(g.every)}
	return true, e.skipped
}
