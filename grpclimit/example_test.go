package grpclimit_test

import (
	"fmt"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/seed-a07d1050/portcullis/connlimit"
	"github.com/seed-a07d1050/portcullis/grpclimit"
	"github.com/seed-a07d1050/portcullis/promlimit"
)

// A gRPC server with a connection cap at accept, 16 calls at once per
// client with a short queue, one expensive method capped at 2 calls at once
// over all clients, and the limiters' metrics in a Prometheus registry.
func Example() {
	perClient, err := grpclimit.New(grpclimit.Config{
		Policy: grpclimit.Policy{
			Permits:      16,
			QueueSize:    8,
			QueueTimeout: 500 * time.Millisecond,
		},
		Name: "per-client",
	})
	if err != nil {
		panic(err)
	}
	defer perClient.Close()
	export, err := grpclimit.New(grpclimit.Config{
		Key:     grpclimit.ByMethod(),
		Policy:  grpclimit.Policy{Permits: 2},
		Methods: []string{"/reports.Reports/Export"},
		Name:    "export",
	})
	if err != nil {
		panic(err)
	}
	defer export.Close()

	reg := prometheus.NewRegistry()
	for _, l := range []struct {
		name string
		lim  *grpclimit.Limiter
	}{{"per-client", perClient}, {"export", export}} {
		reg.MustRegister(promlimit.NewCollector(l.lim, promlimit.Opts{
			Subsystem:   "grpc_calls",
			ConstLabels: prometheus.Labels{"limiter": l.name},
		}))
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	capped, err := connlimit.NewListener(ln, connlimit.Config{Policy: connlimit.Policy{Permits: 8}})
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(grpclimit.ServerOptions(perClient, export)...)
	// Register services here, then serve.
	go func() { _ = srv.Serve(capped) }()
	defer srv.Stop()

	fams, _ := reg.Gather()
	fmt.Println(len(fams) > 0)
	// Output: true
}
