package config

import (
	"net/netip"
	"time"
)

// Config is the whole daemon configuration, the root of the YAML document.
//
// The zero Config is not valid: it has no listener. Every other zero field means its
// default. Use [Parse] or [Load] to read one from YAML, [Config.Validate] to check one built
// in Go, and [Config.Effective] for a copy with every default filled in.
type Config struct {
	// Log says how the daemon logs. The zero value logs text at info, without access logs.
	Log Log `yaml:"log"`

	// Admin is the admin HTTP listener (metrics, limiter snapshots, health).
	// The zero value has no admin listener.
	Admin Admin `yaml:"admin"`

	// ShutdownTimeout is how long the daemon lets in-flight exchanges and tunnels finish
	// after SIGTERM before it closes them. Zero means DefaultShutdownTimeout (30s).
	// Negative is invalid.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`

	// Cluster makes route limits, client limits, connection caps and rates count
	// cluster-wide on Redis. Nil means every node counts on its own.
	Cluster *Cluster `yaml:"cluster"`

	// Listeners are the sockets the daemon serves, in order. At least one is required.
	Listeners []Listener `yaml:"listeners"`

	// src remembers where each field came from in the YAML text, for error positions.
	// Nil for a Config built in Go.
	src *source
}

// Log configures the daemon's log/slog output (stderr).
type Log struct {
	// Format is the log line format. Empty means LogText.
	Format LogFormat `yaml:"format"`

	// Level is the lowest level logged. Empty means LevelInfo.
	Level LogLevel `yaml:"level"`

	// AccessLog logs one line per HTTP exchange and per TCP connection, at info,
	// as nginx does by default. Nil (unset) means true; false logs none. See
	// [Log.IsAccessLogOn].
	AccessLog *bool `yaml:"access_log"`
}

// IsAccessLogOn reports whether the access log is on: AccessLog nil or true.
func (l Log) IsAccessLogOn() bool { return l.AccessLog == nil || *l.AccessLog }

// Admin configures the admin HTTP listener.
type Admin struct {
	// Listen is the host:port of the admin listener. Empty means no admin listener.
	// Port 0 picks a free port.
	Listen string `yaml:"listen"`

	// TokenFile is a file holding the bearer token every admin endpoint but /healthz and
	// /readyz then requires (Authorization: Bearer <token>; others get 401). The token is the
	// file's content without surrounding white space: at least 16 characters of RFC 6750's
	// token alphabet (letters, digits, '-', '.', '_', '~', '+', '/', then optional '='), as
	// `openssl rand -hex 32` writes. It is read again on every reload. Empty means no token:
	// whoever reaches the admin listener reads every endpoint. Requires Listen.
	TokenFile string `yaml:"token_file"`
}

// Cluster makes limits count across every node sharing one Redis.
//
// Route limits (limit and shadow_limit), listener client limits, listener and route rates
// and, unless LocalConnectionCaps is set, the accept-time per-client connection caps,
// conn_rate and handshake_rate then count cluster-wide. max_conns always counts on the node alone. A key that a limit or cap leaves
// unlimited never reaches Redis: a listener with max_conns_per_client -1 makes no Redis call
// per connection, and is not refused while Redis is away.
type Cluster struct {
	// Redis says how to reach Redis. Required.
	Redis Redis `yaml:"redis"`

	// Prefix starts every Redis key the daemon writes, so several deployments can share one
	// Redis. Empty means DefaultRedisPrefix ("portcullis:").
	Prefix string `yaml:"prefix"`

	// Lease is how long a node's permits live in Redis without renewal: the permits of a
	// node that died come back within one Lease. Zero means DefaultLease (15s). Values
	// below 1s are invalid.
	Lease time.Duration `yaml:"lease"`

	// Timeout bounds each Redis call. Zero means DefaultRedisTimeout (50ms), or
	// DefaultRedisTLSTimeout (250ms) with Redis.TLS enabled, where a new connection's
	// handshake must fit in it too. It must be shorter than Lease. Negative is invalid.
	Timeout time.Duration `yaml:"timeout"`

	// OnError says what a node does while Redis fails or is too slow. Empty means OnErrorOpen.
	OnError OnError `yaml:"on_error"`

	// NodeShare is the fraction, in (0, 1], of each limit that a node enforces on its own
	// while OnError is open and Redis is away: a node then admits at most
	// ceil(NodeShare × permits) (at least 1) per key. Zero means DefaultNodeShare (1.0, the
	// whole limit on every node, so a cluster of N nodes may admit up to N times the limit
	// during the outage). Negative, above 1 and NaN are invalid.
	NodeShare float64 `yaml:"node_share"`

	// LocalConnectionCaps keeps the accept-time per-client connection caps
	// (max_conns_per_client, prefix_levels, conn_overrides) counting on each node alone.
	// False, the zero value, counts them across the cluster too: a connection is then
	// admitted on its own goroutine after one Redis round trip, never in the accept loop.
	// max_conns always counts per node. The same holds for conn_rate and handshake_rate.
	LocalConnectionCaps bool `yaml:"local_connection_caps"`

	// LocalShare is the part of a rate's burst capacity (burst+1) a node may admit for a key
	// without asking Redis, the rate's local fast path: up to floor((burst+1) × LocalShare)
	// requests, sent to Redis in the next flush. N nodes may so admit up to N times that many
	// requests beyond the exact rate, once per burst (docs/cluster.md). Zero means none: every
	// admission asks Redis and the cluster rate is exact. Negative, above 1 and NaN are
	// invalid.
	LocalShare float64 `yaml:"local_share"`

	// RateLease is how many tokens of a rate a node takes from Redis in one call for a key
	// busy on it (its previous request there came within RateLease intervals of the rate),
	// then admits locally without a round trip: at most half the key's burst capacity
	// ((burst+1)/2), only as many as the key's state admits at once, and with nginx's
	// delay=N only within the undelayed part. Each token expires when Redis's schedule
	// reaches its slot, so the cluster rate stays exact: other nodes may be refused earlier
	// by the tokens a node holds, never admit more (docs/cluster.md). Zero means
	// DefaultRateLease (32); 1 means no lease (every admission asks Redis). Negative is
	// invalid.
	RateLease int `yaml:"rate_lease"`

	// SpareShare is the part of a concurrency limit (route limit, client limit, connection
	// cap) a node may keep counted in Redis beyond the permits it holds, for a key busy on
	// it (acquired within release_hold): up to floor(limit × SpareShare) permits it released
	// stay counted for the node while the key stays busy, so that its next requests take
	// them back without a round trip. Exact: other nodes may be refused earlier by those
	// spares, never admit more; a node that dies loses them with its lease. Zero means
	// DefaultSpareShare (0.1); -1 means none (a busy key's releases are sent after
	// release_hold, as without it). Other negative values, above 1 and NaN are invalid.
	SpareShare float64 `yaml:"spare_share"`

	// ReleaseHold is how long a node keeps a permit it released (a route limit's, a client
	// limit's, a connection cap's) counted in Redis before it sends the release, so that the
	// same key's next request on this node takes the permit back without a round trip. It is
	// exact (Redis still counts the permit for this node); meanwhile other nodes see the
	// permit as held and their waiters wake up to ReleaseHold later. Zero means
	// DefaultReleaseHold (10ms). Negative, or above lease/3, is invalid.
	ReleaseHold time.Duration `yaml:"release_hold"`

	// FlushInterval is how often a node sends Redis the rate admissions it made without
	// asking (fast path, TryReserve, on_error open) and the delayed requests given back, in
	// one pipeline. Zero means DefaultFlushInterval (10ms). Negative is invalid.
	FlushInterval time.Duration `yaml:"flush_interval"`
}

// Redis is how the daemon connects to Redis.
type Redis struct {
	// Addrs are host:port addresses. One address means a single Redis server; several mean
	// the seed nodes of a Redis Cluster. Exactly one of Addrs and SentinelAddrs is
	// required; no duplicates.
	Addrs []string `yaml:"addrs"`

	// SentinelAddrs are the host:port addresses of Redis Sentinels, which tell the daemon
	// which server is the master named MasterName and which one replaced it after a
	// failover. Empty means no Sentinel (then Addrs is required); no duplicates.
	SentinelAddrs []string `yaml:"sentinel_addrs"`

	// MasterName is the name of the master the Sentinels watch. Required with
	// SentinelAddrs, invalid without. Empty means no Sentinel.
	MasterName string `yaml:"master_name"`

	// SentinelPasswordFile is a file holding the Sentinels' own password (requirepass of
	// the Sentinels; one trailing newline is ignored). Only with SentinelAddrs. Empty means
	// the Sentinels need no password; it must be readable and non-empty at Validate time.
	SentinelPasswordFile string `yaml:"sentinel_password_file"`

	// Username is the Redis ACL user. Empty means the default user.
	Username string `yaml:"username"`

	// PasswordFile is a file holding the Redis password (one trailing newline is ignored).
	// Empty means no password. It must be readable and non-empty at Validate time.
	PasswordFile string `yaml:"password_file"`

	// DB is the Redis database number. Zero is database 0. Negative is invalid, and a Redis
	// Cluster (several Addrs) only has database 0.
	DB int `yaml:"db"`

	// TLS configures TLS to Redis. The zero value is plain TCP.
	TLS RedisTLS `yaml:"tls"`
}

// RedisTLS configures the TLS client connection to Redis.
//
// The file and name fields are only accepted with Enabled true, so a configuration cannot
// look encrypted while it is not.
type RedisTLS struct {
	// Enabled turns TLS on. False (the default) connects in plain TCP.
	Enabled bool `yaml:"enabled"`

	// CAFile is a PEM file of the certificate authorities trusted for the server.
	// Empty means the system roots.
	CAFile string `yaml:"ca_file"`

	// ServerName is the name checked in the server's certificate. Empty means the host of
	// the address dialed.
	ServerName string `yaml:"server_name"`

	// CertFile is the PEM client certificate, for mutual TLS. Set with KeyFile or not at all.
	CertFile string `yaml:"cert_file"`

	// KeyFile is the PEM private key of CertFile. Set with CertFile or not at all.
	KeyFile string `yaml:"key_file"`
}

// Listener is one socket the daemon serves and the admission rules applied to it.
//
// Fields that do not apply to the Listener's Protocol must be left zero (see the table in
// docs/config.md): an http listener with a quic block is an error, not a silent no-op.
type Listener struct {
	// Name identifies the listener in logs, metrics and RoutesFrom. Empty means
	// "<protocol>-<index>", index counting from 0 in Config.Listeners. Names are unique and
	// made of letters, digits, '.', '_' and '-'.
	Name string `yaml:"name"`

	// Protocol is what the listener speaks. Required.
	Protocol Protocol `yaml:"protocol"`

	// Mode says what an http or https listener does with requests: ModeReverse sends them to
	// the upstreams of its Routes; ModeForward is a forward proxy, carrying absolute-form
	// requests and CONNECT tunnels to the target each request names (see Forward). Empty
	// means ModeReverse. http and https listeners only.
	Mode ListenerMode `yaml:"mode"`

	// Listen is the host:port to listen on: an IP address (IPv6 in brackets) or a host name,
	// and a numeric port; an empty host means every interface; port 0 picks a free port.
	// A TCP port (http, https, tcp) and a UDP port (http3) may be the same number. Required.
	Listen string `yaml:"listen"`

	// TLS is the server certificate. Required for https and http3, not accepted otherwise.
	TLS TLS `yaml:"tls"`

	// MaxConnsPerClient caps the connections one client key may hold at once, checked at
	// accept before any byte is read (for http3, at the QUIC handshake). Zero means
	// DefaultMaxConnsPerClient (64). Unlimited (-1) means no cap. Below -1 is invalid.
	MaxConnsPerClient int `yaml:"max_conns_per_client"`

	// MaxConns caps the connections of the whole listener. Zero means no cap. Negative is
	// invalid.
	MaxConns int `yaml:"max_conns"`

	// IPv6Prefix is the prefix length an IPv6 client address is masked to to form its
	// client key: clients in one /64 share a key by default. Zero means DefaultIPv6Prefix
	// (64). Valid values are 1 to 128.
	IPv6Prefix int `yaml:"ipv6_prefix"`

	// IPv4Prefix is the prefix length an IPv4 client address is masked to to form its client
	// key. Zero means DefaultIPv4Prefix (32, one key per address). Valid values are 1 to 32.
	// IPv4-mapped IPv6 addresses count as IPv4.
	IPv4Prefix int `yaml:"ipv4_prefix"`

	// PrefixLevels are extra, coarser connection caps, such as "1024 per IPv4 /24". A
	// connection is admitted only if its client key and every level that applies to its
	// address family admit it. Nil means no extra level.
	PrefixLevels []PrefixLevel `yaml:"prefix_levels"`

	// ConnOverrides replace MaxConnsPerClient for the client keys inside a CIDR. When
	// several contain a key, the longest prefix wins. Nil means no override.
	ConnOverrides []ConnOverride `yaml:"conn_overrides"`

	// ConnRate limits how fast one client key may open connections, checked at accept after
	// the caps (HAProxy's conn_rate): a connection over it is closed at once, before any byte
	// is read. Trusted proxies are exempt. Nil means no rate. Not for http3 (see
	// HandshakeRate).
	ConnRate *ConnRate `yaml:"conn_rate"`

	// EnforceAbove makes the per-client cap apply only while the listener holds more than
	// this many connections, so a lone heavy client is served while the listener is quiet.
	// Zero means always enforce. Negative is invalid. With MaxConns set it must be below
	// MaxConns. Prefix levels and MaxConns are always enforced.
	EnforceAbove int `yaml:"enforce_above"`

	// ResetOnRefuse closes a refused connection with a TCP RST instead of a FIN, so the
	// refused client holds no TIME_WAIT state. False (the default) closes with FIN. Not for
	// http3.
	ResetOnRefuse bool `yaml:"reset_on_refuse"`

	// SYNFilter makes the kernel drop the connection attempts (SYN packets) of clients
	// that hold max_conns_per_client, with a socket filter the listener keeps in step with
	// its counts (Linux only), as iptables' connlimit with DROP would: such a client's
	// connect waits and retries until one of its connections closes, and an attacker
	// reconnecting in a loop costs no accept and no refusal. The listening socket is then
	// plain TCP, not MPTCP. False (the default) refuses at accept. Not for http3; not with
	// enforce_above, proxy_protocol, or cluster-wide connection caps.
	SYNFilter bool `yaml:"syn_filter"`

	// DenyFile is a file of client addresses and CIDRs to refuse at accept, one a line ('#'
	// comments and blank lines allowed; see docs/daemon.md), as HAProxy's
	// `tcp-request connection reject if { src -f FILE }`: a refused connection is closed
	// before any byte is read or written and before any TLS handshake (for http3, its QUIC
	// handshake is refused), and takes no connection slot. The client is the peer, or the
	// client a trusted proxy's PROXY header names; other connections of trusted proxies are
	// not checked. Between DenyFile and AllowFile the longest prefix holding the client
	// decides, a deny entry winning a tie. Read again on every reload; a bad line fails the
	// reload. Empty means none.
	DenyFile string `yaml:"deny_file"`

	// AllowFile is a file of client addresses and CIDRs, in DenyFile's format, that makes the
	// listener an allow list: a client that no entry of either file holds is refused, as a
	// denied one is. A more specific DenyFile entry still refuses a client inside an allowed
	// network, and a more specific AllowFile entry admits one inside a denied network. The
	// file must hold at least one entry. Empty means none: clients outside DenyFile are
	// accepted.
	AllowFile string `yaml:"allow_file"`

	// TrustedProxies are the CIDRs (or single addresses) of proxies in front of this
	// listener. Their connections are exempt from the connection caps, and only their
	// forwarded headers and PROXY protocol headers are believed. Nil trusts nobody.
	TrustedProxies []netip.Prefix `yaml:"trusted_proxies"`

	// ForwardedHeader is the header a trusted proxy names the real client in; the real
	// client is the right-most address that is not itself a trusted proxy. Empty means
	// ForwardedXFF for HTTP listeners. Not for tcp listeners.
	ForwardedHeader ForwardedHeader `yaml:"forwarded_header"`

	// ProxyProtocol reads a PROXY protocol v1 or v2 header from connections of
	// TrustedProxies (and only from them), and keys the connection by the client it names.
	// Requires TrustedProxies. Not for http3.
	ProxyProtocol bool `yaml:"proxy_protocol"`

	// ProxyProtocolTimeout bounds the wait for the PROXY header. Zero means
	// DefaultProxyProtocolTimeout (3s). Negative is invalid. Not for http3.
	ProxyProtocolTimeout time.Duration `yaml:"proxy_protocol_timeout"`

	// ReadHeaderTimeout bounds reading a request head (http.Server.ReadHeaderTimeout).
	// Zero means DefaultReadHeaderTimeout (10s). Negative is invalid. HTTP listeners only.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`

	// ReadTimeout bounds reading a whole request, body included (http.Server.ReadTimeout).
	// Zero means none. Negative is invalid. HTTP listeners only.
	ReadTimeout time.Duration `yaml:"read_timeout"`

	// WriteTimeout bounds writing a response (http.Server.WriteTimeout). Zero means none.
	// Negative is invalid. HTTP listeners only.
	WriteTimeout time.Duration `yaml:"write_timeout"`

	// IdleTimeout is how long a keep-alive connection may wait for its next request.
	// Zero means DefaultIdleTimeout (60s). Negative is invalid. HTTP listeners only.
	IdleTimeout time.Duration `yaml:"idle_timeout"`

	// MaxHeaderBytes caps the size of a request head in bytes: an HTTP/1.x head not
	// complete within MaxHeaderBytes+4096 bytes (net/http's allowance) is answered 431,
	// and this is the most a connection can make the daemon buffer before its head is
	// complete. Zero means DefaultMaxHeaderBytes (32 KiB, in line with nginx's 4 x 8k
	// large_client_header_buffers; net/http's default is 1 MiB). Negative is invalid.
	// HTTP listeners only.
	MaxHeaderBytes int `yaml:"max_header_bytes"`

	// SendTimeout ends an exchange whose client accepts no byte of the response for this
	// long, as nginx's send_timeout: a client that asks for a large body and stops reading
	// gives back its permits and its upstream connection instead of holding them. It bounds
	// the time between two pieces of progress, not the whole response (see WriteTimeout); a
	// stalled write fails between 7/8 of it and all of it. On HTTP/2 it also bounds each
	// write to the connection, which ends with its streams when one does not complete in
	// time. Zero means DefaultSendTimeout (60s). Negative is invalid. HTTP listeners only.
	SendTimeout time.Duration `yaml:"send_timeout"`

	// HTTP1Server is what serves HTTP/1.x on this listener: on http listeners every
	// connection, on https listeners the connections whose TLS handshake chose HTTP/1.1
	// (ALPN). Two modes: HTTP1ServerEventLoop, the default, is the daemon's own HTTP/1.1
	// server, which relays the plainest exchanges (bodyless GETs and HEADs on routes whose
	// limits are counted in the process, answered with a small body of known length) as
	// bytes, on event loops of its own for plain connections on Linux and in Go's poller
	// otherwise (TLS, other systems), and hands every other exchange to its Go server;
	// HTTP1ServerNetHTTP is Go's net/http server, kept so that an operator can compare or
	// fall back. The daemon's server is held to net/http's behaviour by differential
	// tests. HTTP/2 on https listeners is served by net/http either way. Every limit,
	// route, log line and metric behaves the same with both. Empty means
	// HTTP1ServerEventLoop. The retired names lean and fast are read as eventloop, with a
	// warning (see [Listener.Warnings]). http and https listeners only.
	HTTP1Server HTTP1Server `yaml:"http1_server"`
	// retiredHTTP1 is the retired name (lean or fast) the file gave http1_server, which
	// Parse read as eventloop; empty otherwise.
	retiredHTTP1 HTTP1Server

	// MaxConcurrentStreams caps the requests one HTTP/2 (https) or HTTP/3 connection may run
	// at once (SETTINGS_MAX_CONCURRENT_STREAMS; QUIC's bidirectional stream limit), so that a
	// single connection cannot start hundreds of upstream exchanges on a listener without a
	// request limit. Zero means DefaultMaxConcurrentStreams (100). Negative and values above
	// 2147483647 are invalid. https and http3 listeners only.
	MaxConcurrentStreams int `yaml:"max_concurrent_streams"`

	// ClientLimit is a per-client concurrency limit on the requests of the whole listener,
	// counted apart from any route limit. Its key must be client_ip (or empty). Nil means
	// none. HTTP listeners only.
	ClientLimit *Limit `yaml:"client_limit"`

	// Rate is a request rate on the whole listener, checked before ClientLimit and before
	// routing, counted apart from any route's rate. Nil means none. HTTP listeners only, and
	// not with RoutesFrom (the named listener's rate applies).
	Rate *Rate `yaml:"rate"`

	// AccessLog chooses optional fields of this listener's access lines, added after the
	// default ones (which stay as they are). Nil, or no fields, means the default fields only.
	// http, https and http3 listeners only.
	AccessLog *ListenerAccessLog `yaml:"access_log"`

	// RequestID gives every request an id: taken from a trusted proxy's header, or made up,
	// sent upstream in that header and written in the access line as request_id. Nil means
	// none. Reverse http, https and http3 listeners only.
	RequestID *RequestID `yaml:"request_id"`

	// Upstream is the host:port raw TCP connections are proxied to. Required for tcp
	// listeners, not accepted otherwise.
	Upstream string `yaml:"upstream"`

	// TCPIdleTimeout closes a proxied TCP connection on which no byte has moved, in either
	// direction, for this long (as HAProxy's timeout client and server do), giving back its
	// connection slot: a client that stays silent after the upstream closed its side, or
	// after both went quiet, does not hold its slot for good. A connection with traffic in
	// either direction is never cut. Zero means DefaultTCPIdleTimeout (5m). Negative is
	// invalid. tcp listeners only.
	TCPIdleTimeout time.Duration `yaml:"tcp_idle_timeout"`

	// RoutesFrom names another HTTP listener whose routes, and the limiters of those routes,
	// this listener shares, so an exchange counts the same whichever listener it came
	// through. An http3 listener sharing a TCP listener's routes is advertised there with
	// Alt-Svc. The named listener must not itself use RoutesFrom, and this listener must
	// have no Routes and no ClientLimit (the named listener's applies). Empty means this
	// listener has its own Routes. HTTP listeners only.
	RoutesFrom string `yaml:"routes_from"`

	// EscapedSlashes is what the listener does with a request whose path holds an escaped
	// slash ("%2F" or "%2f"), which routes do not take for a separator but many backends
	// decode to "/" before resolving the path, so that "/x/..%2Fadmin" matches no route on
	// "/admin" and reaches the backend as "/admin". EscapedSlashesReject answers 400;
	// EscapedSlashesUnescapeAndForward decodes it before the path is cleaned and routed and
	// forwards the decoded path; EscapedSlashesUnescapeAndRedirect answers 307 to that path;
	// EscapedSlashesKeep routes and forwards it as written (only for backends that tell
	// "a%2Fb" from "a/b" and resolve no dot segment after decoding). Empty means
	// EscapedSlashesReject. Reverse-proxy http, https and http3 listeners only, and not with
	// RoutesFrom (the named listener's applies).
	EscapedSlashes EscapedSlashes `yaml:"escaped_slashes"`

	// QUIC tunes QUIC handshake admission. The zero value means every default.
	// http3 listeners only.
	QUIC QUIC `yaml:"quic"`

	// HandshakeRate limits how many QUIC handshakes one proven client key may make, checked
	// once its address is proven (a valid token or a completed handshake), so a spoofed
	// address never spends another client's rate. Nil means no rate. http3 listeners only.
	HandshakeRate *ConnRate `yaml:"handshake_rate"`
	// Auth requires HTTP Basic credentials checked against an htpasswd file before any
	// limit counts a request: on a forward listener proxy authentication (407,
	// Proxy-Authorization), on a reverse listener server authentication (401,
	// Authorization). A request without right credentials is refused before it takes a
	// permit; the verified name is what limits keyed by proxy_user (forward) or user
	// (reverse) count. Nil means no authentication. HTTP listeners only, not with
	// RoutesFrom (such a listener uses the authentication of the listener it names).
	Auth *Auth `yaml:"auth"`

	// Forward configures a forward listener: where it may connect, its timeouts, and its
	// limits. Nil means every default. Only with Mode ModeForward.
	Forward *Forward `yaml:"forward"`

	// Routes map requests to upstreams. Among the routes whose Host and PathPrefix match a
	// request, the most specific host wins (an exact name, then a wildcard, then a route
	// without Host), then the longest PathPrefix; a request no route matches gets 404. HTTP
	// listeners need at least one unless they use RoutesFrom; tcp and forward listeners have none.
	Routes []Route `yaml:"routes"`
}

// TLS is a server certificate and its key.
type TLS struct {
	// CertFile is the PEM certificate chain, leaf first. It must load with KeyFile
	// (tls.LoadX509KeyPair) at Validate time.
	CertFile string `yaml:"cert_file"`

	// KeyFile is the PEM private key of CertFile.
	KeyFile string `yaml:"key_file"`
}

// PrefixLevel caps the connections of all clients inside one network prefix together.
//
// A level applies to IPv4 clients when IPv4Prefix is set and to IPv6 clients when IPv6Prefix
// is set; at least one is required. Each prefix must be shorter than the listener's key
// prefix of its family, since a level groups several client keys.
type PrefixLevel struct {
	// IPv4Prefix is the IPv4 prefix length, 1 to 31. Zero means the level does not apply to
	// IPv4.
	IPv4Prefix int `yaml:"ipv4_prefix"`

	// IPv6Prefix is the IPv6 prefix length, 1 to 127. Zero means the level does not apply
	// to IPv6.
	IPv6Prefix int `yaml:"ipv6_prefix"`

	// Max is the cap on connections from one such prefix. It must be 1 or more.
	Max int `yaml:"max"`
}

// ConnOverride replaces the per-client connection cap for client keys inside CIDR.
type ConnOverride struct {
	// CIDR is the network, written as a CIDR or a single address (a /32 or /128). Its prefix
	// may not be longer than the listener's key prefix of its family, or it could never
	// match a client key as a whole.
	CIDR netip.Prefix `yaml:"cidr"`

	// Max is the per-client cap inside CIDR: 1 or more, or Unlimited (-1). Zero is invalid.
	Max int `yaml:"max"`
}

// QUIC tunes handshake admission on an http3 listener (the quicadmit package).
//
// While fewer than the retry threshold of handshakes are in progress, attempts are accepted at
// once; at or above it, attempts from unvalidated addresses get a stateless Retry; at
// MaxInProgress new attempts are refused. The threshold follows the rate of completed
// handshakes between RetryThresholdMin and RetryThresholdMax (a minimum above the maximum
// pins it at the minimum), and MaxInProgress caps it; Retry set to RetryAlways makes it zero.
type QUIC struct {
	// Retry chooses how the retry threshold is set. Empty means RetryAdaptive: it follows the
	// completion rate between RetryThresholdMin and RetryThresholdMax. RetryAlways makes it
	// zero: every attempt from an address not proven by a token gets a Retry, at the cost of
	// one round trip per new client; RetryThresholdMin and RetryThresholdMax must then be
	// left zero.
	Retry QUICRetry `yaml:"retry"`

	// RetryThresholdMin is the retry threshold when the endpoint completes few handshakes.
	// Zero means DefaultRetryThresholdMin (256). Negative is invalid. A minimum above
	// RetryThresholdMax pins the threshold at the minimum.
	RetryThresholdMin int `yaml:"retry_threshold_min"`

	// RetryThresholdMax is the highest the retry threshold rises, however many handshakes
	// complete. Zero means DefaultRetryThresholdMax (4096). Negative is invalid.
	RetryThresholdMax int `yaml:"retry_threshold_max"`

	// MaxInProgress is how many handshakes may be in progress before new attempts are
	// refused with CONNECTION_REFUSED. It also caps the retry threshold: below it, attempts
	// are refused at MaxInProgress before any would get a Retry. Zero means
	// DefaultMaxInProgress (16384). Negative is invalid.
	MaxInProgress int `yaml:"max_in_progress"`

	// HandshakeTimeout is quic-go's HandshakeIdleTimeout: a handshake during which the client
	// sends nothing for this long, or that has not completed in twice this long, is
	// abandoned, and its attempt leaves the count in progress. Zero means
	// DefaultHandshakeTimeout (5s, quic-go's default). Negative and values above
	// MaxHandshakeTimeout (1m) are invalid.
	HandshakeTimeout time.Duration `yaml:"handshake_timeout"`

	// TokenKeyFile holds the key protecting Retry and resumption tokens: 64 hexadecimal
	// digits (32 bytes), as `openssl rand -hex 32` writes. Nodes sharing it accept each
	// other's tokens. Empty means a random key per process start.
	TokenKeyFile string `yaml:"token_key_file"`
}

// Route sends the requests matching Host and PathPrefix to Upstreams, under optional limits
// that count this route's exchanges only.
type Route struct {
	// Name identifies the route in logs and metrics. Empty means "route-<index>", index
	// counting from 0 in the listener's Routes. Unique within the listener.
	Name string `yaml:"name"`

	// Host lists the request hosts (Host header or :authority, without port) this route
	// takes, matched case-insensitively: an exact name, "*.example.com" for any name below
	// example.com, or an IP address. Nil means any host.
	Host []string `yaml:"host"`

	// PathPrefix is the path the route takes: the path itself and everything below it, by
	// whole segments ("/api" matches "/api" and "/api/x", not "/apix"). Empty means "/",
	// every path. It must be a clean absolute path.
	PathPrefix string `yaml:"path_prefix"`

	// Upstreams are the origins requests go to: absolute http or https URLs with a host and
	// no path (other than "/"), query or user. The request path is forwarded unchanged. At
	// least one is required; no duplicates.
	Upstreams []string `yaml:"upstreams"`

	// UpstreamTimeout is the longest the route waits for an upstream's response head once
	// the request was sent; past it the client gets 504. Zero means DefaultUpstreamTimeout
	// (60s). Negative is invalid. It does not bound a response body, a stream or a tunnel.
	UpstreamTimeout time.Duration `yaml:"upstream_timeout"`

	// Rate limits how fast each key may make requests on this route, checked before Limit
	// and ShadowLimit so that a delayed request holds no permit. Nil means no rate.
	Rate *Rate `yaml:"rate"`

	// Limit caps the exchanges this route runs at once per key. Nil means no limit.
	Limit *Limit `yaml:"limit"`

	// ShadowLimit is a candidate limit counted beside Limit that never refuses and never
	// queues: exchanges over it are only counted and reported, to try a stricter limit out.
	// Its queue, status and retry_after must be left zero. Nil means none.
	ShadowLimit *Limit `yaml:"shadow_limit" config:"shadow"`
}

// Limit is a keyed concurrency limit: at most Permits exchanges per key value at once.
// A permit is taken when the request head has been read and given back exactly once when the
// exchange ends, however it ends.
type Limit struct {
	// Key says what is counted. Empty means KeyClientIP.
	Key LimitKey `yaml:"key"`

	// Permits is the number of exchanges one key value may run at once. Zero means
	// DefaultPermits (64). Unlimited (-1) means no limit. Below -1 is invalid.
	Permits int `yaml:"permits"`

	// Overrides replace Permits for single key values: 1 or more, or Unlimited (-1); zero
	// is invalid. With key client_ip an override's key is an IP address or CIDR. Nil means
	// none.
	Overrides map[string]int `yaml:"overrides"`

	// Queue is where requests over the limit wait for a permit. The zero value refuses at
	// once.
	Queue Queue `yaml:"queue"`

	// Shadow grants requests over the limit but counts and logs them as refused, to try the
	// limit out. False (the default) refuses them.
	Shadow bool `yaml:"shadow"`

	// Status is the HTTP status of a refusal, 400 to 599. Zero means DefaultStatus (429).
	Status int `yaml:"status"`

	// RetryAfter is the Retry-After header of a refusal, a whole number of seconds of at
	// least 1s. Zero means DefaultRetryAfter (1s). NoRetryAfter (-1ns; "none" or 0 in
	// YAML) sends no Retry-After header. Other values are invalid.
	RetryAfter time.Duration `yaml:"retry_after" config:"none"`

	// TunnelPermits gives CONNECT tunnels and WebSocket upgrades their own permits per key,
	// held until the tunnel closes. Zero means tunnels take Permits like any exchange.
	// Unlimited (-1) means tunnels are not limited. Below -1 is invalid.
	TunnelPermits int `yaml:"tunnel_permits"`

	// ReleaseTunnels gives a tunnel's permit back as soon as the tunnel is established
	// (the 2xx to CONNECT or the 101 of an upgrade) rather than when it closes. False (the
	// default) holds it until the tunnel closes.
	ReleaseTunnels bool `yaml:"release_tunnels"`

	// CountTunnels, false, stops the limit from counting CONNECT requests at all (neither
	// counted nor refused) and gives an upgraded connection's permit back after its 101, so
	// that only plain exchanges and the setting up of upgrades are limited. Nil means true:
	// a tunnel holds its permit until it closes. Only on the limits of forward listeners
	// (forward.limits and client_limit), where CONNECT is served.
	CountTunnels *bool `yaml:"count_tunnels"`

	// ReclaimAfter is how long a permit may be held before it is taken back and logged at
	// WARN, a safety net for a permit an exchange failed to give back; established tunnels
	// are exempt. Zero means DefaultReclaimAfter (10m). NoReclaim (-1ns; "none" or 0 in
	// YAML) never reclaims. Other values below 1s are invalid.
	ReclaimAfter time.Duration `yaml:"reclaim_after" config:"none"`

	// Response replaces the body of a refusal and adds headers to it; the status is Status
	// and the Retry-After header RetryAfter. Nil means the default: "Too Many Requests" (the
	// status text) in text/plain. Not in a shadow_limit, which never refuses.
	Response *LimitResponse `yaml:"response"`
}

// Queue is a bounded FIFO wait queue per key in front of a limit.
type Queue struct {
	// Size is how many requests of one key may wait. Zero means no queue: refuse at once.
	// Negative is invalid.
	Size int `yaml:"size"`

	// Timeout is the longest a request waits before it is refused. Zero means it waits
	// until its client goes away. Negative is invalid, and a Timeout needs a Size.
	Timeout time.Duration `yaml:"timeout"`
}

// ListenerAccessLog is a listener's choice of optional access-log fields, as nginx's
// log_format names variables such as $args and $http_user_agent.
type ListenerAccessLog struct {
	// Fields are the optional fields to add, each at most once, written in the fixed order
	// query, user_agent, referer whatever order they are listed in: AccessFieldQuery (the
	// request target's query string, without the '?'; nginx's $args), AccessFieldUserAgent
	// (the User-Agent header; $http_user_agent) and AccessFieldReferer (the Referer
	// header; $http_referer). A field whose value is empty is left out of the line. Empty
	// means none.
	Fields []string `yaml:"fields"`
}

// RequestID is how a listener names each request, as nginx's $request_id with
// proxy_set_header and HAProxy's unique-id-format with unique-id-header do.
type RequestID struct {
	// Header is the request header the id is read from and sent upstream in. Empty means
	// X-Request-Id. It must be a field name and not one the daemon manages itself (Host,
	// the hop-by-hop fields, the forwarding fields).
	Header string `yaml:"header"`

	// Accept says whose id the daemon keeps: RequestIDAcceptTrustedProxies (the default when
	// empty: a request from one of the listener's trusted_proxies keeps the id it carries,
	// every other request gets a new one, so that a client cannot choose what the access
	// log and the upstream see) or RequestIDAcceptAny (every client's id is kept, for a
	// daemon behind a load balancer that sets it and no trusted_proxies). A kept id must be
	// 1 to 128 visible ASCII characters without '"' or '\'; any other gets a new one.
	Accept string `yaml:"accept"`
}

// The values of RequestID.Accept, and the default header.
const (
	RequestIDAcceptTrustedProxies = "trusted_proxies"
	RequestIDAcceptAny            = "any"
	DefaultRequestIDHeader        = "X-Request-Id"
)

// HeaderName returns the header of r: its Header, or DefaultRequestIDHeader.
func (r *RequestID) HeaderName() string {
	if r.Header == "" {
		return DefaultRequestIDHeader
	}
	return r.Header
}

// The optional access-log fields of ListenerAccessLog.Fields.
const (
	AccessFieldQuery     = "query"
	AccessFieldUserAgent = "user_agent"
	AccessFieldReferer   = "referer"
)

// AccessFields are the names ListenerAccessLog.Fields takes, in the order lines write them.
var AccessFields = []string{AccessFieldQuery, AccessFieldUserAgent, AccessFieldReferer}

// Has reports whether a (nil: none) asks for the field name.
func (a *ListenerAccessLog) Has(name string) bool {
	if a == nil {
		return false
	}
	for _, f := range a.Fields {
		if f == name {
			return true
		}
	}
	return false
}
