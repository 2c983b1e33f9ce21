package forward

import (
	"log/slog"
	"net/http"
	"net/http/httputil"
	"sync"
)

// newReverseProxy returns the httputil.ReverseProxy that sends
// absolute-form requests to their target. ReverseProxy removes the
// hop-by-hop headers of RFC 9110 §7.6.1 from the request and the
// response, Proxy-Authorization and Proxy-Connection included, handles
// 1xx, trailers and streaming, and relays an upgrade once the target
// answers 101.
func (p *Proxy) newReverseProxy() *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite:        p.rewrite,
		Transport:      p.transport,
		ModifyResponse: p.addResponseVia,
		BufferPool:     bufferPool{},
		ErrorHandler:   p.targetFailed,
		ErrorLog:       slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
	}
}

// rewrite points the outbound request at its target. ServeHTTP has
// already checked that the target parses.
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	t, _ := TargetOf(pr.In)
	pr.Out.URL.Scheme = "http"
	pr.Out.URL.Host = t.String()
	if addr, err := dialAddress(pr.In, t); err == nil {
		// Pinned by ResolveTargets: dial that address, and pool the
		// connection under it, so that the request goes where it was
		// counted.
		pr.Out.URL.Host = addr
	}
	// ReverseProxy drops query parameters it cannot parse (a ';', a bad
	// escape); a proxy passes the query on as the client wrote it.
	pr.Out.URL.RawQuery = pr.In.URL.RawQuery
	pr.Out.Host = t.hostHeader(DefaultHTTPPort) // RFC 9112 §3.2.2: the target's, not the client's Host
	pr.Out.Header["Via"] = append(pr.Out.Header["Via"], p.via)
	// Rewrite drops the X-Forwarded-* and Forwarded fields a client sent;
	// X-Real-IP is one more claim of the client about itself.
	delete(pr.Out.Header, "X-Real-Ip")
}

func (p *Proxy) addResponseVia(resp *http.Response) error {
	resp.Header["Via"] = append(resp.Header["Via"], p.via)
	return nil
}

// bufferPool lends ReverseProxy its 32 KiB copy buffers, and the tunnels
// theirs.
type bufferPool struct{}

var buffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *buffers.Get().(*[]byte) }
func (bufferPool) Put(b []byte) { buffers.Put(&b) }

var _ httputil.BufferPool = bufferPool{}
