package daemon_test

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-a07d1050/portcullis/internal/benchclient"
)

// BenchmarkDaemonClusterNewConn is the latency of a request on a new
// connection through "lean" and "lean-cluster" (as in
// BenchmarkDaemonCluster: every limit of benchLimitsOn, connection cap
// included, counted on a redis-server on loopback), one connection at a
// time: dial, one request, close, in alternating batches of 250 per
// daemon. The connections come from 64 client addresses (127.0.0.64-127)
// in turn, so that each client key is quiet (longer than release_hold)
// when its next connection comes, as a new client's is: its cap and its
// request's limits then ask Redis. It reports p50 and p90 of each in µs,
// the ratio of the p50s, redis-calls/req (commands, as
// BenchmarkDaemonCluster counts them: a pipeline of four scripts counts
// four) and redis-trips/req, the round trips: the read events redis-server
// processed (total_reads_processed of INFO stats; a pipeline arrives in
// one), releases and heartbeats included.
//
//	go test -run XXX -bench DaemonClusterNewConn -benchtime 5000x -count 3 ./internal/daemon
func BenchmarkDaemonClusterNewConn(b *testing.B) {
	names := benchClusterNames()
	rdb := startBenchRedis(b, names[1])
	addrs := make([]string, len(names))
	for i, name := range names {
		addrs[i] = startBenchChild(b, name).addr
		for j := range 64 { // warm up
			if _, err := newConnRequest(addrs[i], j); err != nil {
				b.Fatal(err)
			}
		}
	}
	resetRedisStats(b, rdb)
	reads0 := redisReads(b, rdb)
	cpu0 := redisCPU(b, rdb)
	lat := make([][]time.Duration, len(names))
	const batch = 250
	b.ResetTimer()
	for done := 0; done < b.N; done += batch {
		for i, addr := range addrs {
			for j := range min(batch, b.N-done) {
				d, err := newConnRequest(addr, done+j)
				if err != nil {
					b.Fatal(err)
				}
				lat[i] = append(lat[i], d)
			}
		}
	}
	b.StopTimer()
	p50 := make([]time.Duration, len(names))
	for i, name := range names {
		slices.Sort(lat[i])
		p50[i] = lat[i][len(lat[i])/2]
		b.ReportMetric(float64(p50[i].Nanoseconds())/1e3, name+"-p50-µs")
		b.ReportMetric(float64(lat[i][len(lat[i])*9/10].Nanoseconds())/1e3, name+"-p90-µs")
	}
	b.ReportMetric(float64(p50[1])/float64(p50[0]), names[1]+"/"+names[0]+"-p50")
	b.ReportMetric(float64(redisReads(b, rdb)-reads0)/float64(b.N), "redis-trips/req")
	reportRedisCost(b, rdb, cpu0)
}

// newConnRequest opens a connection to addr from client address
// 127.0.0.(64 + n%64), sends benchRequest once, reads the response and
// closes the connection; it returns how long that took.
func newConnRequest(addr string, n int) (time.Duration, error) {
	start := time.Now()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(64+n%64))}}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	c := benchclient.NewConn(nc, benchRequest)
	err = c.Do()
	_ = c.Close()
	return time.Since(start), err
}

// redisReads is the read events redis-server processed so far
// (total_reads_processed of INFO stats): one per request or pipeline
// that arrives in one piece, so about one per round trip.
func redisReads(b *testing.B, rdb *redis.Client) int64 {
	info, err := rdb.Info(context.Background(), "stats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_reads_processed:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatalf("INFO stats %q: %v", line, err)
			}
			return n
		}
	}
	b.Fatal("INFO stats has no total_reads_processed")
	return 0
}
