package grpclimit_test

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/peer"

	"github.com/seed-a07d1050/portcullis/grpclimit"
)

// benchSetups are the servers compared: no limiter, the interceptors
// alone, the tap handle with the interceptors. Run them in one command
// (-count 6, benchstat) and compare each to "none".
var benchSetups = []struct {
	name string
	opts func(l *grpclimit.Limiter) []grpc.ServerOption
}{
	{"none", func(*grpclimit.Limiter) []grpc.ServerOption { return nil }},
	{"interceptors", func(l *grpclimit.Limiter) []grpc.ServerOption {
		return []grpc.ServerOption{grpc.ChainUnaryInterceptor(l.UnaryServerInterceptor())}
	}},
	{"tap+interceptors", func(l *grpclimit.Limiter) []grpc.ServerOption { return grpclimit.ServerOptions(l) }},
}

// BenchmarkUnaryCall measures a whole EmptyCall over loopback TCP, one
// client connection, with and without the Limiter.
func BenchmarkUnaryCall(b *testing.B) {
	for _, s := range benchSetups {
		b.Run(s.name, func(b *testing.B) {
			l := newLimiter(b, grpclimit.Config{Policy: grpclimit.Policy{Permits: 1 << 20}})
			cc := dialFrom(b, "127.0.0.2", serve(b, newService(), nil, s.opts(l)...))
			client := testpb.NewTestServiceClient(cc)
			ctx := context.Background()
			if _, err := client.EmptyCall(ctx, &testpb.Empty{}); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := client.EmptyCall(ctx, &testpb.Empty{}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkInterceptor measures the unary interceptor alone around a
// handler that does nothing, against calling the handler directly: the
// Limiter's own cost per call (key the peer, take and give back a permit).
func BenchmarkInterceptor(b *testing.B) {
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 4711}})
	info := &grpc.UnaryServerInfo{FullMethod: methodEmpty}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = handler(ctx, nil)
		}
	})
	b.Run("interceptor", func(b *testing.B) {
		l := newLimiter(b, grpclimit.Config{})
		intercept := l.UnaryServerInterceptor()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := intercept(ctx, nil, info, handler); err != nil {
				b.Fatal(err)
			}
		}
	})
}
