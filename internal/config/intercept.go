package config

import (
	"slices"
	"time"
)

// Defaults of the intercept block. Each field's comment names the one it uses.
const (
	DefaultInterceptHandshakeTimeout = 10 * time.Second
	DefaultInterceptIdleTimeout      = 5 * time.Minute
	DefaultLeafValidity              = 24 * time.Hour
	DefaultLeafCacheSize             = 1024
	// MaxLeafValidity is the longest leaf validity accepted: Apple's platforms refuse TLS
	// server certificates valid for longer than 825 days, whoever signed them.
	MaxLeafValidity = 825 * 24 * time.Hour
)

// Intercept turns on TLS interception for the CONNECTs of a forward listener: instead of
// a tunnel it cannot see into, the proxy answers 200, takes the client's TLS handshake
// with a certificate its CA signs for the name the client asked for, and serves the
// requests inside one by one, each under the listener's rate and limits. Clients must
// trust the CA.
type Intercept struct {
	// CACert is the PEM file of the CA certificate (then, optionally, the certificates
	// that chain it to a root, sent after each leaf), as `portcullis ca create` writes it.
	// Validate checks that it can be read; it must load with CAKey when the daemon builds the
	// configuration (daemon.Check: `portcullis check`, start and every reload). Required.
	CACert string `yaml:"ca_cert"`

	// CAKey is the PEM file of the CA's private key, unencrypted: ECDSA, or RSA of at least
	// 2048 bits. It may be the same file as CACert. Required.
	CAKey string `yaml:"ca_key"`

	// AllowReadableCAKey loads CAKey even when its group or others may read it. False (the
	// default) refuses such a key, at validation and at every reload, naming the file and
	// its mode, as ssh refuses a private key others can read: whoever reads it can mint
	// certificates every client of the proxy trusts. For keys whose mode the operator
	// cannot choose (a mounted secret), with the directory protecting them instead.
	AllowReadableCAKey bool `yaml:"allow_readable_ca_key"`

	// Intercept lists the targets to intercept: host names ("example.com"), every name
	// under a domain ("*.example.com"), IP addresses and networks ("10.0.0.0/8"), without
	// ports. Nil means every target that Bypass does not name.
	Intercept []string `yaml:"intercept"`

	// Bypass lists the targets left as plain tunnels, in the form of Intercept: clients
	// that pin their server's certificate or use client certificates. It wins over
	// Intercept. Nil means none.
	Bypass []string `yaml:"bypass"`

	// HandshakeTimeout bounds the client's TLS handshake after the 200; the CONNECT holds
	// its permits during it. Zero means DefaultInterceptHandshakeTimeout (10s). Negative
	// is invalid.
	HandshakeTimeout time.Duration `yaml:"handshake_timeout"`

	// IdleTimeout closes an intercepted session that waits this long for its next
	// request. Zero means DefaultInterceptIdleTimeout (5m). Negative is invalid.
	IdleTimeout time.Duration `yaml:"idle_timeout"`

	// HTTP2 offers h2 besides http/1.1 to clients inside intercepted sessions, by ALPN.
	// Nil (left out) means true; false offers HTTP/1.1 only.
	HTTP2 *bool `yaml:"http2"`

	// Leaves configures the certificates minted for the names clients ask for. The zero
	// value means every default.
	Leaves InterceptLeaves `yaml:"leaves"`

	// Upstream says how the targets of intercepted requests are trusted and waited for.
	// The zero value means the system's roots and the forward block's upstream_timeout.
	Upstream InterceptUpstream `yaml:"upstream"`
}

// InterceptLeaves configures the leaf certificates of an [Intercept] block.
type InterceptLeaves struct {
	// Validity is how long a leaf is valid from its minting (never past the CA's expiry):
	// short, so that a leaked leaf key is soon worthless. Zero means DefaultLeafValidity
	// (24h). Negative, and above MaxLeafValidity (825 days), are invalid.
	Validity time.Duration `yaml:"validity"`

	// RenewBefore is how long before its expiry a cached leaf is replaced by a new one.
	// Zero means a quarter of Validity (6h with the default). It must be less than
	// Validity; negative is invalid.
	RenewBefore time.Duration `yaml:"renew_before"`

	// CacheSize is how many leaves are kept, the least recently used dropped first; each
	// takes about 2 KiB. Zero means DefaultLeafCacheSize (1024). Negative is invalid.
	CacheSize int `yaml:"cache_size"`
}

// InterceptUpstream configures how an intercepting proxy reaches the targets of the
// requests inside sessions.
type InterceptUpstream struct {
	// CAFile is a PEM file of the authorities a target's certificate must chain to, for
	// private servers. Empty means the system's roots. It must hold at least one
	// certificate when the daemon builds the configuration (daemon.Check: `portcullis
	// check`, start and every reload); Validate checks that it can be read.
	CAFile string `yaml:"ca_file"`

	// InsecureSkipVerifyUpstream accepts any certificate from targets, expired,
	// self-signed or for another name: the proxy then vouches, to clients that trust its
	// CA, for servers it has not authenticated. For tests only. False (the default)
	// verifies the chain and the name. It cannot be combined with CAFile.
	InsecureSkipVerifyUpstream bool `yaml:"insecure_skip_verify_upstream"`

	// Timeout bounds the wait for a target's response head once a request is sent; past it
	// the client gets 504. Zero means the forward block's upstream_timeout (60s by
	// default). Negative is invalid.
	Timeout time.Duration `yaml:"timeout"`
}

// IsOfferingHTTP2 reports whether h2 is offered inside sessions (HTTP2 nil or true).
func (i *Intercept) IsOfferingHTTP2() bool { return i.HTTP2 == nil || *i.HTTP2 }

// effective fills the defaults of an intercept block, fw being the effective forward
// block that holds it.
func (i *Intercept) effective(fw *Forward) *Intercept {
	e := *i
	e.Intercept = slices.Clone(i.Intercept)
	e.Bypass = slices.Clone(i.Bypass)
	e.HandshakeTimeout = orDefault(e.HandshakeTimeout, DefaultInterceptHandshakeTimeout)
	e.IdleTimeout = orDefault(e.IdleTimeout, DefaultInterceptIdleTimeout)
	h2 := e.IsOfferingHTTP2()
	e.HTTP2 = &h2
	e.Leaves.Validity = orDefault(e.Leaves.Validity, DefaultLeafValidity)
	e.Leaves.RenewBefore = orDefault(e.Leaves.RenewBefore, e.Leaves.Validity/4)
	e.Leaves.CacheSize = orDefault(e.Leaves.CacheSize, DefaultLeafCacheSize)
	e.Upstream.Timeout = orDefault(e.Upstream.Timeout, fw.UpstreamTimeout)
	return &e
}
