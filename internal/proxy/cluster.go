package proxy

import (
	"fmt"
	"log/slog"
	"reflect"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/limit/redisstore"
	"github.com/seed-a07d1050/portcullis/limit/redisstore/redisprom"
)

// cluster shares the route and client limits of every node that uses the
// same Redis and prefix. The accept-time connection caps always count on
// the node alone: a refusal at accept must not wait for Redis.
type cluster struct {
	cfg    config.Cluster // effective
	client redis.UniversalClient
	log    *slog.Logger
}

// newCluster connects to the Redis of cfg (nil: no cluster, nil result).
func newCluster(cfg *config.Cluster, log *slog.Logger) (*cluster, error) {
	if cfg == nil {
		return nil, nil
	}
	tlsConf, err := cfg.Redis.TLS.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("proxy: cluster: %w", err)
	}
	client, err := redisstore.NewClient(redisstore.ClientOptions{
		Addrs:        cfg.Redis.Addrs,
		Username:     cfg.Redis.Username,
		PasswordFile: cfg.Redis.PasswordFile,
		DB:           cfg.Redis.DB,
		TLS:          tlsConf,
	})
	if err != nil {
		return nil, fmt.Errorf("proxy: cluster: %w", err)
	}
	return &cluster{cfg: *cfg, client: client, log: log}, nil
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
// Redis metrics labelled with labels. Nil c means no store (a nil result).
func (c *cluster) store(name string, labels prometheus.Labels) (*clusterStore[string], error) {
	if c == nil {
		return nil, nil
	}
	return newStore(c, name, func(k string) string { return k }, labels)
}

// connStore returns the Store for the accept-time connection caps of the
// listener named name, or nil when there is no cluster or its connection
// caps stay local.
func (c *cluster) connStore(name string) (*clusterStore[clientkey.Key], error) {
	if c == nil || c.cfg.LocalConnectionCaps {
		return nil, nil
	}
	return newStore(c, "conns/"+name, clientkey.Key.String, prometheus.Labels{"listener": name, "route": "", "limit": "connections"})
}

// A clusterStore is a limiter's Store with the collector of its Redis
// metrics (calls, errors, latency, fallbacks, breaker state).
type clusterStore[K comparable] struct {
	*redisstore.Store[K]
	metrics prometheus.Collector
}

func newStore[K comparable](c *cluster, name string, keyString func(K) string, labels prometheus.Labels) (*clusterStore[K], error) {
	policy, err := redisstore.ParsePolicy(string(c.cfg.OnError))
	if err != nil {
		return nil, err
	}
	s, err := redisstore.New(redisstore.Config{
		Client:    c.client,
		Prefix:    c.cfg.Prefix + name + ":",
		Lease:     c.cfg.Lease,
		Timeout:   c.cfg.Timeout,
		OnError:   policy,
		NodeShare: c.cfg.NodeShare,
		Logger:    c.log,
	}, keyString)
	if err != nil {
		return nil, fmt.Errorf("proxy: cluster store %s: %w", name, err)
	}
	return &clusterStore[K]{Store: s, metrics: redisprom.NewCollector(s, "", labels)}, nil
}

func (c *cluster) close() {
	if c != nil {
		_ = c.client.Close()
	}
}
