// Command tlsfloor is the TLS floor of bench/peers: a minimal Go server
// terminating TLS (crypto/tls) and serving HTTP/1.1 and HTTP/2 (net/http's,
// ALPN h2 and http/1.1) that answers every request itself with a 3-byte
// body, proxying nothing, limiting nothing. What it spends per request is
// the least the Go standard library spends on TLS and HTTP/2 on this
// machine: the daemon's cost above it is Portcullis's own, and nginx's
// static server (bench/peers/nginx-tls.conf) is its measure on the other
// side. It is not a server to deploy.
//
// Usage: tlsfloor -listen ADDR -cert FILE -key FILE [-h2check] [-upstream HOST:PORT]
//
// With -h2check it serves HTTP/2 as the daemon's https listeners do, with
// x/net/http2 behind internal/h2check: what that layer costs.
//
// With -upstream it proxies every request to that HTTP/1.1 upstream
// instead of answering it, with the least a proxy does: the request's
// method, path, query and fields sent with internal/upstream (the daemon's
// client to upstreams, keeping connections), the answer's status, fields
// and body copied back. No limit, route, access log or forwarding field:
// what a proxy built on these servers spends at the least, the reference
// the daemon's limits and relay are measured against.
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
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/h2check"
	"github.com/seed-a07d1050/portcullis/internal/upstream"
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
	upstreamAddr := fs.String("upstream", "", "proxy every request to this HTTP/1.1 `host:port` instead of answering it")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *certFile == "" || *keyFile == "" || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: tlsfloor -listen ADDR -cert FILE -key FILE [-h2check] [-upstream HOST:PORT]")
		return 2
	}
	cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tlsfloor: loading the certificate:", err)
		return 1
	}
	handler := answer()
	if *upstreamAddr != "" {
		if handler, err = proxy(*upstreamAddr); err != nil {
			fmt.Fprintln(os.Stderr, "tlsfloor:", err)
			return 2
		}
	}
	srv := &http.Server{
		Handler:           handler,
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

// answer returns the handler that answers every request itself.
func answer() http.Handler {
	body := []byte("ok\n")
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header()["Content-Type"] = []string{"text/plain"}
		_, _ = w.Write(body)
	})
}

// proxy returns the handler that sends every request to addr and copies
// the answer back.
func proxy(addr string) (http.Handler, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("-upstream %q: %w", addr, err)
	}
	tr, err := upstream.New(upstream.Config{})
	if err != nil {
		return nil, err
	}
	bufs := sync.Pool{New: func() any { return new([32 << 10]byte) }}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out := &http.Request{
			Method:     r.Method,
			URL:        &url.URL{Scheme: "http", Host: addr, Path: r.URL.Path, RawQuery: r.URL.RawQuery},
			Proto:      "HTTP/1.1",
			ProtoMajor: 1,
			ProtoMinor: 1,
			Header:     r.Header,
			Host:       r.Host,
		}
		resp, err := tr.Send(r.Context(), out, upstream.SendOptions{HeaderValid: true})
		if err != nil {
			http.Error(w, "upstream: "+err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		h := w.Header()
		for k, v := range resp.Header {
			h[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		buf := bufs.Get().(*[32 << 10]byte)
		defer bufs.Put(buf)
		_, _ = io.CopyBuffer(w, resp.Body, buf[:])
	}), nil
}
