package rls

import (
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/limit/redisstore"
	"github.com/seed-a07d1050/portcullis/limit/redisstore/redisprom"
)

// clusterKeyPrefix follows the cluster prefix in the name of every Redis
// key the service writes, beside the daemon's "rate:" keys.
const clusterKeyPrefix = "rls:"

// NewClusterStore connects to the Redis of cl (the daemon's cluster block,
// validated) as the daemon does for its rates, and returns the RedisStore
// counting there, with the collector of its Redis figures (the daemon's
// portcullis_redisstore_* metrics, labelled limit="rls"). Every node with
// the same Redis and prefix counts the same keys. The caller closes the
// store, then the client (the second result's Close).
func NewClusterStore(cl *config.Cluster, log *slog.Logger) (*RedisStore, prometheus.Collector, func() error, error) {
	eff := config.EffectiveCluster(cl)
	tlsConf, err := eff.Redis.TLS.ClientConfig()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("rls: cluster: %w", err)
	}
	client, err := redisstore.NewClient(redisstore.ClientOptions{
		Addrs:        eff.Redis.Addrs,
		Username:     eff.Redis.Username,
		PasswordFile: eff.Redis.PasswordFile,
		DB:           eff.Redis.DB,
		TLS:          tlsConf,
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("rls: cluster: %w", err)
	}
	policy, err := redisstore.ParsePolicy(string(eff.OnError))
	if err != nil {
		_ = client.Close()
		return nil, nil, nil, fmt.Errorf("rls: cluster: %w", err)
	}
	rs, err := redisstore.NewRate(redisstore.RateConfig{
		Client:        client,
		Prefix:        eff.Prefix + clusterKeyPrefix,
		Timeout:       eff.Timeout,
		OnError:       policy,
		NodeShare:     eff.NodeShare,
		FlushInterval: eff.FlushInterval,
		Logger:        log,
		Name:          "rls",
		Outages:       redisstore.NewOutageLog(log),
	}, func(k string) string { return k })
	if err != nil {
		_ = client.Close()
		return nil, nil, nil, fmt.Errorf("rls: cluster store: %w", err)
	}
	st := NewRedisStore(rs)
	col := redisprom.NewCollector(rateStats{st}, "", prometheus.Labels{"listener": "rls", "route": "", "limit": "rls"})
	return st, col, client.Close, nil
}

// rateStats shows a RateStore's figures as a concurrency Store's, as the
// daemon's rate collector does.
type rateStats struct{ s *RedisStore }

func (r rateStats) Stats() redisstore.Stats {
	st := r.s.Stats()
	return redisstore.Stats{
		Acquire: st.Reserve, Sync: st.Flush, Latency: st.Latency,
		Fallbacks: st.Fallbacks, FallbackRefusals: st.FallbackRefusals, Unavailable: st.Unavailable,
		Cached: st.Cached, Breaker: st.Breaker, BreakerOpens: st.BreakerOpens, Keys: st.Keys,
	}
}
