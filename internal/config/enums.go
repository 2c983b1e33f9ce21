package config

import (
	"log/slog"
	"strings"
	"time"
)

// Unlimited is the value of a count field (MaxConnsPerClient, Permits, Max, ...) that
// means "no limit": limit.Unlimited, so that a limit block's numbers are copied into a
// limit.Policy as they are (zero the default, -1 unlimited, below -1 refused here).
const Unlimited = -1

// MaxCount is the largest count a limit accepts (permits, connection caps, queue sizes):
// the limiters count in 32 bits and keep one value for "unlimited".
const MaxCount = 1<<31 - 2

// NoRetryAfter is the [Limit.RetryAfter] that sends no Retry-After header. In YAML it is
// written "none" (or 0).
const NoRetryAfter time.Duration = -1

// Protocol is what a [Listener] speaks.
type Protocol string

// The protocols a listener may speak.
const (
	// ProtocolHTTP is HTTP/1.1 in clear text over TCP.
	ProtocolHTTP Protocol = "http"
	// ProtocolHTTPS is HTTP/1.1 and HTTP/2 over TLS over TCP.
	ProtocolHTTPS Protocol = "https"
	// ProtocolTCP is raw TCP proxied to [Listener.Upstream].
	ProtocolTCP Protocol = "tcp"
	// ProtocolHTTP3 is HTTP/3 over QUIC over UDP.
	ProtocolHTTP3 Protocol = "http3"
)

// IsValid reports whether p is one of the protocols above.
func (p Protocol) IsValid() bool {
	switch p {
	case ProtocolHTTP, ProtocolHTTPS, ProtocolTCP, ProtocolHTTP3:
		return true
	}
	return false
}

// IsHTTP reports whether p serves HTTP requests (http, https or http3), and so has routes.
func (p Protocol) IsHTTP() bool {
	return p == ProtocolHTTP || p == ProtocolHTTPS || p == ProtocolHTTP3
}

// Network is the network p listens on: "udp" for http3, "tcp" otherwise.
func (p Protocol) Network() string {
	if p == ProtocolHTTP3 {
		return "udp"
	}
	return "tcp"
}

// LogFormat is the format of log lines.
type LogFormat string

// The log formats.
const (
	// LogText is slog's key=value text format.
	LogText LogFormat = "text"
	// LogJSON is one JSON object per line.
	LogJSON LogFormat = "json"
)

// LogLevel is the lowest level logged.
type LogLevel string

// The log levels.
const (
	LevelDebug LogLevel = "debug"
	LevelInfo  LogLevel = "info"
	LevelWarn  LogLevel = "warn"
	LevelError LogLevel = "error"
)

// Slog returns l as a slog.Level. The empty LogLevel is slog.LevelInfo; an invalid one
// (which Validate refuses) is slog.LevelInfo too.
func (l LogLevel) Slog() slog.Level {
	switch l {
	case LevelDebug:
		return slog.LevelDebug
	case LevelWarn:
		return slog.LevelWarn
	case LevelError:
		return slog.LevelError
	}
	return slog.LevelInfo
}

// ForwardedHeader is the header trusted proxies name the real client in.
type ForwardedHeader string

// The forwarded headers.
const (
	// ForwardedXFF is X-Forwarded-For: a comma-separated list of addresses.
	ForwardedXFF ForwardedHeader = "x-forwarded-for"
	// ForwardedRFC7239 is Forwarded (RFC 7239): its for= parameters.
	ForwardedRFC7239 ForwardedHeader = "forwarded"
	// ForwardedNone believes no header: the client is the connection's peer (or the
	// PROXY protocol's source).
	ForwardedNone ForwardedHeader = "none"
)

// HTTP1Server is what serves HTTP/1.x on an http or https [Listener]: one of two
// modes, HTTP1ServerEventLoop (the default) or HTTP1ServerNetHTTP.
type HTTP1Server string

// The HTTP/1.x modes.
const (
	// HTTP1ServerEventLoop, the default, is the daemon's own HTTP/1.1 server. It
	// relays the plainest exchanges as bytes: those of plain (not TLS)
	// connections on event loops of its own, outside the Go runtime's poller
	// (Linux), and the rest (TLS connections, other systems) with the same
	// byte path in Go's poller (the lean path); every exchange it does not
	// relay goes through the Go server's full handling.
	HTTP1ServerEventLoop HTTP1Server = "eventloop"
	// HTTP1ServerNetHTTP is Go's net/http server, the escape hatch.
	HTTP1ServerNetHTTP HTTP1Server = "net/http"
)

// The retired HTTP/1.x server names. They are not modes: in a configuration file
// [Parse] reads either as HTTP1ServerEventLoop and [Listener.Warnings] reports
// it. Set in Go on a parsed configuration, they select one internal part of
// HTTP1ServerEventLoop alone, for the tests and benchmarks that compare the
// parts with each other.
const (
	// HTTP1ServerLean is the eventloop server with its byte path run in Go's
	// poller on every connection, plain ones included.
	HTTP1ServerLean HTTP1Server = "lean"
	// HTTP1ServerFast is the eventloop server without its byte path: every
	// exchange through the Go server's full handling.
	HTTP1ServerFast HTTP1Server = "fast"
)

// Fast reports whether s runs the daemon's own HTTP/1.1 server: every value
// but HTTP1ServerNetHTTP.
func (s HTTP1Server) Fast() bool { return s != HTTP1ServerNetHTTP }

// Lean reports whether s relays the plainest exchanges as bytes: eventloop, or
// empty (the default), or the internal part lean.
func (s HTTP1Server) Lean() bool { return s == "" || s == HTTP1ServerLean || s == HTTP1ServerEventLoop }

// retired reports whether s is a retired name, read as HTTP1ServerEventLoop
// when a configuration file names it.
func (s HTTP1Server) retired() bool { return s == HTTP1ServerLean || s == HTTP1ServerFast }

// EscapedSlashes is what a reverse-proxy [Listener] does with a request
// whose path holds an escaped slash ("%2F" or "%2f"), as Envoy's
// path_with_escaped_slashes_action.
type EscapedSlashes string

// The actions on an escaped slash.
const (
	// EscapedSlashesReject, the default, answers 400 Bad Request.
	EscapedSlashesReject EscapedSlashes = "reject"
	// EscapedSlashesKeep routes and forwards the path as the client wrote
	// it, the escaped slash inside its segment.
	EscapedSlashesKeep EscapedSlashes = "keep"
	// EscapedSlashesUnescapeAndForward decodes every escaped slash to "/"
	// before the path is cleaned and routed, and forwards that path.
	EscapedSlashesUnescapeAndForward EscapedSlashes = "unescape_and_forward"
	// EscapedSlashesUnescapeAndRedirect answers 307 Temporary Redirect to
	// the path EscapedSlashesUnescapeAndForward would forward.
	EscapedSlashesUnescapeAndRedirect EscapedSlashes = "unescape_and_redirect"
)

// OnError is what a node does while Redis cannot answer.
type OnError string

// The Redis failure policies.
const (
	// OnErrorOpen falls back to counting on the node alone, against
	// NodeShare of each limit.
	OnErrorOpen OnError = "open"
	// OnErrorClosed refuses every request whose limit needs Redis.
	OnErrorClosed OnError = "closed"
)

// LimitKey is what a [Limit] counts by: KeyClientIP, KeyUser, KeyHost, or "header:" and a
// header name (see [HeaderKey]) on reverse listeners; KeyClientIP, KeyProxyUser,
// KeyTargetHost, KeyTargetAddr or a header on forward listeners.
//
// A request without a value for its key (no user, no such header) is not counted by that
// limit; pair such limits with a client_ip limit (or rely on the listener's connection caps)
// so that leaving the key out is no way around every limit.
type LimitKey string

// The fixed limit keys.
const (
	// KeyClientIP counts by client key: the client address, masked to the listener's
	// ipv4_prefix or ipv6_prefix, behind trusted proxies the real client.
	KeyClientIP LimitKey = "client_ip"
	// KeyUser counts by the user name the listener's auth block verified (Basic
	// credentials in Authorization). Reverse listeners with auth only.
	KeyUser LimitKey = "user"
	// KeyHost counts by the request host (Host or :authority, lower-cased, without port).
	KeyHost LimitKey = "host"
)

const headerKeyPrefix = "header:"

// HeaderKey returns the LimitKey that counts by the value of the named request header.
func HeaderKey(name string) LimitKey { return LimitKey(headerKeyPrefix + name) }

// Header returns the header name of a "header:Name" key, and whether k is such a key.
func (k LimitKey) Header() (name string, ok bool) {
	return strings.CutPrefix(string(k), headerKeyPrefix)
}

// QUICRetry is how an http3 listener sets its retry threshold (see [QUIC.Retry]).
type QUICRetry string

// The retry threshold modes.
const (
	// RetryAdaptive follows the rate of completed handshakes between the threshold bounds.
	RetryAdaptive QUICRetry = "adaptive"
	// RetryAlways sets the threshold to zero: every attempt from an unproven address gets a
	// Retry.
	RetryAlways QUICRetry = "always"
)
