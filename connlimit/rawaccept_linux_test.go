package connlimit

import (
	"bufio"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// dialPending connects from each source in turn and returns the client
// ends; the server has not accepted them yet, so they wait in the
// listener's backlog in this order.
func dialPending(t *testing.T, l *Listener, srcs ...string) []*net.TCPConn {
	t.Helper()
	var cs []*net.TCPConn
	for _, src := range srcs {
		cs = append(cs, dialFrom(t, src, l.Addr()))
	}
	return cs
}

// sameConn fails unless server is the accepted end of client.
func sameConn(t *testing.T, server net.Conn, client net.Conn) {
	t.Helper()
	if server.RemoteAddr().String() != client.LocalAddr().String() {
		t.Fatalf("accepted %v, want the connection from %v", server.RemoteAddr(), client.LocalAddr())
	}
}

// echoLine answers one line on the server end s; the client sees a
// failure as a missing answer.
func echoLine(s net.Conn) {
	s.SetDeadline(time.Now().Add(waitTimeout))
	line, err := bufio.NewReader(s).ReadString('\n')
	if err == nil {
		io.WriteString(s, "served "+line)
	}
}

// After a refusal the listener takes pending connections on the raw path:
// it refuses over-cap clients there without making them net.Conns, and
// the clients it admits there are whole connections, keyed, served and
// released like any other.
func TestRawPathAfterRefusal(t *testing.T) {
	for _, reset := range []bool{false, true} {
		name := "fin"
		if reset {
			name = "reset"
		}
		t.Run(name, func(t *testing.T) {
			l := newTestListener(t, nil, Config{Policy: Policy{Permits: 1}, MaxConns: 10, ResetOnRefuse: reset})
			first := dialFrom(t, "127.0.0.2", l.Addr())
			s1 := acceptOne(t, l)
			sameConn(t, s1, first)

			pending := dialPending(t, l, "127.0.0.2", "127.0.0.3", "127.0.0.2", "127.0.0.4")
			// The poller refuses pending[0], which turns the raw path on;
			// it then admits pending[1].
			s3 := acceptOne(t, l)
			sameConn(t, s3, pending[1])
			// The raw path refuses pending[2] and admits pending[3].
			s4 := acceptOne(t, l)
			sameConn(t, s4, pending[3])

			if r, a := l.stats.rawRefused.Load(), l.stats.rawAdmitted.Load(); r != 1 || a != 2 {
				t.Fatalf("raw path refused %d and admitted %d; want 1 and 2", r, a)
			}
			for _, c := range []net.Conn{pending[0], pending[2]} {
				mustBeRefused(t, c)
			}
			for i, s := range []net.Conn{s3, s4} {
				c := []net.Conn{pending[1], pending[3]}[i]
				go echoLine(s)
				if got, err := exchange(t, c); err != nil || got != "served hello" {
					t.Fatalf("exchange on raw-admitted %v = %q, %v", c.LocalAddr(), got, err)
				}
				if k, ok := KeyOf(s); !ok || k != mustKey(c.LocalAddr().(*net.TCPAddr).IP.String()) {
					t.Fatalf("KeyOf(raw-admitted) = %v, %v", k, ok)
				}
			}
			st := l.Stats()
			if st.Refused.ClientCap != 2 || st.Accepted != 3 || st.Open != 3 {
				t.Fatalf("stats = %+v; want 2 refusals, 3 accepted, 3 open", st)
			}
			for _, s := range []net.Conn{s1, s3, s4} {
				s.Close()
			}
			checkDrained(t, l)
		})
	}
}

// A raw-path refusal with ResetOnRefuse resets the client, as the poller
// path does.
func TestRawPathReset(t *testing.T) {
	l := newTestListener(t, nil, Config{Policy: Policy{Permits: 1}, ResetOnRefuse: true})
	dialFrom(t, "127.0.0.2", l.Addr())
	s1 := acceptOne(t, l)
	defer s1.Close()
	pending := dialPending(t, l, "127.0.0.2", "127.0.0.2", "127.0.0.3")
	s2 := acceptOne(t, l) // refuses two, the second on the raw path
	defer s2.Close()
	sameConn(t, s2, pending[2])
	if l.stats.rawRefused.Load() != 1 {
		t.Fatalf("raw path refused %d, want 1", l.stats.rawRefused.Load())
	}
	pending[1].SetDeadline(time.Now().Add(waitTimeout))
	_, err := pending[1].Read(make([]byte, 1))
	if !isReset(err) {
		t.Fatalf("raw-refused connection read error = %v, want a reset", err)
	}
}

// Once refusals stop, the raw path turns itself off within rawRunLength
// accepts, so that admitted connections go back to the poller.
func TestRawPathTurnsOff(t *testing.T) {
	l := newTestListener(t, nil, Config{Policy: Policy{Permits: 1}})
	echoServer(t, l)
	mustServe(t, dialFrom(t, "127.0.0.2", l.Addr()), "127.0.0.2")
	mustBeRefused(t, dialFrom(t, "127.0.0.2", l.Addr()))
	waitFor(t, "the raw path to be on", func() bool { return l.rawRun.Load() > 0 })
	for i := range rawRunLength + 1 {
		src := "127.0.1." + itoa(1+i%250)
		mustServe(t, dialFrom(t, src, l.Addr()), src)
	}
	if n := l.rawRun.Load(); n > 0 {
		t.Fatalf("raw path still on for %d accepts after %d admissions", n, rawRunLength+1)
	}
}

func itoa(i int) string {
	var b [3]byte
	n := len(b)
	for {
		n--
		b[n] = byte('0' + i%10)
		i /= 10
		if i == 0 {
			return string(b[n:])
		}
	}
}

// BenchmarkRefuse measures what refusing a connection costs the server:
// the CPU time of the thread running Accept (user and system, from
// RUSAGE_THREAD) per refused connection, on the raw path and, in the same
// run, with the raw path off so that every refusal goes through the
// poller. Four client goroutines from one over-cap address connect and
// wait for the close.
func BenchmarkRefuse(b *testing.B) {
	for _, path := range []string{"poller", "raw"} {
		b.Run(path, func(b *testing.B) {
			l := newTestListener(b, nil, Config{Policy: Policy{Permits: 1}})
			if path == "poller" {
				l.raw = nil
			}
			dialFrom(b, "127.0.0.2", l.Addr())
			held := acceptOne(b, l) // 127.0.0.2 is now at its cap
			_ = held
			cpu := make(chan time.Duration, 1)
			go func() {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				start := threadCPU()
				c, err := l.Accept() // returns only for the stop connection below
				if err == nil {
					c.Close()
				}
				cpu <- threadCPU() - start
			}()
			b.ResetTimer()
			refusedFrom(b, "127.0.0.2", l.Addr(), b.N)
			b.StopTimer()
			dialFrom(b, "127.0.0.3", l.Addr())
			b.ReportMetric(float64((<-cpu).Microseconds())/float64(b.N), "server-µs/refusal")
			b.ReportMetric(float64(l.stats.rawRefused.Load())/float64(b.N), "raw-share")
		})
	}
}

// refusedFrom opens n connections from src to addr, 32 at a time, each
// waiting for the server to close it.
func refusedFrom(b *testing.B, src string, addr net.Addr, n int) {
	var next atomic.Int64
	var wg sync.WaitGroup
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	for range 32 {
		wg.Go(func() {
			buf := make([]byte, 1)
			for next.Add(1) <= int64(n) {
				c, err := d.Dial("tcp", addr.String())
				if err != nil {
					continue // a reset can beat the dialer's own check
				}
				c.SetReadDeadline(time.Now().Add(waitTimeout))
				c.Read(buf)
				c.Close()
			}
		})
	}
	wg.Wait()
}

// threadCPU returns the user and system CPU time of the calling thread.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
