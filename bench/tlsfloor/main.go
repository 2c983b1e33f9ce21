// Command tlsfloor is the TLS floor of bench/peers: a minimal Go server
// terminating TLS (crypto/tls) and serving HTTP/1.1 and HTTP/2 (net/http's,
// ALPN h2 and http/1.1) that answers every request itself with a 3-byte
// body, proxying nothing, limiting nothing. What it spends per request is
// the least the Go standard library spends on TLS and HTTP/2 on this
// machine: the daemon's cost above it is Portcullis's own, and nginx's
// static server (bench/peers/nginx-tls.conf) is its measure on the other
// side. It is not a server to deploy.
//
// Usage: tlsfloor -listen ADDR -cert FILE -key FILE [-h2check]
//
// With -h2check it serves HTTP/2 as the daemon's https listeners do, with
// x/net/http2 behind internal/h2check: what that layer costs.
//
// It prints "ready ADDR" once it listens and serves until SIGINT or
// SIGTERM. Exit status: 0 after a signal, 1 when it cannot start, 2 for bad
// flags.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/h2check"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("tlsfloor", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:18497", "TCP address to serve on")
	certFile := fs.String("cert", "", "PEM certificate (required)")
	keyFile := fs.String("key", "", "PEM private key (required)")
	withCheck := fs.Bool("h2check", false, "serve HTTP/2 behind internal/h2check, as the daemon does")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *certFile == "" || *keyFile == "" || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: tlsfloor -listen ADDR -cert FILE -key FILE [-h2check]")
		return 2
	}
	cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tlsfloor: loading the certificate:", err)
		return 1
	}
	body := []byte("ok\n")
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header()["Content-Type"] = []string{"text/plain"}
			_, _ = w.Write(body)
		}),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       60 * time.Second,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ErrorLog:          log.New(os.Stderr, "tlsfloor: ", 0),
	}
	if *withCheck {
		if err := h2check.Configure(srv); err != nil {
			fmt.Fprintln(os.Stderr, "tlsfloor:", err)
			return 1
		}
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tlsfloor:", err)
		return 1
	}
	fmt.Println("ready", ln.Addr())
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(ln, "", "") }()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case <-sig:
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		return 0
	case err := <-done:
		fmt.Fprintln(os.Stderr, "tlsfloor:", err)
		return 1
	}
}
