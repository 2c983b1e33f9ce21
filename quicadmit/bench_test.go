package quicadmit

import (
	"context"
	"errors"
	"net"
	"testing"

	"github.com/quic-go/quic-go"
)

// BenchmarkHooks measures the admission hooks per attempt. The baseline
// ("none") is what quic-go itself does with contexts per attempt, hooks or
// not: a cancellable context for ConnContext, a child of what ConnContext
// returns for the connection, a wait on its Done channel, and both
// cancelled when the connection ends. The others add VerifySourceAddress,
// ConnContext, the completion seen by the Listener, and the end.
func BenchmarkHooks(b *testing.B) {
	errEnd := errors.New("closed")
	info := &quic.ClientInfo{RemoteAddr: testAddr}
	b.Run("none", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ctx1, cancel1 := context.WithCancelCause(context.Background())
			ctx2, cancel2 := context.WithCancelCause(ctx1)
			_ = ctx2.Done()
			cancel1(errEnd)
			cancel2(errEnd)
		}
	})
	run := func(b *testing.B, cfg Config) {
		c, err := New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			ctx1, cancel1 := context.WithCancelCause(context.Background())
			if c.VerifySourceAddress(info.RemoteAddr) {
				b.Fatal("Retry")
			}
			actx, err := c.ConnContext(ctx1, info)
			if err != nil {
				b.Fatal(err)
			}
			ctx2, cancel2 := context.WithCancelCause(actx)
			_ = ctx2.Done()
			attemptOf(ctx2).complete(nil)
			cancel1(errEnd)
			cancel2(errEnd)
		}
		if s := c.Snapshot(); s.InProgress != 0 {
			b.Fatalf("%d in progress", s.InProgress)
		}
	}
	b.Run("quicadmit", func(b *testing.B) { run(b, Config{}) })
	b.Run("quicadmit+perclient", func(b *testing.B) { run(b, Config{PerClient: newPerClient(b, -1)}) })
}

// BenchmarkHandshake measures whole handshakes over loopback UDP, one after
// another, on a plain quic-go listener and on one behind a Controller.
func BenchmarkHandshake(b *testing.B) {
	b.Run("plain", func(b *testing.B) {
		udp, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			b.Fatal(err)
		}
		tr := &quic.Transport{Conn: udp}
		defer tr.Close()
		ln, err := tr.Listen(serverTLS(b), nil)
		if err != nil {
			b.Fatal(err)
		}
		benchHandshakes(b, ln)
	})
	b.Run("quicadmit", func(b *testing.B) {
		c, err := New(Config{})
		if err != nil {
			b.Fatal(err)
		}
		udp, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			b.Fatal(err)
		}
		tr := &quic.Transport{Conn: udp}
		defer tr.Close()
		ln, err := c.Listen(tr, serverTLS(b), nil)
		if err != nil {
			b.Fatal(err)
		}
		benchHandshakes(b, ln)
		// A client that closes at once may close before quic-go queues
		// the connection for Accept: it counts as abandoned, not completed.
		if s := c.Snapshot(); s.Admitted < uint64(b.N) {
			b.Fatalf("%d admitted of %d", s.Admitted, b.N)
		}
	})
}

func benchHandshakes(b *testing.B, ln Acceptor) {
	go func() {
		for {
			if _, err := ln.Accept(context.Background()); err != nil {
				return
			}
		}
	}()
	cl := newClient(b, loopback(1))
	tlsConf := clientTLS(b)
	b.ReportAllocs()
	for b.Loop() {
		conn, err := cl.tr.Dial(context.Background(), ln.Addr(), tlsConf, nil)
		if err != nil {
			b.Fatal(err)
		}
		_ = conn.CloseWithError(0, "")
	}
}
