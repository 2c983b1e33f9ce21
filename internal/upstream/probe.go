package upstream

import "net"

// idleState is what a check of an idle connection found.
type idleState uint8

const (
	// idleOpen: nothing arrived, the connection can carry a request.
	idleOpen idleState = iota
	// idleClosed: the upstream closed or reset the connection, or timed it
	// out with a 408 (which a server sends before closing an idle
	// connection): the expected end of a kept connection.
	idleClosed
	// idleUnsolicited: bytes arrived that no request asked for.
	idleUnsolicited
)

// idleProber is a connection that tells, without blocking and without
// consuming anything, whether anything arrived on it since it was last
// read: the check every idle connection passes before it carries a request.
type idleProber interface {
	probeIdle() idleState
}

// proberFor returns the check of nc's idle state: nc's own if it has one
// (the in-memory connections of the tests), a non-blocking peek at its
// socket if it is one, or nil when nc cannot be checked; such a connection
// is never kept idle.
func proberFor(nc net.Conn) idleProber {
	if p, ok := nc.(idleProber); ok {
		return p
	}
	return newSocketProber(nc)
}

// peekLen is how many bytes a check looks at: enough to tell a 408.
const peekLen = len("HTTP/1.1 408")

// is408 reports whether b begins a 408 Request Timeout response, by
// net/http's rule ("HTTP/1.", any minor version, " 408"): what a server
// writes when it times out an idle connection before closing it.
func is408(b []byte) bool {
	return len(b) >= peekLen && string(b[:7]) == "HTTP/1." && string(b[8:12]) == " 408"
}
