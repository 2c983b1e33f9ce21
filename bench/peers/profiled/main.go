// Command profiled runs the Portcullis daemon (internal/daemon) from a
// configuration file, as "portcullis run --config FILE" does, and serves
// net/http/pprof on a second loopback address, so that bench/peers can take
// a CPU profile of the proxy under load, with the configuration the table
// measures (bench/peers/portcullis.yaml or portcullis-nethttp.yaml). The
// daemon has no pprof endpoint of its own; this program exists only for that
// profile and is never what the benchmark table measures.
//
// Usage: profiled -config FILE -pprof ADDR
//
// It serves until SIGINT or SIGTERM. Exit status: 0 after a signal, 1 when it
// cannot start, 2 for bad flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/daemon"
)

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400) // as cmd/portcullis does, so that the profile is of the same process
	}
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("profiled", flag.ContinueOnError)
	file := fs.String("config", "", "the daemon's configuration file")
	pprofAddr := fs.String("pprof", "127.0.0.1:0", "serve /debug/pprof/ on this host:port")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *file == "" {
		fmt.Fprintln(os.Stderr, "profiled: -config is required")
		return 2
	}
	cfg, err := config.Load(*file)
	if err != nil {
		fmt.Fprintln(os.Stderr, "profiled:", err)
		return 2
	}
	srv, err := daemon.Start(cfg, daemon.Options{LogOutput: os.Stderr}) // as cmd/portcullis starts it
	if err != nil {
		fmt.Fprintln(os.Stderr, "profiled:", err)
		return 1
	}
	ln, err := net.Listen("tcp", *pprofAddr)
	if err != nil {
		_ = srv.Close()
		fmt.Fprintln(os.Stderr, "profiled:", err)
		return 1
	}
	go servePprof(ln)
	fmt.Println("ready", srv.Addr("http"), "pprof", ln.Addr())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	<-sigs
	_ = ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "profiled:", err)
	}
	return 0
}

func servePprof(ln net.Listener) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	s := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	if err := s.Serve(ln); err != nil && !errors.Is(err, net.ErrClosed) {
		fmt.Fprintln(os.Stderr, "profiled: pprof:", err)
	}
}
