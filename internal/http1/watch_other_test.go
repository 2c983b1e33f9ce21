//go:build !linux

package http1

// kernelWatched is -1 where there is no kernel watch.
func kernelWatched() int { return -1 }
