package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/seed-a07d1050/portcullis/grpclimit"
	"github.com/seed-a07d1050/portcullis/internal/waitfor"
	"github.com/seed-a07d1050/portcullis/limit"
)

// mustKey returns the KeyFunc of a constructor given input the test knows
// is valid; an error there is a bug in the test, so it panics.
func mustKey(k grpclimit.KeyFunc, err error) grpclimit.KeyFunc {
	if err != nil {
		panic(err)
	}
	return k
}

// waitTimeout bounds every wait in these tests.
const waitTimeout = 10 * time.Second

// Full method names of the test service.
const (
	methodUnary  = "/grpc.testing.TestService/UnaryCall"
	methodEmpty  = "/grpc.testing.TestService/EmptyCall"
	methodDuplex = "/grpc.testing.TestService/FullDuplexCall"
)

// waitFor polls cond until it holds, failing the test after waitTimeout.
// (internal/waitfor holds the loop; this package keeps the name while
// another branch edits its tests: issue 37 item 6.)
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	waitfor.Within(t, waitTimeout, what, cond)
}

// service is the test service. UnaryCall and FullDuplexCall count their
// entries and block until the gate opens or the call's context ends;
// UnaryCall with the payload "panic" panics instead. EmptyCall returns at
// once.
type service struct {
	testpb.UnimplementedTestServiceServer
	entered atomic.Int64
	running atomic.Int64
	gate    chan struct{}
	once    sync.Once
}

func newService() *service { return &service{gate: make(chan struct{})} }

// open lets every blocked and later call return.
func (s *service) open() { s.once.Do(func() { close(s.gate) }) }

func (s *service) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	return &testpb.Empty{}, nil
}

func (s *service) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	s.entered.Add(1)
	s.running.Add(1)
	defer s.running.Add(-1)
	if string(req.GetPayload().GetBody()) == "panic" {
		panic("handler panics")
	}
	select {
	case <-s.gate:
		return &testpb.SimpleResponse{}, nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

func (s *service) FullDuplexCall(stream testpb.TestService_FullDuplexCallServer) error {
	s.entered.Add(1)
	s.running.Add(1)
	defer s.running.Add(-1)
	recv := make(chan error, 1)
	go func() {
		for {
			if _, err := stream.Recv(); err != nil {
				recv <- err
				return
			}
		}
	}()
	select {
	case <-s.gate:
		return nil
	case err := <-recv:
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	case <-stream.Context().Done():
		return stream.Context().Err()
	}
}

// quietLogger keeps refusal lines out of the test output.
var quietLogger = slog.New(slog.DiscardHandler)

// newLimiter builds a Limiter that logs nowhere and is closed after t.
func newLimiter(t testing.TB, cfg grpclimit.Config) *grpclimit.Limiter {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLogger
	}
	l, err := grpclimit.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// serve runs a grpc.Server with the service and opts on ln (a fresh
// loopback listener if nil), stopped after t; it returns the address.
func serve(t testing.TB, svc *service, ln net.Listener, opts ...grpc.ServerOption) string {
	t.Helper()
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	srv := grpc.NewServer(opts...)
	testpb.RegisterTestServiceServer(srv, svc)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		svc.open()
		srv.Stop()
		<-done
	})
	return ln.Addr().String()
}

// dialFrom returns a client connection to addr whose TCP connections come
// from the loopback address src, so that each source is a distinct client.
// Every call on it shares one HTTP/2 connection.
func dialFrom(t testing.TB, src, addr string) *grpc.ClientConn {
	t.Helper()
	dialer := func(ctx context.Context, target string) (net.Conn, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		return d.DialContext(ctx, "tcp", target)
	}
	cc, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(dialer))
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// callCtx bounds a test call.
func callCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// startUnary starts a UnaryCall in the background; its result arrives on
// the returned channel.
func startUnary(ctx context.Context, cc *grpc.ClientConn, body string, opts ...grpc.CallOption) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := testpb.NewTestServiceClient(cc).UnaryCall(ctx,
			&testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte(body)}}, opts...)
		done <- err
	}()
	return done
}

// result waits for a call's result.
func result(t testing.TB, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(waitTimeout):
		t.Fatal("timed out waiting for a call to end")
		return nil
	}
}

// wantCode fails t unless err is a status error with code c.
func wantCode(t testing.TB, err error, c codes.Code) {
	t.Helper()
	if got := status.Code(err); got != c {
		t.Fatalf("call ended with %v (%v), want %v", got, err, c)
	}
}

// retryDelay returns the RetryInfo delay of a status error, or -1.
func retryDelay(err error) time.Duration {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return -1
}

// waitIdle waits until the Limiter holds no permit, has no waiter and no
// busy key.
func waitIdle(t testing.TB, l *grpclimit.Limiter) {
	t.Helper()
	waitFor(t, "every permit back", func() bool {
		tot := l.Totals()
		return tot.InUse == 0 && tot.Waiting == 0 && tot.Keys == 0
	})
}

// inUse is the Limiter's permits in use now.
func inUse(l *grpclimit.Limiter) int { return l.Totals().InUse }

var _ = limit.ErrLimited

// waitForReadyOff makes a call fail at once when its connection cannot be
// made, instead of waiting for one (the default).
func waitForReadyOff() []grpc.CallOption { return []grpc.CallOption{grpc.WaitForReady(false)} }
