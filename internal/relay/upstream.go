package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/exchange"
	uptransport "github.com/seed-a07d1050/portcullis/internal/upstream"
)

// upstreamDownFor is how long an upstream that refused a connection is
// skipped by the round robin, unless every upstream of the route is down.
const upstreamDownFor = 5 * time.Second

// Upstream is one origin of a route.
type Upstream struct {
	scheme, host string
	ap           netip.AddrPort // host when it is an IP address and port (or port 80 implied); zero otherwise
	downUntil    atomic.Int64   // unix nanoseconds; zero when up
}

func (u *Upstream) isDown(now time.Time) bool { return u.downUntil.Load() > now.UnixNano() }

// HostPort is the upstream's host and port as its URL gave them.
func (u *Upstream) HostPort() string { return u.host }

// AddrPort is the upstream's IP address and port when its host is one
// (with port 80 implied); zero otherwise.
func (u *Upstream) AddrPort() netip.AddrPort { return u.ap }

// Pool picks the upstreams of one route in turn, skipping those that refused
// a connection recently.
type Pool struct {
	ups  []*Upstream
	next atomic.Uint64
	now  func() time.Time
}

func NewPool(urls []string) (*Pool, error) {
	p := &Pool{now: time.Now}
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("relay: upstream %q is not an http or https URL with a host", raw)
		}
		p.ups = append(p.ups, &Upstream{scheme: u.Scheme, host: u.Host, ap: addrPortOf(u.Host)})
	}
	if len(p.ups) == 0 {
		return nil, errors.New("relay: route has no upstream")
	}
	return p, nil
}

// size is how many upstreams p picks from.
func (p *Pool) Len() int { return len(p.ups) }

// PickExcept returns the next upstream in turn that is up and is not skip;
// if every other upstream is down it returns the next one other than skip
// anyway (a down mark is a guess, and a request must go somewhere), and nil
// only when skip is the only upstream.
func (p *Pool) PickExcept(skip *Upstream) *Upstream {
	n := uint64(len(p.ups))
	now := p.now()
	var fallback *Upstream
	// Each look advances the shared counter, so that the upstreams that are
	// up share the requests evenly instead of the one after a down upstream
	// getting its turns too.
	for range n {
		u := p.ups[p.next.Add(1)%n]
		if u == skip {
			continue
		}
		if !u.isDown(now) {
			return u
		}
		if fallback == nil {
			fallback = u
		}
	}
	return fallback
}

func (p *Pool) find(scheme, host string) *Upstream {
	for _, u := range p.ups {
		if u.host == host && u.scheme == scheme {
			return u
		}
	}
	return nil
}

func (p *Pool) MarkDown(u *Upstream) {
	u.downUntil.Store(p.now().Add(upstreamDownFor).UnixNano())
}

// poolTransport sends a request to the upstream its URL names and, when that
// upstream refuses the connection, marks it down and (for a request without
// a body, which nothing has consumed) tries the next upstream once more per
// upstream of the route. A refused connection means the upstream received
// nothing, so the retry cannot repeat an effect.
type poolTransport struct {
	pool *Pool
	base http.RoundTripper
}

func (t *poolTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	for tries := 1; err != nil && exchange.IsRefused(err) && tries < len(t.pool.ups); tries++ {
		failed := t.pool.find(req.URL.Scheme, req.URL.Host)
		if failed != nil {
			t.pool.MarkDown(failed)
		}
		if req.Body != nil && req.Body != http.NoBody {
			return nil, err
		}
		next := t.pool.PickExcept(failed)
		if next == nil {
			return nil, err
		}
		retry := req.WithContext(req.Context())
		u := *req.URL
		u.Scheme, u.Host = next.scheme, next.host
		retry.URL = &u
		req = retry
		resp, err = t.base.RoundTrip(req)
	}
	if err != nil && exchange.IsRefused(err) {
		if failed := t.pool.find(req.URL.Scheme, req.URL.Host); failed != nil {
			t.pool.MarkDown(failed)
		}
	}
	return resp, err
}

// isRefused reports whether err is a refused TCP connection.
// addrPortOf returns host, a URL's host and optional port, as an IP
// address and port (80 when none is given), or the zero AddrPort when its
// host is a name.
func addrPortOf(host string) netip.AddrPort {
	h, port, err := net.SplitHostPort(host)
	if err != nil {
		h, port = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"), "80"
	}
	ip, err := netip.ParseAddr(h)
	if err != nil || ip.Zone() != "" {
		return netip.AddrPort{}
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(ip, uint16(p))
}

// newUpstreamTransport returns the transport shared by every route. Plain
// http requests without a body (most of a proxy's traffic) are sent on the
// handler's own goroutine by package upstream; the rest (https upstreams,
// bodies, WebSocket and other upgrades) go to an *http.Transport. Both
// keep many idle connections per upstream (Go's default of 2 would make a
// busy proxy open and close upstream connections all the time), bound dial
// and TLS handshake times so that a dead upstream answers 502/504 instead
// of hanging, and speak HTTP/1.1 to upstreams so that upgrades work.
func NewTransport() *uptransport.Transport {
	// The zero Config is what the daemon wants: a 10 s dial bound, 1024 idle
	// connections per upstream kept 90 s, and as fallback an http.Transport
	// with the same dialer and caps, no $HTTP_PROXY, no compression (encodings
	// pass through untouched), HTTP/1.1 only and a 10 s TLS handshake bound.
	t, err := uptransport.New(uptransport.Config{})
	if err != nil {
		panic(err) // the zero Config is valid
	}
	return t
}

// BufferPool lends the 32 KiB copy buffers of httputil.ReverseProxy.
type BufferPool struct{ p sync.Pool }

const CopyBufferSize = 32 << 10

func NewBufferPool() *BufferPool {
	return &BufferPool{p: sync.Pool{New: func() any { return new([CopyBufferSize]byte) }}}
}

func (b *BufferPool) Get() []byte { return b.p.Get().(*[CopyBufferSize]byte)[:] }

// Put takes back a buffer Get gave. It is pooled as a pointer to its
// array, which costs no allocation, where a pointer to a slice header would
// cost one for every exchange.
func (b *BufferPool) Put(p []byte) {
	if cap(p) < CopyBufferSize {
		return // not one of ours
	}
	b.p.Put((*[CopyBufferSize]byte)(p[:CopyBufferSize]))
}

var _ httputil.BufferPool = (*BufferPool)(nil)

// NewReverseProxy returns the handler that sends a route's requests to its
// upstreams.
//
// The route's timeout bounds the wait for each upstream's response head, a
// retry on another upstream after a refused connection getting its own.
func NewReverseProxy(p *Pool, fw Forwarding, base *uptransport.Transport, timeout time.Duration, bufs httputil.BufferPool, log *slog.Logger) *httputil.ReverseProxy {
	if timeout <= 0 {
		timeout = config.DefaultUpstreamTimeout
	}
	return &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { rewrite(pr, p.PickExcept(nil), fw) },
		Transport: &poolTransport{pool: p, base: base.WithHeadTimeout(timeout)},
		// Zero: a body of known length is written as the server's buffer
		// fills, so that a small response leaves in one write with its
		// head. ReverseProxy flushes server-sent events and bodies of
		// unknown length (chunked streams) after every read whatever this
		// says. -1 would cost a second write and a timer goroutine per
		// response.
		FlushInterval: 0,
		BufferPool:    bufs,
		ErrorHandler:  proxyErrorHandler(log),
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
}

// rewrite points the outbound request at u and writes the forwarding
// headers from what the listener believes (see forwarding.write).
func rewrite(pr *httputil.ProxyRequest, u *Upstream, fw Forwarding) {
	pr.Out.URL.Scheme = u.scheme
	pr.Out.URL.Host = u.host
	pr.Out.Host = pr.In.Host // the upstream sees the name the client asked for
	fw.write(pr.Out.Header, pr.In)
}

// proxyErrorHandler answers a failed upstream exchange: 504 when the
// upstream timed out, 502 otherwise, with a short body. It never waits.
func proxyErrorHandler(log *slog.Logger) func(http.ResponseWriter, *http.Request, error) {
	gate := &logGate{interval: time.Second}
	return func(w http.ResponseWriter, r *http.Request, err error) {
		if r.Context().Err() != nil {
			// The client went away or the server is stopping: nobody reads
			// this. A client that left is logged and counted as 499.
			if st := exchange.StateOf(w); st != nil {
				st.Left = exchange.ClientLeft(r)
			}
			log.Debug("upstream exchange abandoned", "path", r.URL.Path, "error", err)
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		status, body := http.StatusBadGateway, "bad gateway: upstream failed\n"
		var ne net.Error
		if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
			status, body = http.StatusGatewayTimeout, "gateway timeout: upstream did not answer in time\n"
		}
		if ok, held := gate.allow(time.Now()); ok {
			log.Warn("upstream failed", "path", r.URL.Path, "status", status, "error", err, "suppressed", held)
		}
		exchange.WriteShort(w, status, body)
	}
}

// logGate lets one log line through per interval and counts the others, so
// that a flood of failures cannot flood the log.
type logGate struct {
	interval   time.Duration
	next       atomic.Int64 // unix nanoseconds before which lines are held back
	suppressed atomic.Uint64
}

// allow reports whether a line may be logged now and, if so, how many were
// held back since the last one.
func (g *logGate) allow(now time.Time) (bool, uint64) {
	next := g.next.Load()
	if now.UnixNano() < next || !g.next.CompareAndSwap(next, now.Add(g.interval).UnixNano()) {
		g.suppressed.Add(1)
		return false, 0
	}
	return true, g.suppressed.Swap(0)
}
