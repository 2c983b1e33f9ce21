// Package upstream is the daemon's HTTP/1.1 client to its upstreams. Its
// [Transport] does a plain-http, bodyless exchange entirely on the caller's
// goroutine: no read or write loop goroutines and no channel hand-offs, so a
// proxied GET costs the scheduler nothing beyond the caller itself. With no
// read loop to watch idle connections, each request checks the one it takes
// with a non-blocking peek, so that nothing the upstream sent while the
// connection was idle is ever read as an answer. Every other request goes to
// a fallback [http.RoundTripper].
//
// The entry points are [Transport.RoundTrip] (and the RoundTripper of
// [Transport.WithHeadTimeout]); [Transport.Send], which takes the
// request's context and per-request options apart from the request; and
// [Transport.SendHead], which sends on the fast path a bodyless request
// head the caller already holds as bytes (a byte-level proxy's), with no
// http.Request or http.Header built for it.
package upstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// Config configures a [Transport]. The zero Config is valid: default dialer,
// 1024 idle connections per upstream kept 90 s and no cap on their total, a
// 1 MiB response head bound,
// and a private *http.Transport as fallback.
type Config struct {
	// DialContext opens the TCP connections of the fast path, and of the
	// default Fallback. It is called on the goroutine of the request that
	// needs a connection, with the request's context (bounded by the head
	// timeout of [Transport.WithHeadTimeout], if any); an error fails that
	// request. A connection it returns that is not a socket (does not
	// implement syscall.Conn) cannot be checked while idle, so it serves
	// one exchange and is closed. Nil means a [net.Dialer] with DialTimeout
	// and 30 s TCP keep-alive probes.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)

	// DialTimeout bounds a dial of the default dialer. Zero means 10 s;
	// negative means no bound but the context's. Ignored when DialContext
	// is set: the hook bounds its own dials.
	DialTimeout time.Duration

	// MaxIdleConnsPerHost is how many idle connections are kept per
	// host:port; a connection finishing an exchange while that many are idle
	// is closed. Zero means 1024; negative means none are kept (every
	// connection is closed after one exchange).
	MaxIdleConnsPerHost int

	// MaxIdleConns caps the idle connections kept over every host:port
	// together; when that many are idle, a connection finishing an
	// exchange takes the place of the one idle longest, which is closed.
	// Zero means no cap on the total: the pool is then bounded by
	// MaxIdleConnsPerHost for each host:port it has reached, which suits
	// a fixed set of upstreams but not a client of any host (a forward
	// proxy), which must set it. Negative is invalid.
	MaxIdleConns int

	// IdleConnTimeout is how long a connection may stay idle. An expired
	// connection is closed when a request meets it or by a sweep that runs
	// every IdleConnTimeout/2 while connections are idle (one timer per
	// Transport, no goroutine per connection). Zero means 90 s; negative
	// means idle connections never expire. Nothing watches an idle
	// connection: one the upstream closed is found by the check of the
	// request that takes it (see [Transport]); keeping this below the
	// upstreams' own keep-alive timeout spares that check and the close
	// racing a request.
	IdleConnTimeout time.Duration

	// MaxResponseHeaderBytes bounds the bytes read before the final response
	// head is complete, informational (1xx) heads included. Exceeding it
	// fails the exchange with [ErrHeadTooLarge] and closes the connection.
	// Zero means 1 MiB; negative is invalid.
	MaxResponseHeaderBytes int64

	// Fallback carries every request the fast path does not: https, a
	// request with a body, an upgrade, CONNECT. Nil means a private
	// *http.Transport using DialContext (or the default dialer), no proxy,
	// no compression, HTTP/1.1 only, MaxIdleConnsPerHost and IdleConnTimeout
	// as above and a 10 s TLS handshake bound.
	Fallback http.RoundTripper
}

const (
	defaultDialTimeout = 10 * time.Second
	defaultIdlePerHost = 1024
	defaultIdleTimeout = 90 * time.Second
	defaultHeadBytes   = 1 << 20
)

// withDefaults returns a copy of c with its zero fields filled in.
func (c Config) withDefaults() Config {
	if c.DialTimeout == 0 {
		c.DialTimeout = defaultDialTimeout
	}
	if c.DialContext == nil {
		d := &net.Dialer{Timeout: max(c.DialTimeout, 0), KeepAlive: 30 * time.Second}
		c.DialContext = d.DialContext
	}
	if c.MaxIdleConnsPerHost == 0 {
		c.MaxIdleConnsPerHost = defaultIdlePerHost
	}
	if c.IdleConnTimeout == 0 {
		c.IdleConnTimeout = defaultIdleTimeout
	}
	if c.MaxResponseHeaderBytes == 0 {
		c.MaxResponseHeaderBytes = defaultHeadBytes
	}
	if c.Fallback == nil {
		c.Fallback = c.defaultFallback()
	}
	return c
}

func (c Config) defaultFallback() http.RoundTripper {
	return &tapTransport{t: &http.Transport{
		Proxy: nil, // never send upstream traffic through $HTTP_PROXY
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := c.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &TapConn{Conn: conn}, nil // see tapTransport
		},
		ForceAttemptHTTP2:     false, // upgrades need HTTP/1.1
		MaxIdleConnsPerHost:   c.MaxIdleConnsPerHost,
		MaxIdleConns:          c.MaxIdleConns,
		IdleConnTimeout:       max(c.IdleConnTimeout, 0),
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
	}}
}

// validate reports the first invalid field of c.
func (c Config) validate() error {
	if c.MaxResponseHeaderBytes < 0 {
		return errors.New("upstream: MaxResponseHeaderBytes must be ≥ 0")
	}
	if c.MaxIdleConns < 0 {
		return errors.New("upstream: MaxIdleConns must be ≥ 0")
	}
	return nil
}

// Transport is an [http.RoundTripper] to upstream servers.
//
// A request on the fast path, which is scheme "http", no body (Body nil or
// [http.NoBody], ContentLength 0, no TransferEncoding or Trailer), no
// Upgrade header or "Connection: upgrade", and not CONNECT, is sent over
// HTTP/1.1 on the caller's goroutine, on the newest idle connection to its
// host:port or a new one. Its head is written as given: the request line
// with URL.RequestURI(), Host from req.Host or URL.Host, then req.Header
// (minus Host, Content-Length, Transfer-Encoding and Trailer) in map order,
// adding nothing but "Content-Length: 0" for POST, PUT and PATCH (as
// net/http does) and "Connection: close" when req.Close is set. An invalid
// method, target, host or header field fails with [ErrInvalidRequest]
// before any connection is used. Informational responses other than 101 go
// to the Got1xxResponse hook of the request's
// [net/http/httptrace.ClientTrace] (an error from it fails the exchange)
// and are skipped; a 101 fails with [ErrUnexpectedSwitch].
//
// The connection returns to the idle pool when the response body reaches
// EOF, or at once for a response without body (HEAD, 204, 304, length 0),
// provided both sides speak HTTP/1.1, neither asked to close, and no byte
// beyond the response's framing was read (bytes after it, such as a body
// on a 204, close the connection). Closing the body before EOF closes the
// connection without draining it. If the request's context ends while the
// request is written, the head awaited or the body read, the blocked I/O
// ends at once, the connection is closed and the error wraps
// [context.Cause] of the context.
//
// An idle connection carries a request only if nothing arrived on it while
// it was idle. Every request, whatever its method, first checks the idle
// connection it takes with one non-blocking peek (MSG_PEEK): one the
// upstream closed or reset, or timed out with a 408 (as net/http, a
// server's idle timeout), is dropped and counted in [Stats].IdleClosed;
// one on which any other byte arrived is dropped and counted in
// [Stats].Unsolicited; the request then takes the next idle connection or
// dials. A connection that cannot be checked (DialContext returned
// something other than a socket) is never kept idle.
//
// One window stays open, as in every HTTP/1.1 client, net/http's
// included: bytes the upstream writes after the check and before its real
// answer are read as the answer to the request just sent, since nothing in
// HTTP/1.1 ties a response to its request. The real answer that follows is
// then a surplus: the connection is closed as soon as the surplus shows,
// beside a response in the buffer when an exchange ends, or on the socket
// when a request takes the connection. Only an upstream that keeps writing
// each answer after the next request has left keeps the connection one
// answer behind until then.
//
// A request is sent again, once, on a new connection, only when a reused
// connection shows that the upstream did not receive it, as net/http
// decides: nothing of the request could be written (any method, the
// request having no body); or the connection was closed or reset before
// any response byte, or the first response head was 408 Request Timeout,
// and the request is replayable (GET, HEAD, OPTIONS, TRACE, or one with an
// Idempotency-Key or X-Idempotency-Key header). Any other request is never
// sent twice. Dial errors keep their cause, so
// errors.Is(err, syscall.ECONNREFUSED) holds for a refused dial. On systems
// without a non-blocking peek (other than Linux, macOS and the BSDs) every
// request goes to the Fallback.
//
// Every other request goes to [Config.Fallback] unchanged. A Transport is
// safe for concurrent use; make it with [New].
type Transport struct {
	cfg         Config
	idle        *idlePool
	dials       atomic.Uint64
	retries     atomic.Uint64
	idleClosed  atomic.Uint64
	unsolicited atomic.Uint64
}

var _ http.RoundTripper = (*Transport)(nil)

// New returns a Transport configured by a copy of cfg with its defaults
// applied, or an error naming the first invalid field.
func New(cfg Config) (*Transport, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Transport{cfg: cfg, idle: newIdlePool(cfg.MaxIdleConnsPerHost, cfg.MaxIdleConns, cfg.IdleConnTimeout)}, nil
}

// RoundTrip sends req as described on [Transport], without a head timeout.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	return t.roundTrip(req, 0)
}

func (t *Transport) roundTrip(req *http.Request, headTimeout time.Duration) (*http.Response, error) {
	if !canProbeSockets || !isFastPath(req) {
		return t.roundTripFallback(req, headTimeout)
	}
	return t.roundTripFast(req.Context(), req, SendOptions{HeadTimeout: headTimeout})
}

// WithHeadTimeout returns a RoundTripper that sends requests through t, and
// its idle pool, but fails an exchange whose response head has not arrived
// d after RoundTrip was called (dial, write, stale retry and informational
// heads included) with an error wrapping [ErrHeadTimeout], which matches
// context.DeadlineExceeded; the connection is closed. Once the head is in,
// the body may take as long as it takes. On the fast path the bound is a
// connection deadline, costing no timer, which may expire up to d/8 (at
// most 500 ms) late: a connection keeps the deadline of its last exchange
// when it falls within that margin, instead of setting one for every
// exchange. On the fallback path it is a timer cancelling the request's
// context. d ≤ 0 means no bound: t itself.
func (t *Transport) WithHeadTimeout(d time.Duration) http.RoundTripper {
	if d <= 0 {
		return t
	}
	return &headTimeoutTransport{t: t, d: d}
}

type headTimeoutTransport struct {
	t *Transport
	d time.Duration
}

func (h *headTimeoutTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	return h.t.roundTrip(req, h.d)
}

// CloseIdleConnections closes the idle connections of the underlying
// Transport, as [Transport.CloseIdleConnections].
func (h *headTimeoutTransport) CloseIdleConnections() { h.t.CloseIdleConnections() }

// CloseIdleConnections closes every idle connection of the fast path, and
// calls the CloseIdleConnections method of the Fallback if it has one.
// Connections in use are not affected and may become idle afterwards; the
// Transport stays usable.
func (t *Transport) CloseIdleConnections() {
	t.idle.closeAll()
	if f, ok := t.cfg.Fallback.(interface{ CloseIdleConnections() }); ok {
		f.CloseIdleConnections()
	}
}

// Stats counts the fast path's connections, for tests and diagnostics.
type Stats struct {
	Dials   uint64 // connections opened so far
	Retries uint64 // requests sent again after a reused connection failed or answered 408
	// IdleClosed counts idle connections found closed, reset or timed out
	// (408) by the upstream when a request took them, and dropped.
	IdleClosed uint64
	// Unsolicited counts connections closed because bytes arrived on them
	// that no request asked for: while idle (other than a 408), or after a
	// response, beyond what its framing accounts for.
	Unsolicited uint64
	// Evicted counts idle connections closed to make room for a newer one
	// under MaxIdleConns.
	Evicted        uint64
	Idle           int // idle connections now
	MaxIdlePerHost int // idle connections now of the busiest host:port
}

// Stats returns the fast path's counts; the Fallback's are not included.
func (t *Transport) Stats() Stats {
	idle, maxHost := t.idle.idle()
	return Stats{
		Dials: t.dials.Load(), Retries: t.retries.Load(),
		IdleClosed: t.idleClosed.Load(), Unsolicited: t.unsolicited.Load(),
		Evicted: t.idle.evictions(), Idle: idle, MaxIdlePerHost: maxHost,
	}
}

// roundTripFallback sends req to the Fallback, bounding the wait for its
// head by d with a timer when d > 0.
func (t *Transport) roundTripFallback(req *http.Request, d time.Duration) (*http.Response, error) {
	if d <= 0 {
		return checkFallback(t.cfg.Fallback.RoundTrip(req))
	}
	// The derived context is not cancelled once the head is in: the body,
	// or an upgraded connection, still depends on it. It ends with the
	// request's context.
	ctx, cancel := context.WithCancelCause(req.Context())
	timer := time.AfterFunc(d, func() { cancel(ErrHeadTimeout) })
	resp, err := checkFallback(t.cfg.Fallback.RoundTrip(req.WithContext(ctx)))
	if timer.Stop() {
		if err != nil {
			cancel(nil)
		}
		return resp, err
	}
	if err == nil {
		resp.Body.Close()
	}
	return nil, fmt.Errorf("upstream: fallback round trip: %w", ErrHeadTimeout)
}

// checkFallback refuses a response of the Fallback that readResponse would
// refuse (see checkFieldNames): its body is closed unread, which makes
// http.Transport close the connection rather than reuse it.
func checkFallback(resp *http.Response, err error) (*http.Response, error) {
	if err != nil {
		return resp, err
	}
	if err := checkFieldNames(resp.Header); err != nil {
		resp.Body.Close()
		return nil, fmt.Errorf("upstream: fallback round trip: %w", err)
	}
	return resp, nil
}
