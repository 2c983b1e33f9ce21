package upstream

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
)

// maxTap bounds the response bytes a TapConn records per exchange: a head
// longer than that has its Connection field read only if it comes first.
const maxTap = 64 << 10

// A TapConn is an upstream connection read by net/http's transport that
// records the bytes read while armed, so that the head of the response
// can be read again once net/http has read it: net/http drops a
// Connection field that says "close", and with it the names of the
// hop-by-hop fields it lists, which a proxy must still remove (RFC 9110
// §7.6.1). The fallback transport wraps its plain connections in one; the
// interception wraps its TLS connections to HTTP/1.1 targets, above TLS.
// A TapConn records at most 64 KiB per exchange.
type TapConn struct {
	net.Conn
	mu    sync.Mutex
	armed bool
	buf   []byte
}

func (c *TapConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		if c.armed && len(c.buf) < maxTap {
			c.buf = append(c.buf, p[:min(n, maxTap-len(c.buf))]...)
		}
		c.mu.Unlock()
	}
	return n, err
}

// Arm starts recording, from an empty record.
func (c *TapConn) Arm() {
	c.mu.Lock()
	c.armed, c.buf = true, c.buf[:0]
	c.mu.Unlock()
}

// Disarm stops recording and returns what was recorded since Arm.
func (c *TapConn) Disarm() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed = false
	b := c.buf
	c.buf = nil
	return b
}

// tapTransport is the default Fallback (requests with a body, upgrades):
// an http.Transport over TapConns, whose responses lose the fields a
// Connection field naming "close" listed. Over TLS (https upstreams) the
// tap sees ciphertext and finds no head: those responses keep net/http's
// reading.
type tapTransport struct{ t *http.Transport }

func (tt *tapTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var mu sync.Mutex
	var last *TapConn
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		if c, ok := info.Conn.(*TapConn); ok {
			c.Arm()
			mu.Lock()
			if last != nil && last != c {
				last.Disarm()
			}
			last = c
			mu.Unlock()
		}
	}}
	resp, err := tt.t.RoundTrip(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
	mu.Lock()
	c := last
	mu.Unlock()
	if c == nil {
		return resp, err
	}
	b := c.Disarm()
	if resp != nil && resp.Close {
		for _, name := range FinalCloseNamed(b) {
			delete(resp.Header, name)
		}
	}
	return resp, err
}

func (tt *tapTransport) CloseIdleConnections() { tt.t.CloseIdleConnections() }

// FinalCloseNamed returns the canonical names the Connection fields of the
// final response head in b list besides "close", when one of them says
// "close"; nil otherwise, or when b holds no whole final head. The 1xx
// heads before it are skipped. A transport whose response has Close set
// removes these fields from its header.
func FinalCloseNamed(b []byte) []string {
	for {
		end := bytes.Index(b, []byte("\r\n\r\n"))
		if end < 0 {
			return nil
		}
		if len(b) >= 10 && string(b[:5]) == "HTTP/" && b[9] == '1' {
			b = b[end+4:] // an interim response
			continue
		}
		return closeNamed(b)
	}
}
