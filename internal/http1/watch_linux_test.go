//go:build linux

package http1

// kernelWatched returns how many connections the kernel watch holds.
func kernelWatched() int {
	kernelWatch.mu.Lock()
	defer kernelWatch.mu.Unlock()
	return len(kernelWatch.conns)
}
