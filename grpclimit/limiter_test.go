package grpclimit_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/grpclimit"
	"github.com/seed-a07d1050/portcullis/limit"
)

// modes are the two ways to install a Limiter: with its tap handle, and
// with its interceptors alone.
var modes = []struct {
	name string
	opts func(l *grpclimit.Limiter) []grpc.ServerOption
	tap  bool
}{
	{"tap+interceptors", func(l *grpclimit.Limiter) []grpc.ServerOption { return grpclimit.ServerOptions(l) }, true},
	{"interceptors", func(l *grpclimit.Limiter) []grpc.ServerOption {
		return []grpc.ServerOption{
			grpc.ChainUnaryInterceptor(l.UnaryServerInterceptor()),
			grpc.ChainStreamInterceptor(l.StreamServerInterceptor()),
		}
	}, false},
}

// Many concurrent calls on one HTTP/2 connection: the limit counts calls
// (streams), not connections, and the calls over it never reach the
// handler.
func TestManyStreamsOnOneConnection(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			svc := newService()
			l := newLimiter(t, grpclimit.Config{Policy: grpclimit.Policy{Permits: 3}})
			accepted := &countingListener{}
			addr := serve(t, svc, accepted.listen(t), m.opts(l)...)
			cc := dialFrom(t, "127.0.0.2", addr)
			ctx := callCtx(t)

			var calls []<-chan error
			for range 3 {
				calls = append(calls, startUnary(ctx, cc, ""))
			}
			waitFor(t, "3 handlers running", func() bool { return svc.running.Load() == 3 })
			for range 20 {
				var trailer metadata.MD
				err := result(t, startUnary(ctx, cc, "", grpc.Trailer(&trailer)))
				wantCode(t, err, codes.ResourceExhausted)
				if d := retryDelay(err); d != time.Second {
					t.Fatalf("RetryInfo delay %v, want 1s", d)
				}
				// The tap handle can send only a status; the interceptor
				// adds grpc-go's retry pushback.
				push := trailer.Get(grpclimit.PushbackTrailer)
				if m.tap && len(push) != 0 || !m.tap && (len(push) != 1 || push[0] != "1000") {
					t.Fatalf("%s trailer %q", grpclimit.PushbackTrailer, push)
				}
			}
			if n := svc.entered.Load(); n != 3 {
				t.Fatalf("the handler was entered %d times, want 3: refused calls reached it", n)
			}
			// Another client is served meanwhile.
			other := dialFrom(t, "127.0.0.3", addr)
			otherCall := startUnary(ctx, other, "")
			waitFor(t, "the other client's call running", func() bool { return svc.running.Load() == 4 })

			tot := l.Totals()
			if tot.InUse != 4 || tot.Refused != 20 || tot.Keys != 2 {
				t.Fatalf("totals %+v, want 4 in use, 20 refused, 2 keys", tot)
			}
			if top := l.Snapshot(1).Keys[0]; top.Key != "127.0.0.2" || top.InUse != 3 || top.Refused != 20 {
				t.Fatalf("busiest key %+v, want 127.0.0.2 with 3 in use and 20 refused", top)
			}
			svc.open()
			for _, c := range append(calls, otherCall) {
				if err := result(t, c); err != nil {
					t.Fatalf("admitted call: %v", err)
				}
			}
			if n := accepted.n.Load(); n != 2 {
				t.Fatalf("%d connections accepted, want 2 (one per client)", n)
			}
			waitIdle(t, l)
		})
	}
}

// Every way a call can end gives its permit back: the handler returns,
// fails, panics; the client cancels, its deadline passes, it disconnects;
// a stream ends from either side; an unknown method; a refusal by a later
// Limiter.
func TestPermitsComeBack(t *testing.T) {
	queues := []struct {
		name string
		cfg  grpclimit.Config
	}{
		{"no queue", grpclimit.Config{Policy: grpclimit.Policy{Permits: 2}}},
		{"queue", grpclimit.Config{Policy: grpclimit.Policy{Permits: 2, QueueSize: 2}}},
	}
	for _, q := range queues {
		for _, m := range modes {
			t.Run(q.name+"/"+m.name, func(t *testing.T) {
				l := newLimiter(t, q.cfg)
				svc := newService()
				recoverPanic := grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
					defer func() {
						if r := recover(); r != nil {
							err = status.Errorf(codes.Internal, "panic: %v", r)
						}
					}()
					return h(ctx, req)
				})
				addr := serve(t, svc, nil, append([]grpc.ServerOption{recoverPanic}, m.opts(l)...)...)
				cc := dialFrom(t, "127.0.0.2", addr)
				client := testpb.NewTestServiceClient(cc)

				t.Run("cancel", func(t *testing.T) {
					ctx, cancel := context.WithCancel(callCtx(t))
					done := startUnary(ctx, cc, "")
					waitFor(t, "the call running", func() bool { return inUse(l) == 1 && svc.running.Load() == 1 })
					cancel()
					wantCode(t, result(t, done), codes.Canceled)
					waitIdle(t, l)
				})
				t.Run("deadline", func(t *testing.T) {
					ctx, cancel := context.WithTimeout(callCtx(t), 100*time.Millisecond)
					defer cancel()
					wantCode(t, result(t, startUnary(ctx, cc, "")), codes.DeadlineExceeded)
					waitIdle(t, l)
				})
				t.Run("panic", func(t *testing.T) {
					wantCode(t, result(t, startUnary(callCtx(t), cc, "panic")), codes.Internal)
					waitIdle(t, l)
				})
				t.Run("unknown method", func(t *testing.T) {
					err := cc.Invoke(callCtx(t), "/grpc.testing.TestService/NoSuchMethod", &testpb.Empty{}, &testpb.Empty{})
					wantCode(t, err, codes.Unimplemented)
					waitIdle(t, l)
				})
				t.Run("stream closed by client", func(t *testing.T) {
					stream, err := client.FullDuplexCall(callCtx(t))
					if err != nil {
						t.Fatal(err)
					}
					waitFor(t, "the stream running", func() bool { return inUse(l) == 1 && svc.running.Load() == 1 })
					if err := stream.CloseSend(); err != nil {
						t.Fatal(err)
					}
					if _, err := stream.Recv(); err == nil {
						t.Fatal("stream sent a message")
					}
					waitIdle(t, l)
				})
				t.Run("stream cancelled", func(t *testing.T) {
					ctx, cancel := context.WithCancel(callCtx(t))
					stream, err := client.FullDuplexCall(ctx)
					if err != nil {
						t.Fatal(err)
					}
					waitFor(t, "the stream running", func() bool { return inUse(l) == 1 })
					cancel()
					_, err = stream.Recv()
					wantCode(t, err, codes.Canceled)
					waitIdle(t, l)
				})
				t.Run("waiter leaves", func(t *testing.T) {
					ctx, cancel := context.WithCancel(callCtx(t))
					defer cancel()
					a, b := startUnary(ctx, cc, ""), startUnary(ctx, cc, "")
					waitFor(t, "two calls running", func() bool { return inUse(l) == 2 })
					c := startUnary(ctx, cc, "")
					if q.cfg.QueueSize > 0 {
						waitFor(t, "a waiter", func() bool { return l.Totals().Waiting == 1 })
					}
					cancel()
					for _, d := range []<-chan error{a, b, c} {
						if code := status.Code(result(t, d)); code != codes.Canceled && code != codes.ResourceExhausted {
							t.Fatalf("call ended with %v", code)
						}
					}
					waitIdle(t, l)
				})
				t.Run("client disconnects", func(t *testing.T) {
					gone := dialFrom(t, "127.0.0.3", addr)
					a := startUnary(callCtx(t), gone, "")
					stream, err := testpb.NewTestServiceClient(gone).FullDuplexCall(callCtx(t))
					if err != nil {
						t.Fatal(err)
					}
					waitFor(t, "a call and a stream running", func() bool { return inUse(l) == 2 && svc.running.Load() == 2 })
					gone.Close()
					wantCode(t, result(t, a), codes.Canceled)
					if _, err := stream.Recv(); err == nil {
						t.Fatal("stream outlived its connection")
					}
					waitFor(t, "the handlers to return", func() bool { return svc.running.Load() == 0 })
					waitIdle(t, l)
				})
				t.Run("handler returns", func(t *testing.T) {
					a, b := startUnary(callCtx(t), cc, ""), startUnary(callCtx(t), cc, "")
					waitFor(t, "two calls running", func() bool { return inUse(l) == 2 })
					svc.open()
					for _, d := range []<-chan error{a, b} {
						if err := result(t, d); err != nil {
							t.Fatal(err)
						}
					}
					waitIdle(t, l)
				})
			})
		}
	}
}

// With a queue, calls over the limit wait in FIFO order; the tap handle
// refuses a stream once the key's calls and queue are all taken, before
// its handler or the interceptor runs; a waiter gives up at the queue
// timeout.
func TestQueue(t *testing.T) {
	l := newLimiter(t, grpclimit.Config{Policy: grpclimit.Policy{Permits: 1, QueueSize: 2, QueueTimeout: 5 * time.Second}})
	svc := newService()
	addr := serve(t, svc, nil, grpclimit.ServerOptions(l)...)
	cc := dialFrom(t, "127.0.0.2", addr)
	ctx := callCtx(t)

	running := startUnary(ctx, cc, "")
	waitFor(t, "one call running", func() bool { return svc.running.Load() == 1 })
	w1 := startUnary(ctx, cc, "")
	waitFor(t, "one waiter", func() bool { return l.Totals().Waiting == 1 })
	w2 := startUnary(ctx, cc, "")
	waitFor(t, "two waiters", func() bool { return l.Totals().Waiting == 2 })

	var trailer metadata.MD
	err := result(t, startUnary(ctx, cc, "", grpc.Trailer(&trailer)))
	wantCode(t, err, codes.ResourceExhausted)
	if !strings.Contains(status.Convert(err).Message(), "queue full") {
		t.Fatalf("refusal %q does not say the queue is full", status.Convert(err).Message())
	}
	if len(trailer.Get(grpclimit.PushbackTrailer)) != 0 {
		t.Fatal("a tap refusal carries a trailer: it was refused past the tap handle")
	}
	if got := l.Totals().QueueFull; got != 1 {
		t.Fatalf("QueueFull = %d, want 1", got)
	}
	if n := svc.entered.Load(); n != 1 {
		t.Fatalf("handler entered %d times, want 1", n)
	}
	svc.open()
	for _, d := range []<-chan error{running, w1, w2} {
		if err := result(t, d); err != nil {
			t.Fatal(err)
		}
	}
	waitIdle(t, l)
}

func TestQueueTimeout(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			l := newLimiter(t, grpclimit.Config{Policy: grpclimit.Policy{Permits: 1, QueueSize: 1, QueueTimeout: 50 * time.Millisecond}})
			svc := newService()
			addr := serve(t, svc, nil, m.opts(l)...)
			cc := dialFrom(t, "127.0.0.2", addr)
			running := startUnary(callCtx(t), cc, "")
			waitFor(t, "one call running", func() bool { return inUse(l) == 1 })
			var trailer metadata.MD
			err := result(t, startUnary(callCtx(t), cc, "", grpc.Trailer(&trailer)))
			wantCode(t, err, codes.ResourceExhausted)
			if got := trailer.Get(grpclimit.PushbackTrailer); len(got) != 1 || got[0] != "1000" {
				t.Fatalf("pushback trailer %q, want 1000", got)
			}
			if tot := l.Totals(); tot.QueueTimeouts != 1 {
				t.Fatalf("totals %+v, want one queue timeout", tot)
			}
			svc.open()
			if err := result(t, running); err != nil {
				t.Fatal(err)
			}
			waitIdle(t, l)
		})
	}
}

func TestShadow(t *testing.T) {
	var mu sync.Mutex
	var rejected []error
	l := newLimiter(t, grpclimit.Config{Policy: grpclimit.Policy{
		Permits: 1,
		Shadow:  true,
	}, OnReject: func(_ context.Context, method, key string, err error) {
		mu.Lock()
		defer mu.Unlock()
		if method != methodUnary || key != "127.0.0.2" {
			err = errors.New("wrong method or key: " + method + " " + key)
		}
		rejected = append(rejected, err)
	}})
	svc := newService()
	addr := serve(t, svc, nil, grpclimit.ServerOptions(l)...)
	cc := dialFrom(t, "127.0.0.2", addr)
	var calls []<-chan error
	for range 3 {
		calls = append(calls, startUnary(callCtx(t), cc, ""))
	}
	waitFor(t, "3 calls running", func() bool { return svc.running.Load() == 3 })
	if tot := l.Totals(); tot.ShadowRefused != 2 || tot.Refused != 0 || tot.InUse != 3 {
		t.Fatalf("totals %+v, want 2 shadow-refused, none refused, 3 in use", tot)
	}
	svc.open()
	for _, c := range calls {
		if err := result(t, c); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(rejected) != 2 || !errors.Is(rejected[0], grpclimit.ErrShadowRefused) || !errors.Is(rejected[1], grpclimit.ErrShadowRefused) {
		t.Fatalf("OnReject got %v, want ErrShadowRefused twice", rejected)
	}
	waitIdle(t, l)
}

// Keys from metadata count each API key apart; a call without one is not
// limited.
func TestByMetadata(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			l := newLimiter(t, grpclimit.Config{Policy: grpclimit.Policy{Permits: 1}, Key: mustKey(grpclimit.ByMetadata("X-Api-Key"))})
			svc := newService()
			addr := serve(t, svc, nil, m.opts(l)...)
			cc := dialFrom(t, "127.0.0.2", addr)
			withKey := func(k string) context.Context {
				return metadata.AppendToOutgoingContext(callCtx(t), "x-api-key", k)
			}
			a := startUnary(withKey("alpha"), cc, "")
			b := startUnary(withKey("beta"), cc, "")
			free1, free2 := startUnary(callCtx(t), cc, ""), startUnary(callCtx(t), cc, "")
			waitFor(t, "4 calls running", func() bool { return svc.running.Load() == 4 })
			wantCode(t, result(t, startUnary(withKey("alpha"), cc, "")), codes.ResourceExhausted)
			if tot := l.Totals(); tot.InUse != 2 || tot.Keys != 2 {
				t.Fatalf("totals %+v, want 2 keys with one call each", tot)
			}
			svc.open()
			for _, c := range []<-chan error{a, b, free1, free2} {
				if err := result(t, c); err != nil {
					t.Fatal(err)
				}
			}
			waitIdle(t, l)
		})
	}
}

// Config.Methods scopes a Limiter to some methods, and ByMethod with
// Overrides gives methods their own limits; several Limiters guard one
// server, and a refusal by one gives back what the others took.
func TestPerMethodLimits(t *testing.T) {
	perClient := newLimiter(t, grpclimit.Config{Policy: grpclimit.Policy{Permits: 10, QueueSize: 4}, Methods: []string{"/grpc.testing.TestService/"}})
	unaryOnly := newLimiter(t, grpclimit.Config{Policy: grpclimit.Policy{Permits: 1}, Methods: []string{methodUnary}})
	byMethod := newLimiter(t, grpclimit.Config{Key: grpclimit.ByMethod(), Policy: grpclimit.Policy{Permits: -1, Overrides: map[string]int{methodDuplex: 1}}})
	svc := newService()
	addr := serve(t, svc, nil, grpclimit.ServerOptions(perClient, unaryOnly, byMethod)...)
	cc := dialFrom(t, "127.0.0.2", addr)
	client := testpb.NewTestServiceClient(cc)

	running := startUnary(callCtx(t), cc, "")
	waitFor(t, "one unary call running", func() bool { return svc.running.Load() == 1 })
	wantCode(t, result(t, startUnary(callCtx(t), cc, "")), codes.ResourceExhausted)
	// EmptyCall is not in unaryOnly's scope.
	if _, err := client.EmptyCall(callCtx(t), &testpb.Empty{}); err != nil {
		t.Fatalf("EmptyCall: %v", err)
	}
	stream, err := client.FullDuplexCall(callCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the stream running", func() bool { return svc.running.Load() == 2 })
	// A second stream is over its method's limit, from any client.
	other := dialFrom(t, "127.0.0.3", addr)
	s2, err := testpb.NewTestServiceClient(other).FullDuplexCall(callCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	_, err = s2.Recv()
	wantCode(t, err, codes.ResourceExhausted)
	// perClient's stream permit for the refused stream came back at once.
	waitFor(t, "perClient back to two calls", func() bool { return inUse(perClient) == 2 })
	if got := unaryOnly.Snapshot(0); got.Totals.InUse != 1 || got.Keys[0].Key != "127.0.0.2" {
		t.Fatalf("unaryOnly snapshot %+v", got)
	}
	if got := byMethod.Snapshot(0); got.Totals.InUse != 2 || got.Totals.Refused != 1 {
		t.Fatalf("byMethod snapshot %+v, want 2 in use (one per method), 1 refused", got)
	}
	svc.open()
	if err := result(t, running); err != nil {
		t.Fatal(err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	for _, l := range []*grpclimit.Limiter{perClient, unaryOnly, byMethod} {
		waitIdle(t, l)
	}
}

// Behind a trusted proxy the client is read from x-forwarded-for; from
// any other peer that metadata is ignored.
func TestByPeerTrustedProxy(t *testing.T) {
	res := &clientkey.Resolver{Trusted: clientkey.MustParseProxySet("127.0.0.2"), Header: clientkey.HeaderXForwardedFor}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			l := newLimiter(t, grpclimit.Config{Policy: grpclimit.Policy{Permits: 1}, Key: grpclimit.ByPeer(res)})
			svc := newService()
			addr := serve(t, svc, nil, m.opts(l)...)
			proxy, direct := dialFrom(t, "127.0.0.2", addr), dialFrom(t, "127.0.0.3", addr)
			xff := func(v string) context.Context {
				return metadata.AppendToOutgoingContext(callCtx(t), "x-forwarded-for", v)
			}
			a := startUnary(xff("198.51.100.7, 127.0.0.2"), proxy, "")
			b := startUnary(xff("198.51.100.8"), proxy, "")
			c := startUnary(xff("198.51.100.7"), direct, "")
			waitFor(t, "3 calls running", func() bool { return svc.running.Load() == 3 })
			wantCode(t, result(t, startUnary(xff("198.51.100.7"), proxy, "")), codes.ResourceExhausted)
			wantCode(t, result(t, startUnary(xff("198.51.100.9"), direct, "")), codes.ResourceExhausted)
			keys := map[string]int{}
			for _, k := range l.Snapshot(0).Keys {
				keys[k.Key] = k.InUse
			}
			want := map[string]int{"198.51.100.7": 1, "198.51.100.8": 1, "127.0.0.3": 1}
			if len(keys) != len(want) || keys["198.51.100.7"] != 1 || keys["198.51.100.8"] != 1 || keys["127.0.0.3"] != 1 {
				t.Fatalf("keys %v, want %v", keys, want)
			}
			svc.open()
			for _, d := range []<-chan error{a, b, c} {
				if err := result(t, d); err != nil {
					t.Fatal(err)
				}
			}
			waitIdle(t, l)
		})
	}
}

// A closed Limiter answers UNAVAILABLE with the retry hint; calls already
// running finish and give their permits back.
func TestClosed(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			l := newLimiter(t, grpclimit.Config{Policy: grpclimit.Policy{Permits: 4}, RetryAfter: 2500 * time.Millisecond})
			svc := newService()
			addr := serve(t, svc, nil, m.opts(l)...)
			cc := dialFrom(t, "127.0.0.2", addr)
			running := startUnary(callCtx(t), cc, "")
			waitFor(t, "one call running", func() bool { return inUse(l) == 1 })
			l.Close()
			var trailer metadata.MD
			err := result(t, startUnary(callCtx(t), cc, "", grpc.Trailer(&trailer)))
			wantCode(t, err, codes.Unavailable)
			if d := retryDelay(err); d != 2500*time.Millisecond {
				t.Fatalf("RetryInfo delay %v, want 2.5s", d)
			}
			if got := trailer.Get(grpclimit.PushbackTrailer); !m.tap && (len(got) != 1 || got[0] != "2500") {
				t.Fatalf("pushback %q, want 2500", got)
			}
			svc.open()
			if err := result(t, running); err != nil {
				t.Fatal(err)
			}
			waitIdle(t, l)
		})
	}
}

// A negative RetryAfter sends no hint at all.
func TestNoRetryHint(t *testing.T) {
	l := newLimiter(t, grpclimit.Config{Policy: grpclimit.Policy{Permits: 1}, RetryAfter: -1})
	svc := newService()
	addr := serve(t, svc, nil,
		grpc.ChainUnaryInterceptor(l.UnaryServerInterceptor()))
	cc := dialFrom(t, "127.0.0.2", addr)
	running := startUnary(callCtx(t), cc, "")
	waitFor(t, "one call running", func() bool { return inUse(l) == 1 })
	var trailer metadata.MD
	err := result(t, startUnary(callCtx(t), cc, "", grpc.Trailer(&trailer)))
	wantCode(t, err, codes.ResourceExhausted)
	if d := retryDelay(err); d != -1 || len(trailer.Get(grpclimit.PushbackTrailer)) != 0 {
		t.Fatalf("hint sent: RetryInfo %v, trailer %v", d, trailer)
	}
	svc.open()
	if err := result(t, running); err != nil {
		t.Fatal(err)
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  grpclimit.Config
		want string
	}{
		{"permits", grpclimit.Config{Policy: grpclimit.Policy{Permits: -2}}, "Permits"},
		{"queue size", grpclimit.Config{Policy: grpclimit.Policy{QueueSize: -1}}, "QueueSize"},
		{"queue timeout", grpclimit.Config{Policy: grpclimit.Policy{QueueTimeout: -time.Second}}, "QueueTimeout"},
		{"override", grpclimit.Config{Policy: grpclimit.Policy{Overrides: map[string]int{"k": -3}}}, "Overrides"},
		{"empty override key", grpclimit.Config{Policy: grpclimit.Policy{Overrides: map[string]int{"": 3}}}, "empty key"},
		{"method without slash", grpclimit.Config{Methods: []string{"pkg.Svc/M"}}, "Methods[0]"},
		{"method without service", grpclimit.Config{Methods: []string{"//M"}}, "Methods[0]"},
		{"method with three slashes", grpclimit.Config{Methods: []string{"/a/b/c"}}, "Methods[0]"},
		{"method with space", grpclimit.Config{Methods: []string{"/a.B/c d"}}, "Methods[0]"},
		{"service only, no trailing slash", grpclimit.Config{Methods: []string{"/a.B"}}, "Methods[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := grpclimit.New(tt.cfg)
			if err == nil {
				l.Close()
				t.Fatal("New accepted the config")
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "grpclimit: ") {
				t.Fatalf("error %q does not name %s", err, tt.want)
			}
		})
	}
	for _, ok := range [][]string{{"/a.B/"}, {"/a.B/C", "/x/"}} {
		l, err := grpclimit.New(grpclimit.Config{Methods: ok})
		if err != nil {
			t.Fatalf("Methods %q: %v", ok, err)
		}
		l.Close()
	}
}

// ByMetadata given a name that is not a metadata key returns an error
// naming it and no function.
func TestByMetadataRejectsBadName(t *testing.T) {
	for _, name := range []string{"x api key", ""} {
		k, err := grpclimit.ByMetadata(name)
		if err == nil || k != nil {
			t.Fatalf("ByMetadata(%q) = (%v, %v), want only an error", name, k != nil, err)
		}
		if !strings.HasPrefix(err.Error(), "grpclimit: ") || !strings.Contains(err.Error(), "ByMetadata") {
			t.Errorf("error %q does not name ByMetadata", err)
		}
	}
}

// New copies the Config: changing the caller's map and slice afterwards
// changes nothing.
func TestConfigCopied(t *testing.T) {
	cfg := grpclimit.Config{Key: grpclimit.ByMethod(), Policy: grpclimit.Policy{Permits: 5, Overrides: map[string]int{methodUnary: 1}}, Methods: []string{methodUnary}}
	l := newLimiter(t, cfg)
	cfg.Overrides[methodUnary] = 10
	cfg.Methods[0] = methodEmpty
	svc := newService()
	addr := serve(t, svc, nil, grpclimit.ServerOptions(l)...)
	cc := dialFrom(t, "127.0.0.2", addr)
	running := startUnary(callCtx(t), cc, "")
	waitFor(t, "one call running", func() bool { return inUse(l) == 1 })
	wantCode(t, result(t, startUnary(callCtx(t), cc, "")), codes.ResourceExhausted)
	svc.open()
	if err := result(t, running); err != nil {
		t.Fatal(err)
	}
}

var _ = limit.ErrLimited
