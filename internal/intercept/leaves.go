package intercept

import (
	"container/list"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/seed-a07d1050/portcullis/internal/forward"
)

// Defaults of [LeavesConfig].
const (
	DefaultLeafValidity = 24 * time.Hour
	DefaultLeafBackdate = time.Hour
	DefaultLeafCache    = 1024
)

// ErrNotPermitted is returned by [Leaves.Get] for a host outside the CA's
// name constraints: clients would refuse its certificate.
var ErrNotPermitted = errors.New("intercept: the CA's name constraints do not permit this host")

// LeavesConfig configures [Leaves]. CA is required; the other fields may
// be left zero.
type LeavesConfig struct {
	// CA signs the leaves. Required: nil is refused by NewLeaves.
	CA *CA

	// Validity is how long a leaf is valid from its minting (never past
	// the CA's own expiry). Short, so that a leaked leaf key is soon
	// worthless. Zero means DefaultLeafValidity (24 h); negative is
	// invalid.
	Validity time.Duration

	// Backdate moves a leaf's NotBefore this far into the past, so that a
	// client whose clock lags accepts it. Zero means DefaultLeafBackdate
	// (1 h); negative means none.
	Backdate time.Duration

	// RenewBefore is how long before its expiry a cached leaf is replaced
	// by a new one; a handshake never gets a leaf with less validity left,
	// unless the CA itself expires sooner. Zero means a quarter of
	// Validity; it must be less than Validity, and not negative.
	RenewBefore time.Duration

	// CacheSize is how many leaves are kept, the least recently used
	// dropped first. Zero means DefaultLeafCache (1024); negative is
	// invalid. Each leaf takes about 2 KiB.
	CacheSize int
}

// Leaves mints leaf certificates for the names an intercepting proxy
// impersonates, signed by its CA, and keeps them in a bounded LRU cache:
// an ECDSA P-256 key per leaf, a DNS name or IP address SAN, short
// validity, renewed before expiry. Concurrent requests for a name that is
// not cached share one minting, so a name is minted at most once however
// many handshakes ask for it at once. Leaves is safe for concurrent use.
type Leaves struct {
	ca       *CA
	validity time.Duration
	backdate time.Duration
	renew    time.Duration
	size     int
	now      func() time.Time // time.Now; tests replace it

	flight singleflight.Group

	mu    sync.Mutex
	lru   *list.List // of *leafEntry, most recently used first
	byKey map[string]*list.Element

	minted, hits, shared, errs, evicted atomic.Uint64
}

type leafEntry struct {
	key     string
	cert    *tls.Certificate
	renewAt time.Time
	expires time.Time
}

// NewLeaves returns the Leaves of cfg, or an error naming the first
// invalid field.
func NewLeaves(cfg LeavesConfig) (*Leaves, error) {
	if cfg.CA == nil {
		return nil, errors.New("intercept: LeavesConfig.CA is required")
	}
	l := &Leaves{
		ca:       cfg.CA,
		validity: cfg.Validity,
		backdate: cfg.Backdate,
		renew:    cfg.RenewBefore,
		size:     cfg.CacheSize,
		now:      time.Now,
		lru:      list.New(),
		byKey:    make(map[string]*list.Element),
	}
	switch {
	case l.validity == 0:
		l.validity = DefaultLeafValidity
	case l.validity < 0:
		return nil, fmt.Errorf("intercept: LeavesConfig.Validity must not be negative (got %s)", l.validity)
	}
	switch {
	case l.backdate == 0:
		l.backdate = DefaultLeafBackdate
	case l.backdate < 0:
		l.backdate = 0
	}
	switch {
	case l.renew == 0:
		l.renew = l.validity / 4
	case l.renew < 0 || l.renew >= l.validity:
		return nil, fmt.Errorf("intercept: LeavesConfig.RenewBefore must be in [0, Validity) (got %s, Validity %s)", l.renew, l.validity)
	}
	switch {
	case l.size == 0:
		l.size = DefaultLeafCache
	case l.size < 0:
		return nil, fmt.Errorf("intercept: LeavesConfig.CacheSize must not be negative (got %d)", l.size)
	}
	return l, nil
}

// CA returns the CA that signs the leaves.
func (l *Leaves) CA() *CA { return l.ca }

// Get returns the leaf for host, a DNS name or an IP address (IPv6 without
// brackets), with the CA's certificate chain after it: from the cache when
// one is there with more than RenewBefore left, otherwise minted (once for
// all the callers asking for host meanwhile). The name is normalised as
// proxy targets are (lower case, no trailing dot, IDNA to ASCII; an
// IPv4-mapped address as IPv4). It returns an error for a host that is no
// valid name or address, [ErrNotPermitted] for one outside the CA's name
// constraints, [ErrCAExpired] once the CA has expired, and the error of
// the random source. When a renewal fails, the leaf in the cache is
// returned while it is still valid. The caller must not modify the
// returned certificate.
func (l *Leaves) Get(host string) (*tls.Certificate, error) {
	key, ip, err := leafKey(host)
	if err != nil {
		l.errs.Add(1)
		return nil, err
	}
	if c := l.cached(key, l.now()); c != nil {
		l.hits.Add(1)
		return c, nil
	}
	led := false // this call ran the flight; Do reports shared to its leader too
	v, err, shared := l.flight.Do(key, func() (any, error) {
		led = true
		now := l.now()
		// A minting that ended between the look-up above and this flight
		// has stored the leaf: use it rather than mint again.
		if c := l.cached(key, now); c != nil {
			l.hits.Add(1)
			return c, nil
		}
		return l.mintAndStore(key, ip, now)
	})
	if shared && !led {
		l.shared.Add(1)
	}
	if err != nil {
		return nil, err
	}
	return v.(*tls.Certificate), nil
}

// GetCertificate returns the leaf for hello's server name, as
// tls.Config.GetCertificate. A hello without one (no SNI) is refused: an
// interceptor falls back on the CONNECT's authority itself.
func (l *Leaves) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if hello.ServerName == "" {
		return nil, errors.New("intercept: the client sent no server name (SNI)")
	}
	return l.Get(hello.ServerName)
}

// leafKey validates and normalises host.
func leafKey(host string) (string, netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return "", netip.Addr{}, fmt.Errorf("intercept: leaf for %q: an address with a zone", host)
		}
		a = a.Unmap()
		return a.String(), a, nil
	}
	if strings.ContainsAny(host, ":[]") {
		return "", netip.Addr{}, fmt.Errorf("intercept: leaf for %q: not a host name (a port or brackets)", truncate(host, 80))
	}
	t, err := forward.ParseTarget(host, 443)
	if err != nil {
		return "", netip.Addr{}, fmt.Errorf("intercept: leaf for %q: %w", truncate(host, 80), err)
	}
	if t.Addr().IsValid() {
		return "", netip.Addr{}, fmt.Errorf("intercept: leaf for %q: not a host name", truncate(host, 80))
	}
	return t.Host(), netip.Addr{}, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// cached returns the cached leaf of key if it is not due for renewal,
// marking it recently used.
func (l *Leaves) cached(key string, now time.Time) *tls.Certificate {
	l.mu.Lock()
	defer l.mu.Unlock()
	el, ok := l.byKey[key]
	if !ok {
		return nil
	}
	e := el.Value.(*leafEntry)
	if !now.Before(e.renewAt) {
		return nil
	}
	l.lru.MoveToFront(el)
	return e.cert
}

// stale returns the cached leaf of key while it is still valid, for when
// its renewal failed.
func (l *Leaves) stale(key string, now time.Time) *tls.Certificate {
	l.mu.Lock()
	defer l.mu.Unlock()
	if el, ok := l.byKey[key]; ok {
		if e := el.Value.(*leafEntry); now.Before(e.expires) {
			return e.cert
		}
	}
	return nil
}

func (l *Leaves) mintAndStore(key string, ip netip.Addr, now time.Time) (*tls.Certificate, error) {
	cert, err := l.mint(key, ip, now)
	if err != nil {
		l.errs.Add(1)
		if old := l.stale(key, now); old != nil {
			return old, nil
		}
		return nil, err
	}
	l.minted.Add(1)
	l.store(key, cert, now)
	return cert, nil
}

func (l *Leaves) store(key string, cert *tls.Certificate, now time.Time) {
	expires := cert.Leaf.NotAfter
	// Renew RenewBefore ahead of expiry, or, when the CA's expiry cut the
	// leaf short, once three quarters of its life are gone, so that a
	// short leaf is not minted again at every handshake.
	ahead := l.renew
	if life := expires.Sub(now); life < l.validity {
		ahead = min(ahead, life/4)
	}
	e := &leafEntry{key: key, cert: cert, renewAt: expires.Add(-ahead), expires: expires}
	l.mu.Lock()
	defer l.mu.Unlock()
	if el, ok := l.byKey[key]; ok {
		el.Value = e
		l.lru.MoveToFront(el)
		return
	}
	l.byKey[key] = l.lru.PushFront(e)
	for l.lru.Len() > l.size {
		last := l.lru.Back()
		l.lru.Remove(last)
		delete(l.byKey, last.Value.(*leafEntry).key)
		l.evicted.Add(1)
	}
}

// mint makes and signs a leaf for host (a normalised name, or ip when
// valid).
func (l *Leaves) mint(host string, ip netip.Addr, now time.Time) (*tls.Certificate, error) {
	ca := l.ca.cert
	if !now.Before(ca.NotAfter) {
		return nil, fmt.Errorf("%w: %s expired on %s; no leaf can be signed", ErrCAExpired, describeSubject(ca), ca.NotAfter.UTC().Format(time.RFC3339))
	}
	if !l.ca.Permits(host) {
		return nil, fmt.Errorf("%w: %s", ErrNotPermitted, host)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("intercept: leaf key for %s: %w", host, err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		NotBefore:             maxTime(now.Add(-l.backdate), ca.NotBefore),
		NotAfter:              minTime(now.Add(l.validity), ca.NotAfter),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	if len(host) <= 64 { // ub-common-name; the SAN is what clients check
		tmpl.Subject = pkix.Name{CommonName: host}
	}
	if ip.IsValid() {
		tmpl.IPAddresses = []net.IP{ip.AsSlice()}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, l.ca.key)
	if err != nil {
		return nil, fmt.Errorf("intercept: sign leaf for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("intercept: parse leaf for %s: %w", host, err)
	}
	chain := make([][]byte, 0, 1+len(l.ca.chain))
	chain = append(chain, der)
	chain = append(chain, l.ca.chain...)
	return &tls.Certificate{Certificate: chain, PrivateKey: key, Leaf: leaf}, nil
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// LeafStats are the counts of a [Leaves] since it was made.
type LeafStats struct {
	Minted  uint64 // leaves minted and signed
	Hits    uint64 // requests answered from the cache
	Shared  uint64 // requests that waited for another request's minting of the same name
	Errors  uint64 // requests that failed: a bad name, a name the CA may not sign, an expired CA, a failed signature
	Evicted uint64 // leaves dropped from the full cache, least recently used first
	Cached  int    // leaves in the cache now
}

// Stats returns the counts of l.
func (l *Leaves) Stats() LeafStats {
	l.mu.Lock()
	n := l.lru.Len()
	l.mu.Unlock()
	return LeafStats{
		Minted:  l.minted.Load(),
		Hits:    l.hits.Load(),
		Shared:  l.shared.Load(),
		Errors:  l.errs.Load(),
		Evicted: l.evicted.Load(),
		Cached:  n,
	}
}
