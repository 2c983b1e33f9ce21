package rls

import (
	"context"
	"crypto/tls"
	"log/slog"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/seed-a07d1050/portcullis/internal/testcert"
	"github.com/seed-a07d1050/portcullis/limit/limittest"
)

var quiet = slog.New(slog.DiscardHandler)

// harness is one service on a loopback gRPC port and a client of it, as
// Envoy's ratelimit filter is one.
type harness struct {
	svc    *Service
	client pb.RateLimitServiceClient
	health healthpb.HealthClient
	clock  *limittest.Clock
	srv    *grpc.Server
}

func examplesConfig(t testing.TB) *Config {
	t.Helper()
	cfg, err := LoadDir(examplesDir)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// start serves cfg from a local store on a fake clock (nothing refills
// unless the test advances it), or from st when given.
func start(t testing.TB, cfg *Config, st Store, o ServerOptions, dial ...grpc.DialOption) *harness {
	t.Helper()
	h := &harness{clock: limittest.NewClock()}
	if st == nil {
		ls := newLocalStore(h.clock)
		t.Cleanup(func() { _ = ls.Close() })
		st = ls
	}
	h.svc = NewService(cfg, st, NewMetrics(), quiet)
	h.svc.sleep = func(context.Context, time.Duration) error { return nil }
	srv, _ := NewGRPCServer(h.svc, o)
	h.srv = srv
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	if len(dial) == 0 {
		dial = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	conn, err := grpc.NewClient(ln.Addr().String(), dial...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	h.client = pb.NewRateLimitServiceClient(conn)
	h.health = healthpb.NewHealthClient(conn)
	return h
}

// desc builds a descriptor as Envoy's rate limit actions do: entries of
// key and value, in order.
func desc(kv ...string) *rlpb.RateLimitDescriptor {
	return &rlpb.RateLimitDescriptor{Entries: entries(kv...)}
}

func (h *harness) ask(t testing.TB, domain string, hits uint32, ds ...*rlpb.RateLimitDescriptor) *pb.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := h.client.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s): %v", domain, err)
	}
	if len(resp.GetStatuses()) != len(ds) {
		t.Fatalf("%d statuses for %d descriptors", len(resp.GetStatuses()), len(ds))
	}
	return resp
}

const (
	ok   = pb.RateLimitResponse_OK
	over = pb.RateLimitResponse_OVER_LIMIT
)

// Each shape of envoyproxy/ratelimit's README examples, asked as Envoy
// asks, answered as Envoy expects: the first N of a fresh key OK, the one
// after OVER_LIMIT with its limit, nothing remaining and a reset time.
func TestReferenceShapes(t *testing.T) {
	h := start(t, examplesConfig(t), nil, ServerOptions{})

	t.Run("one level, values counted apart", func(t *testing.T) {
		r := h.ask(t, "mongo_cps", 499, desc("database", "users"))
		if r.OverallCode != ok || r.Statuses[0].LimitRemaining != 1 {
			t.Fatalf("499 of 500: %v", r)
		}
		r = h.ask(t, "mongo_cps", 0, desc("database", "users"))
		st := r.Statuses[0]
		if r.OverallCode != ok || st.LimitRemaining != 0 || st.CurrentLimit.GetRequestsPerUnit() != 500 || st.CurrentLimit.GetUnit() != pb.RateLimitResponse_RateLimit_SECOND {
			t.Fatalf("the 500th: %v", r)
		}
		if d := st.DurationUntilReset.AsDuration(); d != time.Second {
			t.Errorf("the 500th: duration_until_reset %v, want 1s (the whole quota back after a second)", d)
		}
		r = h.ask(t, "mongo_cps", 0, desc("database", "users"))
		if r.OverallCode != over || r.Statuses[0].Code != over || r.Statuses[0].LimitRemaining != 0 {
			t.Fatalf("the 501st: %v", r)
		}
		if hv := r.ResponseHeadersToAdd; len(hv) != 1 || hv[0].Key != "retry-after" || hv[0].Value != "1" {
			t.Errorf("the 501st: headers %v, want retry-after: 1", hv)
		}
		if r := h.ask(t, "mongo_cps", 0, desc("database", "default")); r.OverallCode != ok {
			t.Fatalf("another value counts apart: %v", r)
		}
		h.clock.Advance(2 * time.Millisecond) // one interval at 500/s
		if r := h.ask(t, "mongo_cps", 0, desc("database", "users")); r.OverallCode != ok {
			t.Fatalf("after one interval, one more: %v", r)
		}
	})

	t.Run("nested, a key without value", func(t *testing.T) {
		marketing := desc("message_type", "marketing", "to_number", "2065551212")
		for i := range 4 {
			if r := h.ask(t, "messaging", 0, marketing); r.OverallCode != ok {
				t.Fatalf("marketing %d: %v", i, r)
			}
		}
		r := h.ask(t, "messaging", 0, marketing)
		if r.OverallCode != over || r.Statuses[0].CurrentLimit.GetUnit() != pb.RateLimitResponse_RateLimit_DAY {
			t.Fatalf("the fifth marketing message: %v", r)
		}
		if got := r.Statuses[0].DurationUntilReset.AsDuration(); got != 24*time.Hour {
			t.Errorf("reset %v, want 24h", got)
		}
		if r := h.ask(t, "messaging", 0, desc("message_type", "marketing", "to_number", "2065550000")); r.OverallCode != ok {
			t.Fatalf("another number: %v", r)
		}
		if r := h.ask(t, "messaging", 0, desc("to_number", "2065551212")); r.OverallCode != ok || r.Statuses[0].LimitRemaining != 99 {
			t.Fatalf("the top-level rule counts apart: %v", r)
		}
	})

	t.Run("per client, exempt value, wildcard", func(t *testing.T) {
		for i := range 10 {
			if r := h.ask(t, "edge_proxy", 0, desc("remote_address", "198.51.100.7")); r.OverallCode != ok {
				t.Fatalf("request %d: %v", i, r)
			}
		}
		if r := h.ask(t, "edge_proxy", 0, desc("remote_address", "198.51.100.7")); r.OverallCode != over {
			t.Fatalf("the 11th: %v", r)
		}
		r := h.ask(t, "edge_proxy", 1000, desc("remote_address", "10.0.0.1"))
		if r.OverallCode != ok || r.Statuses[0].LimitRemaining != math.MaxUint32 || r.Statuses[0].CurrentLimit != nil {
			t.Fatalf("unlimited: %v", r)
		}
		if r := h.ask(t, "edge_proxy", 2, desc("remote_address", "192.0.2.9")); r.OverallCode != ok {
			t.Fatalf("wildcard, 2 of 2: %v", r)
		}
		if r := h.ask(t, "edge_proxy", 0, desc("remote_address", "192.0.2.9")); r.OverallCode != over || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 2 {
			t.Fatalf("wildcard, the third: %v", r)
		}
		// As in the reference, a wildcard rule counts each value apart.
		if r := h.ask(t, "edge_proxy", 2, desc("remote_address", "192.0.2.10")); r.OverallCode != ok {
			t.Fatalf("wildcard, another value: %v", r)
		}
	})

	t.Run("shadow_mode", func(t *testing.T) {
		login := desc("remote_address", "203.0.113.5", "path", "/login")
		for i := range 8 {
			if r := h.ask(t, "edge_proxy", 0, login); r.OverallCode != ok || r.Statuses[0].Code != ok {
				t.Fatalf("shadow request %d: %v", i, r)
			}
		}
		rm := h.svc.Config().match("edge_proxy", login.Entries).metrics
		if got := testutil.ToFloat64(rm.descs[2]); got != 0 {
			t.Errorf("over_limit counted %v in shadow mode", got)
		}
		if got := testutil.ToFloat64(rm.descs[3]); got != 3 {
			t.Errorf("shadow_over_limit %v, want 3 (8 requests, 5 per minute)", got)
		}
	})

	t.Run("replaces", func(t *testing.T) {
		// per_user replaces per_client: the client's own counter is not
		// touched by requests that carry a user.
		client := desc("remote_address", "198.51.100.99")
		for range 20 {
			r := h.ask(t, "edge_proxy", 0, client, desc("user_id", "alice"))
			if r.OverallCode != ok || r.Statuses[0].CurrentLimit != nil {
				t.Fatalf("replaced rule answered: %v", r)
			}
		}
		if r := h.ask(t, "edge_proxy", 0, client); r.Statuses[0].LimitRemaining != 9 {
			t.Fatalf("the replaced rule counted: %v", r)
		}
	})

	t.Run("0 per unit refuses", func(t *testing.T) {
		if r := h.ask(t, "edge_proxy", 0, desc("blocked_tenant", "t1")); r.OverallCode != over {
			t.Fatalf("%v", r)
		}
	})

	t.Run("unknown descriptors and domains are OK, and counted", func(t *testing.T) {
		before := testutil.ToFloat64(h.svc.metrics.unknownVec.WithLabelValues("edge_proxy"))
		r := h.ask(t, "edge_proxy", 0, desc("no_such_key", "x"))
		if r.OverallCode != ok || r.Statuses[0].CurrentLimit != nil {
			t.Fatalf("%v", r)
		}
		if got := testutil.ToFloat64(h.svc.metrics.unknownVec.WithLabelValues("edge_proxy")); got != before+1 {
			t.Errorf("unknown descriptors %v, want %v", got, before+1)
		}
		if r := h.ask(t, "no_such_domain", 0, desc("remote_address", "1.2.3.4")); r.OverallCode != ok {
			t.Fatalf("unknown domain: %v", r)
		}
		if got := testutil.ToFloat64(h.svc.metrics.unknownVec.WithLabelValues("")); got != 1 {
			t.Errorf("unknown domain counted %v", got)
		}
	})
}

// A request is all or nothing: the descriptors it passes are not counted
// when another refuses it; hits_addend and a descriptor's own hits_addend
// weigh; negative hits give back.
func TestAllOrNothingAndHits(t *testing.T) {
	h := start(t, examplesConfig(t), nil, ServerOptions{})
	user := desc("user_id", "bob")
	if r := h.ask(t, "edge_proxy", 45, user); r.Statuses[0].LimitRemaining != 5 {
		t.Fatalf("hits_addend 45 of 50: %v", r)
	}
	heavy := desc("to_number", "1")
	heavy.HitsAddend = wrapperspb.UInt64(101)
	r := h.ask(t, "edge_proxy", 0, user, desc("blocked_tenant", "t"))
	if r.OverallCode != over || r.Statuses[0].Code != ok || r.Statuses[1].Code != over {
		t.Fatalf("%v", r)
	}
	if r := h.ask(t, "edge_proxy", 0, user); r.Statuses[0].LimitRemaining != 4 {
		t.Fatalf("the refused request counted against user_id: %v", r)
	}
	if r := h.ask(t, "messaging", 0, heavy); r.OverallCode != over {
		t.Fatalf("a descriptor's hits_addend 101 over 100: %v", r)
	}
	back := desc("user_id", "bob")
	back.HitsAddend = wrapperspb.UInt64(4)
	back.IsNegativeHits = true
	if r := h.ask(t, "edge_proxy", 0, back); r.OverallCode != ok {
		t.Fatalf("negative hits: %v", r)
	}
	if r := h.ask(t, "edge_proxy", 8, user); r.OverallCode != ok || r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("after 4 given back, 8 fit: %v", r)
	}
}

// Portcullis's words: a burst smaller than the rate, overrides per value,
// and nginx's delay, which holds the OK answer.
func TestAdditions(t *testing.T) {
	h := start(t, examplesConfig(t), nil, ServerOptions{})
	var slept []time.Duration
	h.svc.sleep = func(_ context.Context, d time.Duration) error { slept = append(slept, d); return nil }
	if r := h.ask(t, "api", 21, desc("api_key", "k1")); r.OverallCode != ok {
		t.Fatalf("burst 20: 21 at once: %v", r)
	}
	if r := h.ask(t, "api", 0, desc("api_key", "k1")); r.OverallCode != over {
		t.Fatalf("burst 20: the 22nd: %v", r)
	}
	if r := h.ask(t, "api", 201, desc("api_key", "batch-importer")); r.OverallCode != ok {
		t.Fatalf("override burst 200: %v", r)
	}
	for i := range 11 {
		if r := h.ask(t, "api", 0, desc("upload", "u")); r.OverallCode != ok {
			t.Fatalf("upload %d: %v", i, r)
		}
	}
	if r := h.ask(t, "api", 0, desc("upload", "u")); r.OverallCode != over {
		t.Fatalf("upload beyond the burst: %v", r)
	}
	// 2r/s burst=10 delay=4: requests 6..11 wait 0.5 s more each.
	want := []time.Duration{500 * time.Millisecond, time.Second, 1500 * time.Millisecond, 2 * time.Second, 2500 * time.Millisecond, 3 * time.Second}
	if len(slept) != len(want) {
		t.Fatalf("delays %v, want %v", slept, want)
	}
	for i := range want {
		if slept[i] != want[i] {
			t.Fatalf("delays %v, want %v", slept, want)
		}
	}
}

func TestInvalidRequests(t *testing.T) {
	h := start(t, examplesConfig(t), nil, ServerOptions{})
	ctx := context.Background()
	for _, req := range []*pb.RateLimitRequest{
		{Descriptors: []*rlpb.RateLimitDescriptor{desc("a", "b")}},
		{Domain: "edge_proxy"},
	} {
		_, err := h.client.ShouldRateLimit(ctx, req)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: %v, want InvalidArgument", req, err)
		}
	}
}

// Health checking answers SERVING for the server and the service;
// reflection is off unless asked for.
func TestHealthAndReflection(t *testing.T) {
	h := start(t, examplesConfig(t), nil, ServerOptions{})
	for _, name := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
		r, err := h.health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: name})
		if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q: %v %v", name, r, err)
		}
	}
	if _, on := h.srv.GetServiceInfo()["grpc.reflection.v1.ServerReflection"]; on {
		t.Error("reflection is on by default")
	}
	h2 := start(t, examplesConfig(t), nil, ServerOptions{Reflection: true})
	if _, on := h2.srv.GetServiceInfo()["grpc.reflection.v1.ServerReflection"]; !on {
		t.Error("reflection asked for, not registered")
	}
}

// With a client CA, a client without a certificate from it is refused at
// the handshake, and one with it is served.
func TestMutualTLS(t *testing.T) {
	server, err := testcert.New()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile, err := server.WriteFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	client, err := testcert.NewClient("envoy")
	if err != nil {
		t.Fatal(err)
	}
	clientCert, clientPool := client.TLS, client.Pool
	caFile := dir + "/clients.pem"
	writePEM(t, caFile, clientCert.Leaf.Raw)
	conf, err := ServerTLS(TLSFiles{CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile})
	if err != nil {
		t.Fatal(err)
	}
	_ = clientPool
	good := start(t, examplesConfig(t), nil, ServerOptions{TLS: conf},
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: server.Pool, Certificates: []tls.Certificate{clientCert}})))
	if r := good.ask(t, "mongo_cps", 0, desc("database", "users")); r.OverallCode != ok {
		t.Fatalf("%v", r)
	}
	bad := start(t, examplesConfig(t), nil, ServerOptions{TLS: conf},
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: server.Pool})))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = bad.client.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "mongo_cps", Descriptors: []*rlpb.RateLimitDescriptor{desc("database", "users")}})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("a client without a certificate: %v, want Unavailable (handshake refused)", err)
	}
	plain := start(t, examplesConfig(t), nil, ServerOptions{TLS: conf})
	_, err = plain.client.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "mongo_cps", Descriptors: []*rlpb.RateLimitDescriptor{desc("database", "users")}})
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "unavailable") {
		t.Fatalf("a plaintext client: %v", err)
	}
}

// A descriptor with Envoy's limit override is judged by it, counted apart.
func TestLimitOverride(t *testing.T) {
	h := start(t, examplesConfig(t), nil, ServerOptions{})
	d := desc("database", "users")
	d.Limit = &rlpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: 2} // MINUTE
	for i := range 2 {
		if r := h.ask(t, "mongo_cps", 0, d); r.OverallCode != ok || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 2 {
			t.Fatalf("override request %d: %v", i, r)
		}
	}
	r := h.ask(t, "mongo_cps", 0, d)
	if r.OverallCode != over || r.Statuses[0].CurrentLimit.GetUnit() != pb.RateLimitResponse_RateLimit_MINUTE {
		t.Fatalf("third under 2 per minute: %v", r)
	}
	if r := h.ask(t, "mongo_cps", 0, desc("database", "users")); r.Statuses[0].LimitRemaining != 499 {
		t.Fatalf("the configured rule counted the override's requests: %v", r)
	}
}

// A weight above a rule's whole burst is refused, with a bounded
// retry-after.
func TestWeightAboveBurst(t *testing.T) {
	h := start(t, examplesConfig(t), nil, ServerOptions{})
	r := h.ask(t, "mongo_cps", 501, desc("database", "users"))
	if r.OverallCode != over || len(r.ResponseHeadersToAdd) != 1 || r.ResponseHeadersToAdd[0].Value != "31536000" {
		t.Fatalf("%v", r)
	}
	if r := h.ask(t, "mongo_cps", 500, desc("database", "users")); r.OverallCode != ok {
		t.Fatalf("the refused weight counted: %v", r)
	}
}
