package daemon

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"reflect"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/limit/redisstore"
	"github.com/seed-a07d1050/portcullis/limit/redisstore/redisprom"
)

// cluster shares the route and client limits of every node that uses the
// same Redis and prefix, and the accept-time per-client connection caps
// unless cfg.LocalConnectionCaps keeps those per node (a connection whose
// cap counts in Redis is admitted on its own goroutine, never in the accept
// loop). A limit or cap that is unlimited for a key never asks Redis about
// that key, and a listener with no finite connection cap gets no Store at
// all. max_conns, and the caps of http3 listeners, always count per node.
type cluster struct {
	cfg     config.Cluster // effective
	client  redis.UniversalClient
	log     *slog.Logger
	outages *redisstore.OutageLog // shared by every Store: one outage, one log line

	startErr   string      // FailureReason of the probe at start; "" when Redis answered
	seenAnswer atomic.Bool // Redis answered since a failed start
}

// redisClientLog routes go-redis's own messages (such as a failed dial in
// its connection pool, which a Redis outage repeats many times) to the
// daemon's log at DEBUG: the outage itself is logged once, by the Stores'
// OutageLog.
type redisClientLog struct{ log *slog.Logger }

func (l redisClientLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "redis client", "message", fmt.Sprintf(format, v...))
}

// newCluster connects to the Redis of cfg (nil: no cluster, nil result).
func newCluster(cfg *config.Cluster, log *slog.Logger) (*cluster, error) {
	if cfg == nil {
		return nil, nil
	}
	tlsConf, err := cfg.Redis.TLS.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("daemon: cluster: %w", err)
	}
	client, err := redisstore.NewClient(clientOptions(cfg, tlsConf))
	if err != nil {
		return nil, fmt.Errorf("daemon: cluster: %w", err)
	}
	// go-redis logs through one process-wide logger.
	redis.SetLogger(redisClientLog{log})
	c := &cluster{cfg: *cfg, client: client, log: log, outages: redisstore.NewOutageLog(log)}
	if err := c.connect(); err != nil {
		_ = client.Close()
		return nil, err
	}
	return c, nil
}

// clientOptions are the options of the Redis client of cfg: a server or a
// Redis Cluster (addrs), or a master found through Sentinels.
func clientOptions(cfg *config.Cluster, tlsConf *tls.Config) redisstore.ClientOptions {
	o := redisstore.ClientOptions{
		Addrs:        cfg.Redis.Addrs,
		Username:     cfg.Redis.Username,
		PasswordFile: cfg.Redis.PasswordFile,
		DB:           cfg.Redis.DB,
		TLS:          tlsConf,
		MinIdleConns: warmConns(),
	}
	if len(cfg.Redis.SentinelAddrs) > 0 {
		o.Addrs = cfg.Redis.SentinelAddrs
		o.MasterName = cfg.Redis.MasterName
		o.SentinelPasswordFile = cfg.Redis.SentinelPasswordFile
	}
	return o
}

// sameAs reports whether c serves the cluster section cfg.
func (c *cluster) sameAs(cfg *config.Cluster) bool {
	if c == nil || cfg == nil {
		return c == nil && cfg == nil
	}
	return reflect.DeepEqual(&c.cfg, cfg)
}

// store returns a new Store for the limiter named name (listener/route/kind),
// whose keys in Redis start with the cluster prefix and that name, so that
// every limiter of every node counts apart from the others and equal
// limiters of different nodes count together, and the collector of its
// Redis metrics labelled with labels. Its log lines name it name. Nil c
// means no store (a nil result).
func (c *cluster) store(name string, labels prometheus.Labels) (*clusterStore[string], error) {
	if c == nil {
		return nil, nil
	}
	return newStore(c, name, name, func(k string) string { return k }, labels, nil)
}

// connStore returns the Store for the accept-time connection caps of the
// listener lc, or nil when there is no cluster, its connection caps stay
// local, or it has no finite per-client cap to count (max_conns_per_client
// unlimited, no conn_overrides with a cap, no prefix_levels): such a
// listener makes no Redis call per connection and is not refused while
// Redis is away. Its acquire scripts carry prefetch's spares (see
// redisstore.Config.Prefetch; nil: none).
func (c *cluster) connStore(lc *config.Listener, prefetch func(key string) []redisstore.Prefetch) (*clusterStore[clientkey.Key], error) {
	if c == nil || c.cfg.LocalConnectionCaps || !hasConnCap(lc) {
		return nil, nil
	}
	return newStore(c, "conns/"+lc.Name, lc.Name+"/connections", clientkey.Key.String,
		prometheus.Labels{"listener": lc.Name, "route": "", "limit": "connections"}, prefetch)
}

// hasConnCap reports whether some client of lc can meet a finite per-client
// connection cap.
func hasConnCap(lc *config.Listener) bool {
	if lc.MaxConnsPerClient != config.Unlimited || len(lc.PrefixLevels) > 0 {
		return true
	}
	for _, o := range lc.ConnOverrides {
		if o.Max != config.Unlimited {
			return true
		}
	}
	return false
}

// A clusterStore is a limiter's Store with the collector of its Redis
// metrics (calls, errors, latency, fallbacks, breaker state).
type clusterStore[K comparable] struct {
	*redisstore.Store[K]
	metrics prometheus.Collector
}

func newStore[K comparable](c *cluster, name, logName string, keyString func(K) string, labels prometheus.Labels, prefetch func(string) []redisstore.Prefetch) (*clusterStore[K], error) {
	policy, err := redisstore.ParsePolicy(string(c.cfg.OnError))
	if err != nil {
		return nil, err
	}
	s, err := redisstore.New(redisstore.Config{
		Client:      c.client,
		Prefix:      c.cfg.Prefix + name + ":",
		Lease:       c.cfg.Lease,
		Timeout:     c.cfg.Timeout,
		OnError:     policy,
		NodeShare:   c.cfg.NodeShare,
		ReleaseHold: c.cfg.ReleaseHold,
		SpareShare:  max(c.cfg.SpareShare, 0), // -1: none
		Logger:      c.log,
		Name:        logName,
		Outages:     c.outages,
		Prefetch:    prefetch,
	}, keyString)
	if err != nil {
		return nil, fmt.Errorf("daemon: cluster store %s: %w", name, err)
	}
	return &clusterStore[K]{Store: s, metrics: redisprom.NewCollector(s, "", labels)}, nil
}

func (c *cluster) close() {
	if c != nil {
		_ = c.client.Close()
	}
}
