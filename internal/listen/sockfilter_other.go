//go:build !linux

package listen

import "net"

// detachSocketFilter does nothing: socket filters (syn_filter) are Linux
// only.
func detachSocketFilter(net.Listener) {}
