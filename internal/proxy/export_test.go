package proxy

// CountIdleBytesInUserspace makes tcp listeners' idle watches count bytes
// themselves, as they do where the kernel cannot tell how long a socket
// has been idle, until the returned function is called.
func CountIdleBytesInUserspace() (restore func()) {
	forceUserspaceIdle.Store(true)
	return func() { forceUserspaceIdle.Store(false) }
}
