package config

import (
	"net/netip"
	"slices"
	"time"
)

// ListenerMode is what an http or https [Listener] does with the requests it serves.
type ListenerMode string

// The listener modes.
const (
	// ModeReverse sends requests to the upstreams of the listener's routes: the daemon
	// stands in front of servers.
	ModeReverse ListenerMode = "reverse"
	// ModeForward carries each request to the target it names (absolute-form HTTP and
	// CONNECT tunnels): the daemon stands in front of clients.
	ModeForward ListenerMode = "forward"
)

// The limit keys of forward listeners.
const (
	// KeyProxyUser counts by the user name the listener's auth block verified. Forward
	// listeners with auth only.
	KeyProxyUser LimitKey = "proxy_user"
	// KeyTargetHost counts by the request's target, normalised ("example.com:443"). Forward
	// listeners only.
	KeyTargetHost LimitKey = "target_host"
	// KeyTargetAddr counts by the address and port the proxy connects to for the request
	// ("192.0.2.7:443", "[2001:db8::1]:443"): the first address of the target's name that the
	// destination policy allows, resolved once before the limits and then the only address
	// dialled. So one origin reached by several names, or by its IP literal, counts once.
	// Forward listeners without intercept only.
	KeyTargetAddr LimitKey = "target_addr"
)

// NoReclaim is the [Limit.ReclaimAfter] that never takes a permit back. In YAML it is
// written "none" (or 0).
const NoReclaim time.Duration = -1

// Defaults of the forward and auth blocks. Each field's comment names the one it uses.
const (
	DefaultReclaimAfter          = 10 * time.Minute
	DefaultRealm                 = "portcullis"
	DefaultAuthCacheSize         = 10000
	DefaultCheckTimeout          = 2 * time.Second
	DefaultFailureBurst          = 10
	DefaultFailureInterval       = 6 * time.Second
	DefaultDialTimeout           = 10 * time.Second
	DefaultTunnelIdleTimeout     = 5 * time.Minute
	DefaultTunnelLifetime        = 24 * time.Hour
	DefaultMaxIdleConnsPerTarget = 16
	DefaultMaxIdleTargetConns    = 1024
	DefaultTargetIdleTimeout     = 30 * time.Second
	DefaultVia                   = "portcullis"
	// MaxResponseBody is the largest body a limit's response may have, in bytes.
	MaxResponseBody = 64 << 10
)

// DefaultPorts are the target ports a forward listener allows when destinations.ports is
// left out: HTTP, HTTPS and every unprivileged port.
var DefaultPorts = []string{"80", "443", "1024-65535"}

// DefaultConnectPorts are the ports a forward listener's CONNECTs may reach when
// connect_ports is left out: HTTPS only.
var DefaultConnectPorts = []string{"443"}

// Auth is HTTP Basic authentication against an htpasswd file of bcrypt hashes, checked
// before any limit counts a request.
type Auth struct {
	// Htpasswd is the file of users, in Apache's htpasswd format with bcrypt hashes only
	// (`htpasswd -B`). Validate checks that it can be read; it must load when the daemon
	// builds the configuration (daemon.Check: `portcullis check`, start and every reload),
	// so a file that does not load fails the reload. Required.
	Htpasswd string `yaml:"htpasswd"`

	// Realm is the realm of the Basic challenge, shown by browsers: printable ASCII
	// without '"' or '\', at most 128 bytes. Empty means DefaultRealm ("portcullis").
	Realm string `yaml:"realm"`

	// CacheSize is how many verified credentials are remembered (by a keyed hash, never the
	// password) so that a client sending them again skips bcrypt. Zero means
	// DefaultAuthCacheSize (10000). -1 means no cache: every request pays bcrypt. Below -1
	// is invalid.
	CacheSize int `yaml:"cache_size"`

	// MaxConcurrentChecks bounds the bcrypt checks running at once over all clients. Zero
	// means half of the CPUs the daemon may use, at least 1, decided at start. Negative is
	// invalid.
	MaxConcurrentChecks int `yaml:"max_concurrent_checks"`

	// CheckTimeout bounds how long a request whose credentials are not cached waits for
	// its bcrypt check to start; past it the request gets 503 with Retry-After: 1. Zero
	// means DefaultCheckTimeout (2s). Negative is invalid.
	CheckTimeout time.Duration `yaml:"check_timeout"`

	// Failures limits failed attempts per client address: a client over its budget gets
	// 429 without any check, whatever it sends. The zero value means every default. Burst ×
	// Interval above 8760h is invalid.
	Failures AuthFailures `yaml:"failures"`
}

// AuthFailures is the budget of failed authentication attempts of one client address.
type AuthFailures struct {
	// Burst is how many failed attempts a client may make in a row before it is refused.
	// Zero means DefaultFailureBurst (10). Negative is invalid.
	Burst int `yaml:"burst"`

	// Interval is how often a refused client earns one more attempt. Zero means
	// DefaultFailureInterval (6s). Negative is invalid.
	Interval time.Duration `yaml:"interval"`
}

// Forward configures a forward listener (mode: forward).
type Forward struct {
	// Destinations says which targets may be reached. The zero value refuses loopback,
	// private, link-local and the other special-purpose ranges, and every port but 80, 443
	// and 1024-65535.
	Destinations Destinations `yaml:"destinations"`

	// DialTimeout bounds connecting to a target, name resolution included; past it the
	// client gets 504. Zero means DefaultDialTimeout (10s). Negative is invalid.
	DialTimeout time.Duration `yaml:"dial_timeout"`

	// UpstreamTimeout bounds the wait for a target's response head once an absolute-form
	// request was sent; past it the client gets 504. It does not bound the body. Zero means
	// DefaultUpstreamTimeout (60s). Negative is invalid.
	UpstreamTimeout time.Duration `yaml:"upstream_timeout"`

	// TunnelIdleTimeout closes a CONNECT tunnel through which no byte moved, or whose
	// writes made no progress, for this long. Zero means DefaultTunnelIdleTimeout (5m).
	// Negative is invalid.
	TunnelIdleTimeout time.Duration `yaml:"tunnel_idle_timeout"`

	// TunnelLifetime closes a CONNECT tunnel this long after it opened, however busy. Zero
	// means DefaultTunnelLifetime (24h). Negative is invalid.
	TunnelLifetime time.Duration `yaml:"tunnel_lifetime"`

	// MaxIdleConnsPerTarget is how many idle connections to one target host:port are kept
	// for later absolute-form requests. Zero means DefaultMaxIdleConnsPerTarget (16).
	// -1 means none are kept (a connection per request). Below -1 is invalid.
	MaxIdleConnsPerTarget int `yaml:"max_idle_conns_per_target"`

	// MaxIdleConns caps the idle target connections kept over every target together; when
	// that many are idle the oldest is closed to keep a newer one. Zero means
	// DefaultMaxIdleTargetConns (1024). Negative is invalid.
	MaxIdleConns int `yaml:"max_idle_conns"`

	// IdleConnTimeout is how long an idle target connection is kept. Zero means
	// DefaultTargetIdleTimeout (30s). Negative is invalid.
	IdleConnTimeout time.Duration `yaml:"idle_conn_timeout"`

	// AllowPublicClients serves clients from any address when the listener has neither
	// auth nor allow_file. False (the default) serves, in that case, clients on loopback,
	// private (10/8, 172.16/12, 192.168/16, fc00::/7), shared (100.64/10) and link-local
	// networks only, and answers others 403, so that a proxy bound to a public address
	// is not an open relay by accident (Squid ships allowing localnet only). With auth or
	// allow_file it changes nothing: they decide who may use the proxy.
	AllowPublicClients bool `yaml:"allow_public_clients"`

	// ConnectPorts lists the target ports a CONNECT may open a tunnel to: a port (443) or
	// a range ("8000-8999"), within 1 to 65535, as Squid's SSL_ports. A tunnel carries any
	// protocol, so the default keeps it to HTTPS; absolute-form requests follow
	// destinations.ports instead. Nil means DefaultConnectPorts ("443"); an empty list
	// refuses every CONNECT.
	ConnectPorts []string `yaml:"connect_ports"`

	// Via is the pseudonym the proxy adds to the Via header of what it forwards ("1.1
	// portcullis"); a request whose Via already holds it looped back and gets 508. Give
	// each proxy of a chain its own. Empty means DefaultVia ("portcullis"). It must be an
	// HTTP token of at most 64 bytes.
	Via string `yaml:"via"`

	// Limits are the concurrency limits of the listener's requests besides its
	// client_limit, outermost first: a request takes a permit of each, in order, and waits
	// in the queue of the first that has none free, holding the permits of those before it.
	// Keys: client_ip, proxy_user, target_host, target_addr or header:<Name>, each at most
	// once. Nil means none.
	Limits []Limit `yaml:"limits"`

	// Intercept turns on TLS interception of the listener's CONNECTs, so that the requests
	// inside are counted one by one (see [Intercept]). Nil means none: every CONNECT is a
	// plain tunnel.
	Intercept *Intercept `yaml:"intercept"`
}

// Destinations is the destination policy of a forward listener. Rules are checked on the
// address actually dialled, after name resolution.
type Destinations struct {
	// Allow lists networks that may be reached even though a built-in rule refuses them
	// (a private network the proxy serves, loopback in a test). Nil means none. Between
	// Allow and Deny the longest prefix holding an address decides; Deny wins a tie.
	Allow []netip.Prefix `yaml:"allow"`

	// Deny lists networks that must never be reached. Nil means none. Deny 0.0.0.0/0 and
	// ::/0 with a few Allow entries makes an allowlist.
	Deny []netip.Prefix `yaml:"deny"`

	// Ports lists the target ports absolute-form requests (GET http://host:port/) may use,
	// as Squid's Safe_ports: "443" or a range "1024-65535", within 1 to 65535. CONNECT
	// follows the forward block's connect_ports instead. Nil means DefaultPorts ("80",
	// "443", "1024-65535").
	Ports []string `yaml:"ports"`
}

// LimitResponse is what a limit answers a request it refuses, in place of the default body.
type LimitResponse struct {
	// Body is the body of the refusal, at most MaxResponseBody bytes. Empty means the
	// status text and a newline ("Too Many Requests").
	Body string `yaml:"body"`

	// Headers are added to the refusal, such as Content-Type (text/plain by default) or a
	// link to a status page. Names are HTTP field names, each at most once whatever its
	// case; values must not hold control characters. Retry-After is retry_after's, and the
	// framing headers (Content-Length, Transfer-Encoding, Connection and the other
	// hop-by-hop ones) are the server's: they are refused. Nil means none.
	Headers map[string]string `yaml:"headers"`
}

// effectiveForward fills the defaults of the auth and forward blocks of e, the effective
// copy of l, and the forward-only defaults of its limits.
func (e *Listener) effectiveForward(l *Listener) {
	if l.Auth != nil {
		a := l.Auth.effective()
		e.Auth = &a
	}
	if e.Mode != ModeForward {
		if l.Forward != nil { // invalid (Validate says so), but copied deeply all the same
			e.Forward = l.Forward.effective()
		}
		return
	}
	fw := Forward{}
	if l.Forward != nil {
		fw = *l.Forward
	}
	e.Forward = fw.effective()
	if e.ClientLimit != nil {
		e.ClientLimit.countTunnelsByDefault()
	}
}

func (a *Auth) effective() Auth {
	e := *a
	e.Realm = orDefault(e.Realm, DefaultRealm)
	e.CacheSize = orDefault(e.CacheSize, DefaultAuthCacheSize)
	e.CheckTimeout = orDefault(e.CheckTimeout, DefaultCheckTimeout)
	e.Failures.Burst = orDefault(e.Failures.Burst, DefaultFailureBurst)
	e.Failures.Interval = orDefault(e.Failures.Interval, DefaultFailureInterval)
	return e
}

func (f *Forward) effective() *Forward {
	e := *f
	e.Destinations.Allow = slices.Clone(f.Destinations.Allow)
	e.Destinations.Deny = slices.Clone(f.Destinations.Deny)
	e.Destinations.Ports = slices.Clone(f.Destinations.Ports)
	if e.Destinations.Ports == nil {
		e.Destinations.Ports = slices.Clone(DefaultPorts)
	}
	e.ConnectPorts = slices.Clone(f.ConnectPorts)
	if e.ConnectPorts == nil {
		e.ConnectPorts = slices.Clone(DefaultConnectPorts)
	}
	e.DialTimeout = orDefault(e.DialTimeout, DefaultDialTimeout)
	e.UpstreamTimeout = orDefault(e.UpstreamTimeout, DefaultUpstreamTimeout)
	e.TunnelIdleTimeout = orDefault(e.TunnelIdleTimeout, DefaultTunnelIdleTimeout)
	e.TunnelLifetime = orDefault(e.TunnelLifetime, DefaultTunnelLifetime)
	e.MaxIdleConnsPerTarget = orDefault(e.MaxIdleConnsPerTarget, DefaultMaxIdleConnsPerTarget)
	e.MaxIdleConns = orDefault(e.MaxIdleConns, DefaultMaxIdleTargetConns)
	e.IdleConnTimeout = orDefault(e.IdleConnTimeout, DefaultTargetIdleTimeout)
	e.Via = orDefault(e.Via, DefaultVia)
	if f.Limits != nil {
		e.Limits = make([]Limit, len(f.Limits))
		for i := range f.Limits {
			e.Limits[i] = f.Limits[i].effective(false)
			e.Limits[i].countTunnelsByDefault()
		}
	}
	if f.Intercept != nil {
		e.Intercept = f.Intercept.effective(&e)
	}
	return &e
}

// IsLocalClientsOnly reports whether l is a forward listener that serves loopback and
// private client addresses only: it has no auth, no allow_file and no
// forward.allow_public_clients.
func (l *Listener) IsLocalClientsOnly() bool {
	return l.IsForward() && l.Auth == nil && l.AllowFile == "" && (l.Forward == nil || !l.Forward.AllowPublicClients)
}

// IsOpenRelay reports whether l is a forward listener that serves any client without
// authentication or an allow list: forward.allow_public_clients with neither auth nor
// allow_file.
func (l *Listener) IsOpenRelay() bool {
	return l.IsForward() && l.Auth == nil && l.AllowFile == "" && l.Forward != nil && l.Forward.AllowPublicClients
}

// countTunnelsByDefault spells out count_tunnels for a limit of a forward listener.
func (l *Limit) countTunnelsByDefault() {
	if l.CountTunnels == nil {
		t := true
		l.CountTunnels = &t
	}
}

// IsCountingTunnels reports whether the limit counts CONNECT tunnels (CountTunnels nil or
// true).
func (l *Limit) IsCountingTunnels() bool { return l.CountTunnels == nil || *l.CountTunnels }
