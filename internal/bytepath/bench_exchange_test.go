package bytepath_test

import (
	"bytes"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/evloop"
)

// BenchmarkByteLean and BenchmarkByteLoops measure one keep-alive
// exchange on the byte path alone, in Go's poller and on the event loops:
// a plain GET relayed through one concurrency limit to an upstream on
// loopback. The client and the upstream allocate nothing per request, so
// allocs/op is the byte path's, the upstream transport's and the
// server's.
//
//	go test -run XXX -bench Byte -count 6 ./internal/bytepath
func BenchmarkByteLean(b *testing.B) { benchExchanges(b, false) }

func BenchmarkByteLoops(b *testing.B) {
	if !evloop.Supported() {
		b.Skip("no event loops on this system")
	}
	benchExchanges(b, true)
}

func benchExchanges(b *testing.B, loops bool) {
	up := startQuietUpstream(b)
	g := startRig(b, "http://"+up.Addr().String(), loops)
	c, _ := dial(b, g.addr)
	buf := make([]byte, 4<<10)
	request := []byte(get)
	b.ReportAllocs()
	for b.Loop() {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write(request); err != nil {
			b.Fatal(err)
		}
		n := 0
		for !bytes.HasSuffix(buf[:n], []byte("\r\n\r\nhello")) {
			m, err := c.Read(buf[n:])
			if err != nil {
				b.Fatalf("after %q: %v", buf[:n], err)
			}
			if n += m; n == len(buf) {
				b.Fatalf("no answer's end in %q", buf[:n])
			}
		}
	}
	b.StopTimer()
	g.assertIdle(b)
}

// startQuietUpstream answers every request head it reads with
// upstreamAnswer, reading into one buffer per connection.
func startQuietUpstream(tb testing.TB) net.Listener {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	var conns sync.Map
	tb.Cleanup(func() {
		ln.Close()
		conns.Range(func(c, _ any) bool { c.(net.Conn).Close(); return true })
		wg.Wait()
	})
	answer := []byte(upstreamAnswer)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Store(c, nil)
			wg.Go(func() {
				defer conns.Delete(c)
				defer c.Close()
				buf := make([]byte, 4<<10)
				n := 0
				for {
					m, err := c.Read(buf[n:])
					if err != nil {
						return
					}
					n += m
					for {
						i := bytes.Index(buf[:n], []byte("\r\n\r\n"))
						if i < 0 {
							break
						}
						if _, err := c.Write(answer); err != nil {
							return
						}
						n = copy(buf, buf[i+4:n])
					}
					if n == len(buf) {
						return // a head larger than the buffer: not this benchmark's
					}
				}
			})
		}
	})
	return ln
}
