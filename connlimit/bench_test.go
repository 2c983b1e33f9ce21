package connlimit

import (
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// benchServer accepts from ln and closes every connection at once, until
// ln closes.
func benchServer(b *testing.B, ln net.Listener) {
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	})
	b.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
}

func benchListeners(b *testing.B) (bare, wrapped net.Listener) {
	bare, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	l, err := NewListener(inner, Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	benchServer(b, bare)
	benchServer(b, l)
	return bare, l
}

// connectAndWait opens n connections to addr, from 4 client goroutines with
// their own source addresses, each waiting for the server's close.
func connectAndWait(b *testing.B, addr net.Addr, n int) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range 4 {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+w))}}
		wg.Go(func() {
			buf := make([]byte, 1)
			for next.Add(1) <= int64(n) {
				c, err := d.Dial("tcp", addr.String())
				if err != nil {
					b.Error(err)
					return
				}
				c.SetReadDeadline(time.Now().Add(waitTimeout))
				c.Read(buf) // EOF once the server closed it
				c.Close()
			}
		})
	}
	wg.Wait()
}

// BenchmarkAcceptClose measures connections accepted and closed per second
// through a bare listener and through the wrapper, in the same run.
func BenchmarkAcceptClose(b *testing.B) {
	for _, name := range []string{"bare", "connlimit"} {
		b.Run(name, func(b *testing.B) {
			bare, wrapped := benchListeners(b)
			ln := bare
			if name == "connlimit" {
				ln = wrapped
			}
			b.ResetTimer()
			connectAndWait(b, ln.Addr(), b.N)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "conns/s")
		})
	}
}

// BenchmarkAcceptCloseRatio alternates small batches between the bare
// listener and the wrapper, so that both see the same machine load, and
// reports the wrapper's rate over the bare one's: "ratio" over the whole
// run and "median-ratio", the median of the per-batch-pair ratios, which
// a burst of load from other processes moves less. 1 means no cost.
func BenchmarkAcceptCloseRatio(b *testing.B) {
	bare, wrapped := benchListeners(b)
	const batch = 100
	var bareTime, wrappedTime time.Duration
	var ratios []float64
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(batch, b.N-done)
		timed := func(ln net.Listener) time.Duration {
			start := time.Now()
			connectAndWait(b, ln.Addr(), n)
			return time.Since(start)
		}
		var bt, wt time.Duration
		if len(ratios)%2 == 0 { // alternate which goes first, so order biases neither
			bt, wt = timed(bare), timed(wrapped)
		} else {
			wt, bt = timed(wrapped), timed(bare)
		}
		bareTime, wrappedTime = bareTime+bt, wrappedTime+wt
		ratios = append(ratios, float64(bt)/float64(wt))
		done += n
	}
	slices.Sort(ratios)
	b.ReportMetric(float64(b.N)/bareTime.Seconds(), "bare-conns/s")
	b.ReportMetric(float64(b.N)/wrappedTime.Seconds(), "connlimit-conns/s")
	b.ReportMetric(float64(bareTime)/float64(wrappedTime), "ratio")
	b.ReportMetric(ratios[len(ratios)/2], "median-ratio")
}

// BenchmarkAdmit measures the wrapper's own work per connection: key,
// slot, Conn, release, without sockets.
func BenchmarkAdmit(b *testing.B) {
	f := newFakeListener()
	l, err := NewListener(f, Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	c := &fakeConn{Conn: pipeOnly{}, remote: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1}}
	b.ReportAllocs()
	for b.Loop() {
		conn := l.admitNow(c)
		conn.ps.release()
		l.stats.open.Add(-1)
	}
}
