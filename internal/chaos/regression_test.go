package chaos

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/daemon"
)

// Minimal reproductions of bugs the chaos test found in other packages,
// kept as regression tests; each names the file and function it guards.

// TestTCPShutdownMissesLateConnection guards against a WaitGroup misuse,
// fixed by waiting for the accept loop first, that was in what is now
// internal/listen: (*Front).Shutdown (front.go) closes a tcp listener and
// at once calls (*tcpProxy).shutdown (tcp.go), whose goroutine calls
// p.wg.Wait while (*tcpProxy).serve may still be between Accept and
// p.wg.Add(1) for a connection accepted just before the close: nothing
// orders that Add before the Wait (f.served is waited for only after).
// When the Add comes after Wait has seen zero, the drain returns nil,
// "nothing cut off", and the late connection is proxied without being
// counted: after a reload's drain of a tcp listener (drainInBackground) it
// is never cut, not even by Shutdown or Close, whose fronts no longer
// include the old listener, so its goroutines and sockets outlive the
// Server. When the Add comes between Wait's start and its block, the race
// detector reports it, which is how TestChaos found it (in a reload that
// rebound the raw listener).
//
// The window is narrow, so the test opens connections as fast as it can to
// several tcp listeners while it shuts daemons down, for up to
// shutdownRoundsFor; it fails under -race (the detector's report) and
// cannot see the bug without -race. The fix is to wait for <-f.served (the
// accept loop has returned, so no Add can follow) before
// f.tcp.shutdown(ctx), in Shutdown and in the reload drain alike.
func TestTCPShutdownMissesLateConnection(t *testing.T) {
	const shutdownRoundsFor = 3 * time.Second
	echo := startEcho(t)
	for start := time.Now(); time.Since(start) < shutdownRoundsFor; {
		shutdownRound(t, echo)
	}
}

// shutdownRound starts a daemon with tcpListeners tcp listeners to echo,
// opens connections to each from two goroutines, and shuts it down.
func shutdownRound(t *testing.T, echo *echoServer) {
	t.Helper()
	const tcpListeners = 8
	var text strings.Builder
	text.WriteString("listeners:\n")
	for i := range tcpListeners {
		fmt.Fprintf(&text, "  - {name: raw%d, protocol: tcp, listen: \"127.0.0.1:0\", upstream: %q, max_conns_per_client: -1}\n",
			i, echo.ln.Addr().String())
	}
	cfg, err := config.Parse("bug.yaml", []byte(text.String()))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := daemon.Start(cfg, daemon.Options{Logger: daemonLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 2 * tcpListeners {
		addr := srv.Addr(fmt.Sprintf("raw%d", i/2)).String()
		wg.Go(func() {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 9, byte(i+1))}, Timeout: time.Second}
			for range 1000 {
				select {
				case <-stop:
					return
				default:
				}
				if c, err := d.Dial("tcp", addr); err == nil {
					_ = c.Close()
				}
			}
		})
	}
	time.Sleep(2 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_ = srv.Shutdown(ctx)
	cancel()
	close(stop)
	wg.Wait()
}

// echoServer is a TCP echo server.
type echoServer struct{ ln net.Listener }

// startEcho starts an echoServer that runs until the test ends.
func startEcho(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { _ = ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return &echoServer{ln: ln}
}
