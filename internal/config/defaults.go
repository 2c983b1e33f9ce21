package config

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// The defaults a zero field stands for. Each field's comment names the one it uses.
const (
	DefaultShutdownTimeout      = 30 * time.Second
	DefaultRedisPrefix          = "portcullis:"
	DefaultLease                = 15 * time.Second
	DefaultRedisTimeout         = 50 * time.Millisecond
	DefaultRedisTLSTimeout      = 250 * time.Millisecond
	DefaultReleaseHold          = 10 * time.Millisecond
	DefaultRateLease            = 32
	DefaultSpareShare           = 0.1
	DefaultNodeShare            = 1.0
	DefaultMaxConnsPerClient    = 64
	DefaultIPv6Prefix           = 64
	DefaultIPv4Prefix           = 32
	DefaultProxyProtocolTimeout = 3 * time.Second
	DefaultReadHeaderTimeout    = 10 * time.Second
	DefaultIdleTimeout          = 60 * time.Second
	DefaultUpstreamTimeout      = 60 * time.Second
	DefaultMaxHeaderBytes       = 32 << 10
	DefaultSendTimeout          = 60 * time.Second
	DefaultMaxConcurrentStreams = 100
	DefaultTCPIdleTimeout       = 5 * time.Minute
	DefaultPermits              = 64
	DefaultStatus               = 429
	DefaultRetryAfter           = 1 * time.Second
	DefaultRetryThresholdMin    = 256
	DefaultRetryThresholdMax    = 4096
	DefaultMaxInProgress        = 16384
	DefaultFlushInterval        = 10 * time.Millisecond
	DefaultHandshakeTimeout     = 5 * time.Second
)

// MaxHandshakeTimeout is the longest QUIC.HandshakeTimeout accepted.
const MaxHandshakeTimeout = time.Minute

// Default returns a Config with every top-level default filled in and no listener. It is
// not valid until at least one listener is added.
func Default() *Config {
	return (&Config{}).Effective()
}

// DefaultLimit returns the Limit a route gets from `limit: {}`, with every default filled
// in: key client_ip, 64 permits, no queue, refusals answered 429 with Retry-After: 1.
func DefaultLimit() Limit {
	return (&Limit{}).effective(false)
}

// Effective returns a deep copy of c with every default filled in: each zero field that
// stands for a default holds that default, and each default name is spelled out. Fields
// that do not apply to a listener's protocol stay zero, so the copy validates exactly when
// c does. c is not modified. Effective of a nil Config is nil.
func (c *Config) Effective() *Config {
	if c == nil {
		return nil
	}
	e := &Config{
		Log:             c.Log,
		Admin:           c.Admin,
		ShutdownTimeout: orDefault(c.ShutdownTimeout, DefaultShutdownTimeout),
		src:             c.src,
	}
	e.Log.Format = orDefault(e.Log.Format, LogText)
	e.Log.Level = orDefault(e.Log.Level, LevelInfo)
	on := c.Log.IsAccessLogOn() // spelled out, and never the caller's pointer
	e.Log.AccessLog = &on
	if c.Cluster != nil {
		cl := c.Cluster.effective()
		e.Cluster = &cl
	}
	if c.Listeners != nil {
		e.Listeners = make([]Listener, len(c.Listeners))
		for i := range c.Listeners {
			e.Listeners[i] = c.Listeners[i].effective(i)
		}
	}
	return e
}

// defaultTimeout is the Timeout that zero means: longer with TLS, whose
// handshake a call on a new connection must fit in too.
func (c *Cluster) defaultTimeout() time.Duration {
	if c.Redis.TLS.Enabled {
		return DefaultRedisTLSTimeout
	}
	return DefaultRedisTimeout
}

func (c *Cluster) effective() Cluster {
	e := *c
	e.Redis.Addrs = slices.Clone(c.Redis.Addrs)
	e.Redis.SentinelAddrs = slices.Clone(c.Redis.SentinelAddrs)
	e.Prefix = orDefault(e.Prefix, DefaultRedisPrefix)
	e.Lease = orDefault(e.Lease, DefaultLease)
	e.Timeout = orDefault(e.Timeout, c.defaultTimeout())
	e.OnError = orDefault(e.OnError, OnErrorOpen)
	e.NodeShare = orDefault(e.NodeShare, DefaultNodeShare)
	e.FlushInterval = orDefault(e.FlushInterval, DefaultFlushInterval)
	e.ReleaseHold = orDefault(e.ReleaseHold, DefaultReleaseHold)
	e.RateLease = orDefault(e.RateLease, DefaultRateLease)
	e.SpareShare = orDefault(e.SpareShare, DefaultSpareShare)
	return e
}

// effective fills the defaults of the listener at index i of Config.Listeners.
func (l *Listener) effective(i int) Listener {
	e := *l
	e.Name = orDefault(e.Name, defaultListenerName(l.Protocol, i))
	if l.Protocol.Uses("mode") {
		e.Mode = orDefault(e.Mode, ModeReverse)
	}
	e.MaxConnsPerClient = orDefault(e.MaxConnsPerClient, DefaultMaxConnsPerClient)
	e.IPv6Prefix = orDefault(e.IPv6Prefix, DefaultIPv6Prefix)
	e.IPv4Prefix = orDefault(e.IPv4Prefix, DefaultIPv4Prefix)
	e.PrefixLevels = slices.Clone(l.PrefixLevels)
	e.ConnOverrides = slices.Clone(l.ConnOverrides)
	e.ConnRate = cloneConnRate(l.ConnRate)
	e.HandshakeRate = cloneConnRate(l.HandshakeRate)
	e.Rate = effectiveRate(l.Rate)
	e.TrustedProxies = slices.Clone(l.TrustedProxies)
	if l.RequestID != nil {
		e.RequestID = &RequestID{Header: l.RequestID.HeaderName(), Accept: orDefault(l.RequestID.Accept, RequestIDAcceptTrustedProxies)}
	}
	if l.Protocol != ProtocolHTTP3 {
		e.ProxyProtocolTimeout = orDefault(e.ProxyProtocolTimeout, DefaultProxyProtocolTimeout)
	}
	if l.Protocol.IsHTTP() {
		e.ForwardedHeader = orDefault(e.ForwardedHeader, ForwardedXFF)
		e.ReadHeaderTimeout = orDefault(e.ReadHeaderTimeout, DefaultReadHeaderTimeout)
		e.IdleTimeout = orDefault(e.IdleTimeout, DefaultIdleTimeout)
		e.MaxHeaderBytes = orDefault(e.MaxHeaderBytes, DefaultMaxHeaderBytes)
		e.SendTimeout = orDefault(e.SendTimeout, DefaultSendTimeout)
	}
	if l.Protocol.Uses("http1_server") {
		e.HTTP1Server = orDefault(e.HTTP1Server, HTTP1ServerEventLoop)
	}
	if l.Protocol.Uses("escaped_slashes") && !l.IsForward() && l.RoutesFrom == "" {
		e.EscapedSlashes = orDefault(e.EscapedSlashes, EscapedSlashesReject)
	}
	if l.Protocol == ProtocolTCP {
		e.TCPIdleTimeout = orDefault(e.TCPIdleTimeout, DefaultTCPIdleTimeout)
	}
	if l.Protocol.Uses("max_concurrent_streams") {
		e.MaxConcurrentStreams = orDefault(e.MaxConcurrentStreams, DefaultMaxConcurrentStreams)
	}
	if l.ClientLimit != nil {
		cl := l.ClientLimit.effective(false)
		e.ClientLimit = &cl
	}
	e.effectiveForward(l)
	if l.Protocol == ProtocolHTTP3 {
		e.QUIC.Retry = orDefault(e.QUIC.Retry, RetryAdaptive)
		if e.QUIC.Retry == RetryAdaptive {
			// With RetryAlways the bounds stay zero: they do not apply.
			e.QUIC.RetryThresholdMin = orDefault(e.QUIC.RetryThresholdMin, DefaultRetryThresholdMin)
			e.QUIC.RetryThresholdMax = orDefault(e.QUIC.RetryThresholdMax, DefaultRetryThresholdMax)
		}
		e.QUIC.MaxInProgress = orDefault(e.QUIC.MaxInProgress, DefaultMaxInProgress)
		e.QUIC.HandshakeTimeout = orDefault(e.QUIC.HandshakeTimeout, DefaultHandshakeTimeout)
	}
	if l.Routes != nil {
		e.Routes = make([]Route, len(l.Routes))
		for j := range l.Routes {
			e.Routes[j] = l.Routes[j].effective(j)
		}
	}
	return e
}

func defaultListenerName(p Protocol, i int) string { return fmt.Sprintf("%s-%d", p, i) }

func defaultRouteName(i int) string { return fmt.Sprintf("route-%d", i) }

// effective fills the defaults of the route at index i of its listener's Routes.
func (r *Route) effective(i int) Route {
	e := *r
	e.Name = orDefault(e.Name, defaultRouteName(i))
	e.Host = slices.Clone(r.Host)
	e.PathPrefix = orDefault(e.PathPrefix, "/")
	e.Upstreams = slices.Clone(r.Upstreams)
	e.UpstreamTimeout = orDefault(e.UpstreamTimeout, DefaultUpstreamTimeout)
	e.Rate = effectiveRate(r.Rate)
	if r.Limit != nil {
		l := r.Limit.effective(false)
		e.Limit = &l
	}
	if r.ShadowLimit != nil {
		l := r.ShadowLimit.effective(true)
		e.ShadowLimit = &l
	}
	return e
}

// effective fills a limit's defaults. A shadow limit never refuses, so its refusal fields
// (status, retry_after) keep their zero values.
func (l *Limit) effective(shadow bool) Limit {
	e := *l
	e.Key = orDefault(e.Key, KeyClientIP)
	e.Permits = orDefault(e.Permits, DefaultPermits)
	e.Overrides = maps.Clone(l.Overrides)
	e.ReclaimAfter = orDefault(e.ReclaimAfter, DefaultReclaimAfter)
	if l.CountTunnels != nil {
		b := *l.CountTunnels
		e.CountTunnels = &b
	}
	if l.Response != nil {
		r := *l.Response
		r.Headers = maps.Clone(l.Response.Headers)
		e.Response = &r
	}
	if !shadow {
		e.Status = orDefault(e.Status, DefaultStatus)
		e.RetryAfter = orDefault(e.RetryAfter, DefaultRetryAfter)
	}
	return e
}

// orDefault returns v, or def when v is the zero value.
func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
