//go:build !linux

package http1

// peerWatcher is Linux only; elsewhere every connection uses the
// background read.
type peerWatcher struct{}

var kernelWatch peerWatcher

func (peerWatcher) add(*conn) (uint64, bool) { return 0, false }
func (peerWatcher) remove(uint64)            {}
