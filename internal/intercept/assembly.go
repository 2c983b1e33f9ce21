package intercept

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a07d1050/portcullis/internal/forward"
)

// An Assembly is the TLS interception of one forward-proxy listener as a server runs it
// across reloads: the [Leaves] it shows clients, the [Upstream] the requests inside its
// sessions go to, the [Interceptor] in front of the proxy, and the handler that Interceptor
// serves those requests with.
//
// [NewAssembly] reuses each part of the Assembly it replaces whose inputs did not change:
// the Leaves (with their cache) while the CA files hold the same bytes and the leaf
// settings are the same; the Upstream (with its idle target connections) while the proxy,
// the upstream settings and the roots file's bytes are the same; the Interceptor (with its
// open sessions) while the proxy, the Leaves, the rules and the session settings are the
// same. A kept Interceptor serves the requests of its sessions through a chain that
// [Assembly.Commit] points at the new Assembly's handler, so that from then on they go
// through the new configuration's limits, as every new exchange does.
type Assembly struct {
	leavesKey leavesKey
	leaves    *Leaves
	upKey     upstreamKey
	up        *Upstream
	icKey     interceptorKey
	ic        *Interceptor
	chain     *innerChain // the Interceptor's Handler, shared by the Assemblies that keep it
	next      http.Handler
	drain     time.Duration
	wait      time.Duration
}

// AssemblyConfig is what an Assembly is built from. Every field but the proxy, the CA files
// and Inner may be zero: zero means the default of the Interceptor, Leaves or Upstream field
// it is given to.
type AssemblyConfig struct {
	// Proxy is the forward proxy the Interceptor stands in front of: the Upstream dials
	// with its Dialer, and the Interceptor applies its destination policy. Required.
	Proxy *forward.Proxy

	// CACertFile and CAKeyFile are the PEM files of the interception CA, read at every
	// build (see [LoadCAFiles]). Required. AllowReadableCAKey skips [CheckKeyFile].
	CACertFile, CAKeyFile string
	AllowReadableCAKey    bool

	// Leaves are the validity, renewal and cache size of the leaves ([LeavesConfig]).
	Leaves LeafSettings

	// Intercept and Bypass are the rule lists ([ParseRules]): nil or empty means the
	// Interceptor's defaults.
	Intercept, Bypass []string

	// The session settings, as [Config] has them.
	HandshakeTimeout, IdleTimeout                time.Duration
	ReadHeaderTimeout, ReadTimeout, WriteTimeout time.Duration
	MaxHeaderBytes                               int
	DisableHTTP2                                 bool

	// Upstream is how the requests inside sessions reach their targets.
	Upstream UpstreamSettings

	// Inner returns the handler the requests inside sessions go through to reach up:
	// the listener's limits, each request taking and releasing its own permits. Required.
	Inner func(up *Upstream) http.Handler

	// Drain is how long [Assembly.Retire] lets the sessions of a replaced Interceptor
	// finish before it cuts them. Zero cuts them at once.
	Drain time.Duration

	// Wait bounds how long Shutdown, Close and Retire wait, once sessions have ended,
	// for the handlers of the requests inside them to return. Zero means 2s.
	Wait time.Duration

	// Name names the listener: a reload that renames it builds a new Interceptor.
	Name string

	// Logger receives the Interceptor's and the Upstream's logs. Nil means slog.Default.
	Logger *slog.Logger
}

// LeafSettings are the fields of [LeavesConfig] besides the CA.
type LeafSettings struct {
	Validity, RenewBefore time.Duration
	CacheSize             int
}

// NewLeaves returns the Leaves s describes, signed by ca ([NewLeaves]).
func (s LeafSettings) NewLeaves(ca *CA) (*Leaves, error) {
	return NewLeaves(LeavesConfig{CA: ca, Validity: s.Validity, RenewBefore: s.RenewBefore, CacheSize: s.CacheSize})
}

// UpstreamSettings are the fields of [UpstreamConfig] an Assembly is configured with:
// RootsFile, when set, is a PEM file of the authorities targets' certificates must chain
// to ([LoadRoots]), read at every build.
type UpstreamSettings struct {
	RootsFile                  string
	InsecureSkipVerifyUpstream bool
	Timeout                    time.Duration
	MaxIdleConnsPerTarget      int
	MaxIdleConns               int
	IdleConnTimeout            time.Duration
	Via                        string
}

// leavesKey is what a Leaves is built from.
type leavesKey struct {
	ca  [sha256.Size]byte // of the CA certificate file's bytes, a zero byte, the key file's
	cfg LeafSettings
}

// upstreamKey is what an Upstream is built from.
type upstreamKey struct {
	proxy *forward.Proxy
	roots [sha256.Size]byte // of the roots file; zero without
	cfg   UpstreamSettings
}

// interceptorKey is what an Interceptor is built from.
type interceptorKey struct {
	proxy           *forward.Proxy
	leaves          *Leaves
	only, bypass    []string
	handshake, idle time.Duration
	http2           bool
	readHeader      time.Duration
	read, write     time.Duration
	maxHeaderBytes  int
	name            string
}

// innerChain is the handler an Interceptor serves the requests inside its sessions with:
// the Inner handler of the Assembly in force, swapped by Commit. It counts the requests
// inside it, which no listener's http.Server sees.
type innerChain struct {
	h      atomic.Pointer[http.Handler]
	active atomic.Int64
}

func (c *innerChain) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.active.Add(1)
	defer c.active.Add(-1)
	(*c.h.Load()).ServeHTTP(w, r)
}

// waitIdle waits up to d for the requests inside the chain to return. Interceptor.Shutdown
// and Close end sessions and so cancel the requests inside, but do not wait for their
// handlers, which give their permits back as they return.
func (c *innerChain) waitIdle(d time.Duration) {
	if c.active.Load() == 0 {
		return
	}
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(idlePoll)
	defer tick.Stop()
	for c.active.Load() > 0 {
		select {
		case <-deadline.C:
			return
		case <-tick.C:
		}
	}
}

// idlePoll is how often waitIdle looks at the count of requests inside a chain.
const idlePoll = 10 * time.Millisecond

// NewAssembly builds the interception cfg describes, reusing what it can of old (nil at
// start), as [Assembly] says. It fails when the CA files do not load (a *[CAFileError]),
// when the leaves, the rules, the roots file or the Upstream do not build; on error it
// leaves nothing of its own open, and old is untouched. The new Assembly's Interceptor
// serves the requests of its sessions with cfg.Inner only once Commit is called.
func NewAssembly(cfg AssemblyConfig, old *Assembly) (*Assembly, error) {
	if cfg.Proxy == nil || cfg.Inner == nil {
		return nil, errors.New("intercept: NewAssembly needs a Proxy and an Inner")
	}
	a := &Assembly{drain: cfg.Drain, wait: cfg.Wait}
	if a.wait == 0 {
		a.wait = 2 * time.Second
	}
	if err := a.buildLeaves(&cfg, old); err != nil {
		return nil, err
	}
	if err := a.buildUpstream(&cfg, old); err != nil {
		return nil, err
	}
	a.next = cfg.Inner(a.up)
	if err := a.buildInterceptor(&cfg, old); err != nil {
		if old == nil || a.up != old.up {
			_ = a.up.Close()
		}
		return nil, err
	}
	return a, nil
}

// buildLeaves puts in a the old Leaves when the CA files hold the same bytes and the leaf
// settings did not change, otherwise new ones. The files are read, and the CA checked, at
// every build: a CA that no longer loads fails it.
func (a *Assembly) buildLeaves(cfg *AssemblyConfig, old *Assembly) error {
	ca, certPEM, keyPEM, err := LoadCAFiles(cfg.CACertFile, cfg.CAKeyFile, cfg.AllowReadableCAKey)
	if err != nil {
		return err
	}
	h := sha256.New()
	h.Write(certPEM)
	h.Write([]byte{0})
	h.Write(keyPEM)
	a.leavesKey = leavesKey{cfg: cfg.Leaves}
	h.Sum(a.leavesKey.ca[:0])
	if old != nil && old.leavesKey == a.leavesKey {
		a.leaves = old.leaves
		return nil
	}
	a.leaves, err = cfg.Leaves.NewLeaves(ca)
	return err
}

// buildUpstream puts in a the old Upstream when nothing it is built from changed, so that
// its idle target connections carry over; otherwise a new one.
func (a *Assembly) buildUpstream(cfg *AssemblyConfig, old *Assembly) error {
	up := cfg.Upstream
	a.upKey = upstreamKey{proxy: cfg.Proxy, cfg: up}
	var roots []byte
	if up.RootsFile != "" {
		var err error
		if roots, err = os.ReadFile(up.RootsFile); err != nil {
			return fmt.Errorf("read upstream CA file: %w", err)
		}
		a.upKey.roots = sha256.Sum256(roots)
	}
	if old != nil && old.upKey == a.upKey {
		a.up = old.up
		return nil
	}
	uc := UpstreamConfig{
		Dialer:                     cfg.Proxy.Dialer(),
		InsecureSkipVerifyUpstream: up.InsecureSkipVerifyUpstream,
		UpstreamTimeout:            up.Timeout,
		MaxIdleConnsPerTarget:      up.MaxIdleConnsPerTarget,
		MaxIdleConns:               up.MaxIdleConns,
		IdleConnTimeout:            up.IdleConnTimeout,
		Via:                        up.Via,
		Logger:                     cfg.Logger,
	}
	if roots != nil {
		pool, err := LoadRoots(up.RootsFile)
		if err != nil {
			return err
		}
		uc.RootCAs = pool
	}
	u, err := NewUpstream(uc)
	if err != nil {
		return err
	}
	a.up = u
	return nil
}

// buildInterceptor puts in a the old Interceptor, with its sessions, when nothing it is
// built from changed; otherwise a new one, serving.
func (a *Assembly) buildInterceptor(cfg *AssemblyConfig, old *Assembly) error {
	a.icKey = interceptorKey{
		proxy: cfg.Proxy, leaves: a.leaves, only: cfg.Intercept, bypass: cfg.Bypass,
		handshake: cfg.HandshakeTimeout, idle: cfg.IdleTimeout, http2: !cfg.DisableHTTP2,
		readHeader: cfg.ReadHeaderTimeout, read: cfg.ReadTimeout, write: cfg.WriteTimeout,
		maxHeaderBytes: cfg.MaxHeaderBytes, name: cfg.Name,
	}
	if old != nil && reflect.DeepEqual(old.icKey, a.icKey) {
		a.ic, a.chain = old.ic, old.chain
		return nil
	}
	only, err := ParseRules(cfg.Intercept)
	if err != nil {
		return fmt.Errorf("intercept rules: %w", err)
	}
	bypass, err := ParseRules(cfg.Bypass)
	if err != nil {
		return fmt.Errorf("bypass rules: %w", err)
	}
	a.chain = new(innerChain)
	a.chain.h.Store(&a.next)
	a.ic, err = New(Config{
		Leaves:            a.leaves,
		Handler:           a.chain,
		Intercept:         only,
		Bypass:            bypass,
		Policy:            cfg.Proxy.Dialer().Policy(),
		HandshakeTimeout:  cfg.HandshakeTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		DisableHTTP2:      cfg.DisableHTTP2,
		Logger:            cfg.Logger,
	})
	return err
}

// Wrap returns h (the forward proxy) behind a's Interceptor.
func (a *Assembly) Wrap(h http.Handler) http.Handler { return a.ic.Wrap(h) }

// Commit points a's Interceptor, when the build kept it, at a's handler: the requests its
// sessions send from now on go through a's limits. It is a no-op for a new Interceptor.
func (a *Assembly) Commit() { a.chain.h.Store(&a.next) }

// Discard closes what a does not share with old (nil: everything), for an Assembly that was
// built and will not serve.
func (a *Assembly) Discard(old *Assembly) {
	if old == nil || a.ic != old.ic {
		_ = a.ic.Close()
	}
	if old == nil || a.up != old.up {
		_ = a.up.Close()
	}
}

// Replaced reports whether next (nil: the listener is gone) replaces a part of a, which
// [Assembly.Retire] then retires.
func (a *Assembly) Replaced(next *Assembly) bool {
	return next == nil || next.ic != a.ic || next.up != a.up
}

// Retire retires what a has and next (nil: the listener is gone) does not: a replaced
// Interceptor stops intercepting new CONNECTs, lets the requests under way finish within
// next's drain time (a's without next), closing its sessions as they fall idle, then cuts
// what is left, or sooner when ctx ends; a replaced Upstream closes its idle target
// connections once that Interceptor is done. It returns once done, reporting whether
// sessions had to be cut, and how many the Interceptor still held then.
func (a *Assembly) Retire(ctx context.Context, next *Assembly) (cut bool, sessions int) {
	oldIC, oldUp := a.ic, a.up
	drain := a.drain
	if next != nil {
		drain = next.drain
		if next.ic == oldIC {
			oldIC = nil
		}
		if next.up == oldUp {
			oldUp = nil
		}
	}
	if oldIC != nil {
		ctx, cancel := context.WithTimeout(ctx, drain)
		if err := oldIC.Shutdown(ctx); err != nil {
			cut, sessions = true, oldIC.Sessions()
		}
		cancel()
		a.chain.waitIdle(a.wait)
	}
	if oldUp != nil {
		_ = oldUp.Close()
	}
	return cut, sessions
}

// Shutdown shuts a's Interceptor down ([Interceptor.Shutdown]) and returns once the
// requests inside its sessions have returned too (within the Wait of a's config once they
// were cut), so that their permits are back.
func (a *Assembly) Shutdown(ctx context.Context) error {
	err := a.ic.Shutdown(ctx)
	a.chain.waitIdle(a.wait)
	return err
}

// Close closes a's Interceptor at once and waits, as Shutdown does, for the requests inside
// its sessions to return.
func (a *Assembly) Close() error {
	_ = a.ic.Close()
	a.chain.waitIdle(a.wait)
	return nil
}

// CloseAll closes a's Interceptor and Upstream at once, without waiting, for a server that
// stops.
func (a *Assembly) CloseAll() {
	_ = a.ic.Close()
	_ = a.up.Close()
}

// Interceptor returns a's Interceptor, for its counts.
func (a *Assembly) Interceptor() *Interceptor { return a.ic }

// Upstream returns a's Upstream, for its counts.
func (a *Assembly) Upstream() *Upstream { return a.up }

// Stats returns the counts of a's Interceptor (with its Leaves) and Upstream.
func (a *Assembly) Stats() (Stats, UpstreamStats) { return a.ic.Stats(), a.up.Stats() }

// Collector returns the Prometheus collector of a's Interceptor and Upstream
// ([NewCollector]).
func (a *Assembly) Collector(constLabels prometheus.Labels) *Collector {
	return NewCollector(a.ic, a.up, constLabels)
}

// CAFileError is an error of [LoadCAFiles] about one of the two CA files: File cannot be
// read, or what it holds is wrong (a certificate that is not a CA valid now, a key that
// does not parse or match, a key file others may read). Cert says whether File is the
// certificate file rather than the key file.
type CAFileError struct {
	File string
	Cert bool
	Err  error
}

func (e *CAFileError) Error() string { return e.Err.Error() }
func (e *CAFileError) Unwrap() error { return e.Err }

// LoadCAFiles reads and parses the CA in certFile and keyFile ([ParseCA]), then, unless
// allowReadableKey, checks that keyFile is not readable by group or others
// ([CheckKeyFile]). It returns the CA and the bytes of both files, or a *[CAFileError]
// naming the file at fault.
func LoadCAFiles(certFile, keyFile string, allowReadableKey bool) (ca *CA, certPEM, keyPEM []byte, err error) {
	if certPEM, err = os.ReadFile(certFile); err != nil {
		return nil, nil, nil, &CAFileError{File: certFile, Cert: true, Err: err}
	}
	if keyPEM, err = os.ReadFile(keyFile); err != nil {
		return nil, nil, nil, &CAFileError{File: keyFile, Err: err}
	}
	if ca, err = ParseCA(certPEM, keyPEM); err != nil {
		if caCertProblem(certPEM, err) {
			return nil, nil, nil, &CAFileError{File: certFile, Cert: true, Err: err}
		}
		return nil, nil, nil, &CAFileError{File: keyFile, Err: err}
	}
	if !allowReadableKey {
		if err := CheckKeyFile(keyFile); err != nil {
			return nil, nil, nil, &CAFileError{File: keyFile, Err: err}
		}
	}
	return ca, certPEM, keyPEM, nil
}

// caCertProblem reports whether err, from ParseCA, is about the certificate rather than the
// key. ParseCA reads the first certificate, then the key, then checks that they match (a
// key problem), then that the certificate is a CA valid now.
func caCertProblem(certPEM []byte, err error) bool {
	if errors.Is(err, ErrNotCA) || errors.Is(err, ErrCAExpired) || errors.Is(err, ErrCANotYetValid) {
		return true
	}
	for rest := certPEM; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			return true // no certificate at all
		}
		if b.Type == "CERTIFICATE" {
			_, perr := x509.ParseCertificate(b.Bytes)
			return perr != nil
		}
	}
}
