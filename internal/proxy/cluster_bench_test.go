package proxy_test

import (
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/redistest"
)

// benchClusterBlock is the cluster block of the "-cluster" daemons of
// BenchmarkDaemonCluster: every limit of benchLimitsOn counts on the
// redis-server at addr (a timeout long enough that a loaded machine never
// falls back to node-local counts, which would make it look cheaper).
func benchClusterBlock(addr string) string {
	return "cluster: {redis: {addrs: [\"" + addr + "\"]}, timeout: 1s, on_error: closed}\n"
}

// BenchmarkDaemonCluster is BenchmarkDaemon with the daemon "lean" and
// "lean-cluster", the same with a cluster block on a redis-server on
// loopback, so that every limit (connection caps, client limit, route
// limit, shadow limit) counts in Redis: the ratio of requests per second
// and of CPU per request is what the cluster costs a keep-alive request
// (the redis-server's own CPU is not counted). Redis and the cluster child
// are stopped at the end of each run.
//
//	go test -run XXX -bench DaemonCluster -benchtime 20000x -count 6 ./internal/proxy
func BenchmarkDaemonCluster(b *testing.B) {
	srv := redistest.Start(b)
	b.Setenv("PORTCULLIS_BENCH_REDIS", srv.Addr())
	names := []string{"lean", "lean-cluster"}
	b.Cleanup(func() {
		benchMu.Lock()
		defer benchMu.Unlock()
		if c := benchChildren["lean-cluster"]; c != nil {
			c.stop()
			delete(benchChildren, "lean-cluster")
		}
	})
	benchDaemons(b, names)
}
