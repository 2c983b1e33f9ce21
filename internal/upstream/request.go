package upstream

import (
	"bufio"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"golang.org/x/net/http/httpguts"
)

// isFastPath reports whether req is served on the caller's goroutine: plain
// http, no body, no upgrade, not CONNECT. Every other request goes to the
// fallback.
func isFastPath(req *http.Request) bool {
	if req.URL == nil || req.URL.Scheme != "http" || req.Method == http.MethodConnect {
		return false
	}
	if (req.Body != nil && req.Body != http.NoBody) || req.ContentLength != 0 ||
		len(req.TransferEncoding) != 0 || len(req.Trailer) != 0 {
		return false
	}
	return !isUpgrade(req.Header)
}

// isUpgrade reports whether h asks to switch protocols (WebSocket, h2c).
func isUpgrade(h http.Header) bool {
	return len(h["Upgrade"]) != 0 || httpguts.HeaderValuesContainsToken(h["Connection"], "upgrade")
}

// isReplayable reports whether a bodyless request may be sent again after a
// reused connection failed before any response byte, by net/http's rule:
// an idempotent method, or an idempotency key the caller vouches for.
func isReplayable(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, ok := req.Header["Idempotency-Key"]
	if !ok {
		_, ok = req.Header["X-Idempotency-Key"]
	}
	return ok
}

// wantsClose reports whether the request forbids reusing its connection.
func wantsClose(req *http.Request) bool {
	return req.Close || httpguts.HeaderValuesContainsToken(req.Header["Connection"], "close")
}

// skippedHeader reports whether a field of req.Header is left out of the
// request as net/http leaves it out: Host comes from req.Host or the URL,
// and the framing fields of a bodyless request are ours to decide.
func skippedHeader(name string) bool {
	switch name {
	case "Host", "Content-Length", "Transfer-Encoding", "Trailer":
		return true
	}
	return false
}

// requestTarget returns the method, request target and Host of req, or an
// error wrapping ErrInvalidRequest.
func requestTarget(req *http.Request) (method, target, host string, err error) {
	if req.URL.Host == "" {
		return "", "", "", fmt.Errorf("%w: no host in the request URL", ErrInvalidRequest)
	}
	method = req.Method
	if method == "" {
		method = http.MethodGet
	}
	if !isToken(method) {
		return "", "", "", fmt.Errorf("%w: method %q is not a token", ErrInvalidRequest, method)
	}
	target = req.URL.RequestURI()
	if !validTarget(target) {
		return "", "", "", fmt.Errorf("%w: request target %q is not origin-form, absolute-form or \"*\", or has a space or control byte", ErrInvalidRequest, target)
	}
	host = req.Host
	if host == "" {
		host = req.URL.Host
	}
	if host == "" || !httpguts.ValidHostHeader(host) {
		return "", "", "", fmt.Errorf("%w: host %q is empty or invalid", ErrInvalidRequest, host)
	}
	return method, target, host, nil
}

// validateHeader returns an error wrapping ErrInvalidRequest for the first
// invalid field name or value of h, as net/http's Transport refuses them.
func validateHeader(h http.Header) error {
	for name, values := range h {
		if !httpguts.ValidHeaderFieldName(name) {
			return fmt.Errorf("%w: invalid header field name %q", ErrInvalidRequest, name)
		}
		for _, v := range values {
			if !httpguts.ValidHeaderFieldValue(v) {
				return fmt.Errorf("%w: invalid header field value for %q", ErrInvalidRequest, name)
			}
		}
	}
	return nil
}

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !httpguts.IsTokenRune(rune(s[i])) {
			return false
		}
	}
	return true
}

// validTarget reports whether s can stand between the method and the
// version: origin-form, absolute-form or "*", without space or control
// byte (RFC 9112 §3.2).
func validTarget(s string) bool {
	if s != "*" && !strings.HasPrefix(s, "/") && !strings.HasPrefix(s, "http://") && !strings.HasPrefix(s, "https://") {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] == 0x7f {
			return false
		}
	}
	return true
}

// sendsZeroLength reports whether a bodyless request carries
// "Content-Length: 0", as net/http sends it for methods that normally have
// a body: some servers answer 411 Length Required without it.
func sendsZeroLength(method string) bool {
	return method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch
}

// writeRequest writes the head of a bodyless request to w, without
// flushing. The header must have been validated.
func writeRequest(w *bufio.Writer, req *http.Request, method, target, host string) {
	w.WriteString(method)
	w.WriteByte(' ')
	w.WriteString(target)
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(host)
	w.WriteString("\r\n")
	for name, values := range req.Header {
		if skippedHeader(name) {
			continue
		}
		for _, v := range values {
			w.WriteString(name)
			w.WriteString(": ")
			w.WriteString(v)
			w.WriteString("\r\n")
		}
	}
	if sendsZeroLength(method) {
		w.WriteString("Content-Length: 0\r\n")
	}
	if req.Close && !httpguts.HeaderValuesContainsToken(req.Header["Connection"], "close") {
		w.WriteString("Connection: close\r\n")
	}
	w.WriteString("\r\n")
}

// hostPort returns the dial address of u's host: the port defaults to 80.
func hostPort(host string) string {
	// A port follows the last colon, unless that colon is inside an IPv6
	// literal's brackets.
	if i := strings.LastIndexByte(host, ':'); i > strings.LastIndexByte(host, ']') {
		if i == len(host)-1 {
			return host + "80"
		}
		return host
	}
	return host + ":80"
}

var writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4<<10) }}
var readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4<<10) }}
