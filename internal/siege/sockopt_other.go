//go:build !linux

package siege

import "syscall"

// bindNoPort does nothing outside Linux, which alone has
// IP_BIND_ADDRESS_NO_PORT.
func bindNoPort(_, _ string, _ syscall.RawConn) error { return nil }
