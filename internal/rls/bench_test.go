package rls

import (
	"context"
	"testing"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/seed-a07d1050/portcullis/internal/redistest"
	"github.com/seed-a07d1050/portcullis/limit/redisstore"
	"github.com/seed-a07d1050/portcullis/rate"
)

// benchRules are three rules a request of three descriptors matches,
// generous enough that every call is admitted.
func benchRules(b *testing.B) *Config {
	b.Helper()
	cfg, err := Parse(map[string][]byte{"b.yaml": []byte(`domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: path
    value: /api
    descriptors:
      - key: method
        rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: user_id
    rate_limit: {unit: minute, requests_per_unit: 1000000000}
`)})
	if err != nil {
		b.Fatal(err)
	}
	return cfg
}

func benchRequest() *pb.RateLimitRequest {
	return &pb.RateLimitRequest{Domain: "edge", Descriptors: []*rlpb.RateLimitDescriptor{
		desc("remote_address", "198.51.100.7"),
		desc("path", "/api", "method", "GET"),
		desc("user_id", "alice"),
	}}
}

// BenchmarkShouldRateLimit3 is the service's whole decision for a request
// of 3 descriptors on the local store, without the network: matching, the
// counter names, the store, the answer's messages, the metrics.
func BenchmarkShouldRateLimit3(b *testing.B) {
	svc := NewService(benchRules(b), nil, nil, quiet)
	req := benchRequest()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		r, err := svc.ShouldRateLimit(ctx, req)
		if err != nil || r.OverallCode != ok {
			b.Fatal(r, err)
		}
	}
}

// BenchmarkLocalStore3 is the store's path alone for the same request: the
// three GCRA decisions, all or nothing. It allocates nothing.
func BenchmarkLocalStore3(b *testing.B) {
	st := NewLocalStore()
	defer st.Close()
	cfg := benchRules(b)
	items := make([]Item, 3)
	for i, d := range benchRequest().Descriptors {
		r := cfg.match("edge", d.Entries)
		items[i] = Item{Key: string(appendKey(nil, r.ID, d.Entries)), Limit: r.Limit, N: 1}
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := st.Decide(ctx, items); err != nil || !items[0].Decision.Allowed() {
			b.Fatal(err)
		}
	}
}

// BenchmarkShouldRateLimit3GRPC is the same request over a loopback gRPC
// connection, as Envoy sends it.
func BenchmarkShouldRateLimit3GRPC(b *testing.B) {
	h := start(b, benchRules(b), NewLocalStore(), ServerOptions{})
	req := benchRequest()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		r, err := h.client.ShouldRateLimit(ctx, req)
		if err != nil || r.OverallCode != ok {
			b.Fatal(r, err)
		}
	}
}

// BenchmarkShouldRateLimit3Redis is the service's decision on Redis (on
// loopback): one pipeline per call, reported as round-trips/op.
func BenchmarkShouldRateLimit3Redis(b *testing.B) {
	srv := redistest.Start(b)
	st, trips := redisNode(b, srv.Addr(), redisstore.Open)
	svc := NewService(benchRules(b), st, nil, quiet)
	req := benchRequest()
	ctx := context.Background()
	if _, err := svc.ShouldRateLimit(ctx, req); err != nil { // loads the script
		b.Fatal(err)
	}
	before := trips.pipelines.Load() + trips.single.Load()
	b.ReportAllocs()
	for b.Loop() {
		r, err := svc.ShouldRateLimit(ctx, req)
		if err != nil || r.OverallCode != ok {
			b.Fatal(r, err)
		}
	}
	b.ReportMetric(float64(trips.pipelines.Load()+trips.single.Load()-before)/float64(b.N), "round-trips/op")
}

// BenchmarkShouldRateLimit3GRPCParallel is many calls in flight over one
// loopback connection, as a busy Envoy's filter sends them; client and
// server share the machine's cores.
func BenchmarkShouldRateLimit3GRPCParallel(b *testing.B) {
	h := start(b, benchRules(b), NewLocalStore(), ServerOptions{})
	req := benchRequest()
	b.ReportAllocs()
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			r, err := h.client.ShouldRateLimit(ctx, req)
			if err != nil || r.OverallCode != ok {
				b.Error(r, err)
				return
			}
		}
	})
}

// BenchmarkLocalStore3Baseline is the baseline of BenchmarkLocalStore3:
// three plain rate.Limiter.Allow calls on the same keys, the daemon's own
// rate path, without weights, per-call limits or all or nothing.
func BenchmarkLocalStore3Baseline(b *testing.B) {
	l, err := rate.New(rate.Config[string]{Rate: rate.PerSecond(1_000_000_000), Burst: 999_999_999, Delay: rate.NoDelay})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	cfg := benchRules(b)
	var keys []string
	for _, d := range benchRequest().Descriptors {
		keys = append(keys, string(appendKey(nil, cfg.match("edge", d.Entries).ID, d.Entries)))
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, k := range keys {
			if !l.Allow(k).Allowed() {
				b.Fatal("refused")
			}
		}
	}
}
