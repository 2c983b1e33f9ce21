package rls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
)

// ServerOptions configure [NewGRPCServer].
type ServerOptions struct {
	// TLS, when set, serves gRPC over TLS (with ClientAuth and ClientCAs
	// set, mTLS). Nil means plaintext (h2c), what Envoy's cluster speaks
	// without a transport_socket.
	TLS *tls.Config
	// Reflection registers the gRPC reflection service, for grpcurl. False
	// (the default) leaves it off.
	Reflection bool
	// MaxConcurrentStreams bounds the calls in progress on one connection.
	// Zero means 1024.
	MaxConcurrentStreams uint32
}

// NewGRPCServer returns a gRPC server serving svc as
// envoy.service.ratelimit.v3.RateLimitService, grpc.health.v1.Health
// (the overall status and the service's name, SERVING) and, when asked,
// reflection; and the health server, whose status the caller sets to
// NOT_SERVING when it begins to shut down.
func NewGRPCServer(svc *Service, o ServerOptions) (*grpc.Server, *health.Server) {
	streams := o.MaxConcurrentStreams
	if streams == 0 {
		streams = 1024
	}
	opts := []grpc.ServerOption{
		grpc.MaxConcurrentStreams(streams),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.MaxRecvMsgSize(1 << 20),
	}
	if o.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(o.TLS)))
	}
	srv := grpc.NewServer(opts...)
	pb.RegisterRateLimitServiceServer(srv, svc)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(pb.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	if o.Reflection {
		reflection.Register(srv)
	}
	return srv, hs
}

// TLSFiles name the PEM files of the service's TLS. The zero TLSFiles
// means no TLS.
type TLSFiles struct {
	// CertFile is the certificate chain, leaf first. Empty means no TLS
	// (then KeyFile and ClientCAFile must be empty too).
	CertFile string
	// KeyFile is CertFile's private key. Empty only without TLS.
	KeyFile string
	// ClientCAFile, when set, requires every client (Envoy) to present a
	// certificate signed by one of its authorities: mTLS. Empty means
	// clients are not asked for a certificate.
	ClientCAFile string
}

// ServerTLS loads f into a server tls.Config (TLS 1.2 or later, h2), or
// returns nil for no TLS when f names no file. The files are read once:
// a new certificate takes a restart.
func ServerTLS(f TLSFiles) (*tls.Config, error) {
	if f.CertFile == "" && f.KeyFile == "" && f.ClientCAFile == "" {
		return nil, nil
	}
	if f.CertFile == "" || f.KeyFile == "" {
		return nil, errors.New("rls: TLS needs both a certificate and its key (a client CA needs them too)")
	}
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("rls: TLS certificate: %w", err)
	}
	c := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}}
	if f.ClientCAFile != "" {
		pem, err := os.ReadFile(f.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("rls: client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("rls: client CA %s holds no PEM certificate", f.ClientCAFile)
		}
		c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return c, nil
}

// Shutdown sets hs NOT_SERVING, then stops srv gracefully, letting the
// calls in progress finish, or abruptly once ctx ends.
func Shutdown(ctx context.Context, srv *grpc.Server, hs *health.Server) {
	hs.Shutdown()
	done := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		srv.Stop()
		<-done
	}
}

// Listen binds addr for the service.
func Listen(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("rls: listen: %w", err)
	}
	return l, nil
}
