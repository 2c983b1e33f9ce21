// Command portcullis is an admission-controlling reverse proxy, and forward
// proxy: it caps the connections of each client at accept, limits
// concurrent exchanges per route, user or target, and forwards the rest to
// the upstreams (or, as a forward proxy, to the target each request names).
// Run "portcullis help" for its commands.
package main

import (
	"context"
	"os"
	"runtime/debug"
)

func main() {
	tuneGC(os.Getenv)
	go giveBackMemory(context.Background(), memoryCheckEvery, memoryFloor)
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// gcPercent is the garbage collector's target when GOGC is not set. A
// proxy's live heap is small (connection buffers and a few records per
// exchange) while it allocates per request, so Go's default of 100 makes it
// collect often for little memory; 400 took 5-7% off the CPU per request
// in the daemon's benchmark. GOMEMLIMIT, when set, still caps the heap.
const gcPercent = 400

// tuneGC sets the collector's target to gcPercent unless the environment
// sets GOGC, which then rules as usual.
func tuneGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
}
