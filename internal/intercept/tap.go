package intercept

import (
	"bytes"
	"net"
	"net/textproto"
	"strings"
	"sync"

	"golang.org/x/net/http/httpguts"
)

// This file is internal/upstream's tap, for the interception's HTTP/1.1
// target connections, which are TLS: here the tap sits above TLS.

// maxTap bounds the response bytes a tapConn records per exchange: a head
// longer than that has its Connection field read only if it comes first.
const maxTap = 64 << 10

// A tapConn is a target connection of the fallback transport that records
// the bytes read while armed, so that the head of the response can be read
// again once net/http has read it: net/http drops a Connection field that
// says "close", and with it the names of the hop-by-hop fields it lists,
// which a proxy must still remove (RFC 9110 §7.6.1).
type tapConn struct {
	net.Conn
	mu    sync.Mutex
	armed bool
	buf   []byte
}

func (c *tapConn) Read(p []byte) (int, error) {
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

func (c *tapConn) arm() {
	c.mu.Lock()
	c.armed, c.buf = true, c.buf[:0]
	c.mu.Unlock()
}

func (c *tapConn) disarm() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed = false
	b := c.buf
	c.buf = nil
	return b
}

// finalCloseNamed returns what closeNamed returns for the final response
// head in b, the 1xx heads before it skipped.
func finalCloseNamed(b []byte) []string {
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

// closeNamed returns the canonical names the Connection fields of the
// response head at the start of b list besides "close", when one of them
// says "close"; nil otherwise.
func closeNamed(b []byte) []string {
	end := bytes.Index(b, []byte("\r\n\r\n"))
	if end < 0 {
		return nil
	}
	var values []string
	for line := range strings.SplitSeq(string(b[:end]), "\r\n") {
		const name = "connection:"
		if len(line) > len(name) && strings.EqualFold(line[:len(name)], name) {
			values = append(values, strings.TrimSpace(line[len(name):]))
		}
	}
	if !httpguts.HeaderValuesContainsToken(values, "close") {
		return nil
	}
	var names []string
	for _, v := range values {
		for tok := range strings.SplitSeq(v, ",") {
			if tok = textproto.TrimString(tok); tok != "" && !strings.EqualFold(tok, "close") {
				names = append(names, textproto.CanonicalMIMEHeaderKey(tok))
			}
		}
	}
	return names
}
