package rls

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/redistest"
	"github.com/seed-a07d1050/portcullis/limit/redisstore"
)

// tripCounter counts the round trips a go-redis client makes: one per
// command sent alone, one per pipeline.
type tripCounter struct{ single, pipelines atomic.Int64 }

func (c *tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.single.Add(1)
		return next(ctx, cmd)
	}
}
func (c *tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.pipelines.Add(1)
		return next(ctx, cmds)
	}
}

// redisNode is one RLS node counting in the Redis at addr.
func redisNode(t testing.TB, addr string, policy redisstore.Policy) (*RedisStore, *tripCounter) {
	t.Helper()
	client, err := redisstore.NewClient(redisstore.ClientOptions{Addrs: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	trips := &tripCounter{}
	client.AddHook(trips)
	rs, err := redisstore.NewRate(redisstore.RateConfig{Client: client, Prefix: "test:rls:", OnError: policy,
		Timeout: 200 * time.Millisecond, Logger: quiet}, func(k string) string { return k })
	if err != nil {
		t.Fatal(err)
	}
	st := NewRedisStore(rs)
	t.Cleanup(func() {
		_ = st.Close()
		_ = client.Close()
	})
	return st, trips
}

// Two nodes on one Redis hold one limit exactly: 300 requests spread over
// both, concurrently, and 100 per hour admits 100, whichever node asked.
func TestTwoNodesOneLimit(t *testing.T) {
	srv := redistest.Start(t)
	cfg := ruleFile(t, 100, "hour")
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for node := range 2 {
		st, _ := redisNode(t, srv.Addr(), redisstore.Open)
		h := start(t, cfg, st, ServerOptions{})
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 50 {
					if h.ask(t, "d", 0, desc("k", "shared")).OverallCode == ok {
						admitted.Add(1)
					}
				}
			}()
		}
		_ = node
	}
	wg.Wait()
	if got := admitted.Load(); got != 100 {
		t.Fatalf("two nodes admitted %d of 300, want exactly 100", got)
	}
}

// One request with three descriptors costs one round trip to Redis (a
// pipeline), and nothing else is sent while the answers are all OK.
func TestOneRoundTripPerRequest(t *testing.T) {
	srv := redistest.Start(t)
	st, trips := redisNode(t, srv.Addr(), redisstore.Open)
	h := start(t, examplesConfig(t), st, ServerOptions{})
	three := []*rlpb.RateLimitDescriptor{
		desc("remote_address", "198.51.100.1"), desc("user_id", "carol"), desc("plan", "gold"),
	}
	three[0] = desc("source_cluster", "proxy", "destination_cluster", "mock")
	h.ask(t, "edge_proxy", 0, three...) // loads the script
	single, pipes := trips.single.Load(), trips.pipelines.Load()
	const calls = 40
	for i := range calls {
		if r := h.ask(t, "edge_proxy", 0, three...); r.OverallCode != ok {
			t.Fatalf("call %d: %v", i, r)
		}
	}
	if got := trips.pipelines.Load() - pipes; got != calls {
		t.Errorf("%d pipelines for %d requests of 3 descriptors, want one each", got, calls)
	}
	if got := trips.single.Load() - single; got != 0 {
		t.Errorf("%d commands sent alone besides, want none", got)
	}
}

// Redis away: under on_error closed the service answers Unavailable, for
// Envoy's failure_mode_deny to decide; under open each node decides on
// its own share.
func TestRedisAway(t *testing.T) {
	srv := redistest.Start(t)
	closed, _ := redisNode(t, srv.Addr(), redisstore.Closed)
	open, _ := redisNode(t, srv.Addr(), redisstore.Open)
	cfg := ruleFile(t, 3, "hour")
	hc := start(t, cfg, closed, ServerOptions{})
	ho := start(t, cfg, open, ServerOptions{})
	srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := hc.client.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlpb.RateLimitDescriptor{desc("k", "v")}})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("closed, Redis away: %v, want Unavailable", err)
	}
	admitted := 0
	for range 5 {
		if ho.ask(t, "d", 0, desc("k", "v")).OverallCode == ok {
			admitted++
		}
	}
	if admitted != 3 {
		t.Fatalf("open, Redis away: %d of 5 admitted, want 3 (the node's whole share)", admitted)
	}
}

// The daemon's cluster block builds the store, as the daemon builds its
// rate stores: the prefix and the Redis come from it.
func TestNewClusterStore(t *testing.T) {
	srv := redistest.Start(t)
	st, col, closeClient, err := NewClusterStore(&config.Cluster{Redis: config.Redis{Addrs: []string{srv.Addr()}}, Prefix: "p:"}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer closeClient()
	defer st.Close()
	if col == nil {
		t.Fatal("no collector")
	}
	h := start(t, ruleFile(t, 1, "hour"), st, ServerOptions{})
	if h.ask(t, "d", 0, desc("k", "v")).OverallCode != ok || h.ask(t, "d", 0, desc("k", "v")).OverallCode != over {
		t.Fatal("1 per hour through the cluster store")
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}})
	defer c.Close()
	keys, err := c.Keys(context.Background(), "p:rls:*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys under p:rls: %v %v", keys, err)
	}
}
