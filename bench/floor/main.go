// Command floor serves bench/floor/floorproxy, the least a Go reverse proxy
// can do per keep-alive request, as a measuring stick beside the daemon,
// nginx and HAProxy (see docs/performance.md). It is not a proxy to deploy:
// it parses, checks, limits and logs nothing.
//
// Usage: floor -listen ADDR -upstream HOST:PORT [-probe | -admit] [-epoll]
//
// With -admit it probes and also does the admission work a data path
// working on bytes could not skip (floorproxy.ServeAdmitting with
// floorproxy.NewAdmission): what such a path could reach, beside what the
// daemon spends. With -epoll it relays as the floor does, but on epoll
// loops of its own, one per GOMAXPROCS (floorproxy.ServeEpoll, Linux only):
// what the runtime's poller and scheduler cost the floor. With both, it
// does the admission work on those loops (floorproxy.ServeEpollAdmitting):
// what a data path shaped like nginx's workers could reach with it.
//
// It prints "ready ADDR" once it listens and serves until SIGINT or
// SIGTERM. Exit status: 0 after a signal, 1 when it cannot listen, 2 for bad
// flags.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/seed-a07d1050/portcullis/bench/floor/floorproxy"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("floor", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:18490", "TCP address to serve on")
	upstream := fs.String("upstream", "", "HOST:PORT of the backend")
	probe := fs.Bool("probe", false, "peek at a kept upstream connection before each reuse, as the daemon does")
	admit := fs.Bool("admit", false, "probe, and do the admission work of a byte-level data path (the head checked, three limits, forwarding fields, metrics)")
	epoll := fs.Bool("epoll", false, "relay on epoll loops of its own, one per GOMAXPROCS, outside Go's network poller (Linux)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *upstream == "" {
		fmt.Fprintln(os.Stderr, "floor: -upstream is required")
		return 2
	}
	var a *floorproxy.Admission
	if *admit {
		var err error
		if a, err = floorproxy.NewAdmission(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	switch {
	case *epoll:
		var stop func()
		if a != nil {
			stop, err = floorproxy.ServeEpollAdmitting(ln, *upstream, runtime.GOMAXPROCS(0), a)
		} else {
			stop, err = floorproxy.ServeEpoll(ln, *upstream, runtime.GOMAXPROCS(0))
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer stop()
	case a != nil:
		go func() { _ = floorproxy.ServeAdmitting(ln, *upstream, a) }()
	default:
		go func() { _ = floorproxy.Serve(ln, *upstream, *probe) }()
	}
	fmt.Println("ready", ln.Addr())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	<-sigs
	ln.Close()
	return 0
}
