// Command backend serves Portcullis's built-in benchmark backend
// (internal/backend) on one address until SIGINT or SIGTERM, so that the peer
// comparison in bench/peers puts the same server behind every proxy.
//
// Usage: backend [-listen 127.0.0.1:18080] [-delay 2ms]
//
// It prints "ready ADDR" on stdout once it listens. Exit status: 0 after a
// signal, 1 when it cannot listen or close cleanly, 2 for bad flags.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/backend"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("backend", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:18080", "TCP address to serve on")
	delay := fs.Duration("delay", 2*time.Millisecond, "wait before every response")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	srv, err := backend.StartConfig(*listen, backend.Config{Delay: *delay})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready", srv.Addr())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	<-sigs
	if err := srv.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
