package daemon

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/limit/redisstore"
)

// connectTimeout bounds the daemon's first contact with Redis at start
// (and check --connect's): a PING, the scripts loaded, the pool warmed.
const connectTimeout = 3 * time.Second

// warmConns is how many connections to Redis the daemon opens before its
// listeners serve and keeps idle in the pool (MinIdleConns): enough that
// the first requests, concurrent on every core, do not each pay for a new
// connection (with TLS, a handshake that may not fit in the call's
// timeout).
func warmConns() int { return max(4, 2*runtime.GOMAXPROCS(0)) }

// connect is the daemon's first contact with Redis, before any listener
// serves: it probes Redis (PING and the scripts loaded) and warms the
// connection pool. Redis refusing the credentials or the user's rights
// stops the start with an error: a daemon that starts so would run on its
// node-local fallback for good. Any other failure (Redis down, slow,
// unreachable) is logged at WARN and the daemon starts, deciding by
// on_error until Redis answers; portcullis_cluster_degraded says so.
func (c *cluster) connect() error {
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	if err := redisstore.Probe(ctx, c.client); err != nil {
		if errors.Is(err, redisstore.ErrAuth) {
			return fmt.Errorf("daemon: cluster: %s: %w", c.describe(), err)
		}
		c.startErr = redisstore.FailureReason(err)
		c.log.Warn("cluster: redis does not answer at start; deciding by on_error until it does",
			"redis", c.describe(), "reason", c.startErr, "on_error", string(c.cfg.OnError), "error", err)
		return nil
	}
	warm(ctx, c.client, warmConns())
	return nil
}

// describe names the Redis of c for log lines and errors.
func (c *cluster) describe() string {
	if r := c.cfg.Redis; len(r.SentinelAddrs) > 0 {
		return "master " + r.MasterName + " of sentinels " + strings.Join(r.SentinelAddrs, ",")
	}
	return strings.Join(c.cfg.Redis.Addrs, ",")
}

// warm opens n connections at once (n concurrent PINGs), which the pool
// then keeps.
func warm(ctx context.Context, client redis.UniversalClient, n int) {
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = client.Ping(ctx).Err()
		}()
	}
	wg.Wait()
}

// CheckCluster connects to the Redis of cfg's cluster block as the daemon
// would at start: one PING and the scripts loaded, within a few seconds.
// It returns what it reached ("" without a cluster block) or an error
// saying why it could not; an authentication error wraps
// redisstore.ErrAuth. It is `portcullis check --connect`.
func CheckCluster(cfg *config.Config) (string, error) {
	if cfg == nil || cfg.Cluster == nil {
		return "", nil
	}
	eff := cfg.Effective().Cluster
	tlsConf, err := eff.Redis.TLS.ClientConfig()
	if err != nil {
		return "", fmt.Errorf("cluster: %w", err)
	}
	client, err := redisstore.NewClient(clientOptions(eff, tlsConf))
	if err != nil {
		return "", fmt.Errorf("cluster: %w", err)
	}
	defer client.Close()
	c := &cluster{cfg: *eff}
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	start := time.Now()
	if err := redisstore.Probe(ctx, client); err != nil {
		return "", fmt.Errorf("cluster: redis %s (%s): %w", c.describe(), redisstore.FailureReason(err), err)
	}
	return fmt.Sprintf("redis %s answered in %v", c.describe(), time.Since(start).Round(time.Microsecond)), nil
}

// degradedReasons are the reason label values of
// portcullis_cluster_degraded, each exported (0 or 1) so that an alert
// sees the series before it turns 1.
var degradedReasons = []string{redisstore.ReasonTimeout, redisstore.ReasonAuth, redisstore.ReasonRefused, redisstore.ReasonError}

var degradedDesc = prometheus.NewDesc("portcullis_cluster_degraded",
	"1 while some cluster limit of this node decides without Redis (its node-local fallback under on_error open, refusals under closed), by why Redis did not answer; 0 otherwise.",
	[]string{"reason"}, nil)

// degraded returns why some of the daemon's cluster stores decide without
// Redis now (their breaker open), sorted; nil when none does. Until the
// first store has asked Redis, a failed start counts.
func (c *cluster) degraded() []string {
	if c == nil {
		return nil
	}
	var out []string
	for r := range c.outages.Reasons() {
		out = append(out, r)
	}
	if len(out) == 0 && c.startErr != "" && !c.answered() {
		out = append(out, c.startErr)
	}
	slices.Sort(out)
	return out
}

// answered reports whether some store has had an answer from Redis since
// start (so that the start's failure is over).
func (c *cluster) answered() bool {
	if c.seenAnswer.Load() {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
	defer cancel()
	if c.client.Ping(ctx).Err() == nil {
		c.seenAnswer.Store(true)
		return true
	}
	return false
}

// collectDegraded sends portcullis_cluster_degraded; nothing without a
// cluster.
func (c *cluster) collectDegraded(ch chan<- prometheus.Metric) {
	if c == nil {
		return
	}
	on := c.degraded()
	for _, r := range degradedReasons {
		v := 0.0
		if slices.Contains(on, r) {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(degradedDesc, prometheus.GaugeValue, v, r)
	}
}
