//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package upstream

import "net"

// canProbeSockets is false where no non-blocking peek is available: every
// request then goes to the Fallback, whose read loop watches idle
// connections.
const canProbeSockets = false

func newSocketProber(net.Conn) idleProber { return nil }
