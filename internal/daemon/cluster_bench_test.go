package daemon_test

import (
	"context"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-a07d1050/portcullis/internal/benchclient"
	"github.com/seed-a07d1050/portcullis/internal/redistest"
)

// benchClusterBlock is the cluster block of the "-cluster" daemons of
// BenchmarkDaemonCluster: every limit of benchLimitsOn counts on the
// redis-server at addr (a timeout long enough that a loaded machine never
// falls back to node-local counts, which would make it look cheaper).
func benchClusterBlock(addr string) string {
	return "cluster: {redis: {addrs: [\"" + addr + "\"]}, timeout: 1s, on_error: closed}\n"
}

// benchClusterNames are the daemons BenchmarkDaemonCluster and
// BenchmarkDaemonClusterLatency compare: without and with a cluster block,
// and, with PORTCULLIS_BENCH_RATE=1, both with a route rate (benchRated)
// besides the limits.
func benchClusterNames() []string {
	if os.Getenv("PORTCULLIS_BENCH_RATE") != "" {
		return []string{"lean-rate", "lean-cluster+rate"}
	}
	return []string{"lean", "lean-cluster"}
}

// benchRated adds to the route of limits a rate per client address that
// the benchmarks' clients keep under (4000 requests a second each, with a
// burst of 4000), so that every request is admitted and what is measured
// is what the rate costs.
func benchRated(limits string) string {
	const line = "        limit: {permits: 128, queue: {size: 64, timeout: 1s}}\n"
	if !strings.Contains(limits, line) {
		panic("benchRated: the route's limit line moved")
	}
	return strings.Replace(limits, line, line+"        rate: {rate: 4000r/s, burst: 4000, nodelay: true}\n", 1)
}

// BenchmarkDaemonCluster is BenchmarkDaemon with the daemon "lean" and
// "lean-cluster", the same with a cluster block on a redis-server on
// loopback, so that every limit (connection caps, client limit, route
// limit, shadow limit) counts in Redis: the ratio of requests per second
// and of CPU per request is what the cluster costs a keep-alive request
// (the redis-server's own CPU is not counted). It also reports
// redis-calls/req: the commands the cluster daemon sent to redis-server
// (script calls, and any other: see redisCalls) per request, warm-up
// excluded, and admitted/redis-cpu-s: the requests admitted by the cluster
// daemon per second of CPU time redis-server spent (used_cpu_user +
// used_cpu_sys of INFO cpu) meanwhile. Redis and the cluster child are
// stopped at the end of each run. PORTCULLIS_BENCH_RATE=1 adds a route
// rate to both daemons (benchRated).
//
//	go test -run XXX -bench DaemonCluster -benchtime 20000x -count 6 ./internal/daemon
func BenchmarkDaemonCluster(b *testing.B) {
	names := benchClusterNames()
	rdb := startBenchRedis(b, names[1])
	for _, name := range names {
		benchclient.Drive(b, startBenchChild(b, name).connsFor(b), 2*benchConns)
	}
	resetRedisStats(b, rdb)
	cpu0 := redisCPU(b, rdb)
	benchDaemons(b, names)
	reportRedisCost(b, rdb, cpu0)
}

// reportRedisCost reports redis-calls/req and admitted/redis-cpu-s since
// the stats were reset and Redis had used cpu0.
func reportRedisCost(b *testing.B, rdb *redis.Client, cpu0 float64) {
	used := redisCPU(b, rdb) - cpu0
	b.ReportMetric(float64(redisCalls(b, rdb))/float64(b.N), "redis-calls/req")
	if used > 0 {
		b.ReportMetric(float64(b.N)/used, "admitted/redis-cpu-s")
	}
}

// redisCPU returns the CPU time redis-server used so far, in seconds.
func redisCPU(b *testing.B, rdb *redis.Client) float64 {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for line := range strings.Lines(info) {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_user" || name == "used_cpu_sys") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("INFO cpu %q: %v", line, err)
			}
			sum += f
		}
	}
	return sum
}

// BenchmarkDaemonClusterLatency is the latency of one keep-alive request
// through "lean" and "lean-cluster" (as in BenchmarkDaemonCluster), one
// request at a time on one connection per daemon, in alternating batches
// of 500: p50 and p90 of each in µs, the ratio of the p50s, and
// redis-calls/req for the cluster daemon.
//
//	go test -run XXX -bench DaemonClusterLatency -benchtime 5000x -count 6 ./internal/daemon
func BenchmarkDaemonClusterLatency(b *testing.B) {
	names := benchClusterNames()
	rdb := startBenchRedis(b, names[1])
	conns := make([]*benchclient.Conn, len(names))
	for i, name := range names {
		c := startBenchChild(b, name)
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 20)}}
		nc, err := d.Dial("tcp", c.addr)
		if err != nil {
			b.Fatal(err)
		}
		conns[i] = benchclient.NewConn(nc, benchRequest)
		b.Cleanup(func() { _ = conns[i].Close() })
		for range 200 { // warm up
			if err := conns[i].Do(); err != nil {
				b.Fatal(err)
			}
		}
	}
	resetRedisStats(b, rdb)
	cpu0 := redisCPU(b, rdb)
	lat := make([][]time.Duration, len(names))
	const batch = 500
	b.ResetTimer()
	for done := 0; done < b.N; done += batch {
		for i, c := range conns {
			for range min(batch, b.N-done) {
				start := time.Now()
				if err := c.Do(); err != nil {
					b.Fatal(err)
				}
				lat[i] = append(lat[i], time.Since(start))
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
	reportRedisCost(b, rdb, cpu0)
}

// startBenchRedis starts the redis-server of the "-cluster" daemons, and
// stops their child, named name, at the end of the benchmark run.
func startBenchRedis(b *testing.B, name string) *redis.Client {
	srv := redistest.Start(b)
	b.Setenv("PORTCULLIS_BENCH_REDIS", srv.Addr())
	b.Cleanup(func() {
		benchMu.Lock()
		defer benchMu.Unlock()
		if c := benchChildren[name]; c != nil {
			c.stop()
			delete(benchChildren, name)
		}
	})
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	b.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func resetRedisStats(b *testing.B, rdb *redis.Client) {
	if err := rdb.ConfigResetStat(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
}

// redisCalls returns the calls the daemons made to redis-server since its
// stats were reset: the commands they sent, counted by INFO commandstats
// (a pipeline counts each of its commands, and so does this), without
// the commands that scripts run inside Redis (TIME, HGETALL, HINCRBY, ...,
// which commandstats counts too) and without INFO and CONFIG RESETSTAT.
func redisCalls(b *testing.B, rdb *redis.Client) int64 {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for line := range strings.Lines(info) {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		cmd := strings.TrimPrefix(name, "cmdstat_")
		switch {
		case cmd == "evalsha", cmd == "eval", cmd == "ping", cmd == "publish", cmd == "subscribe",
			cmd == "hello", cmd == "auth", cmd == "select", strings.HasPrefix(cmd, "script|"), strings.HasPrefix(cmd, "client|"):
		default:
			continue // run by a script, or by this benchmark
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		v, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			b.Fatalf("commandstats %q: %v", line, err)
		}
		n += v
		if testing.Verbose() {
			b.Logf("%s: %d (%s)", name, v, rest)
		}
	}
	return n
}
