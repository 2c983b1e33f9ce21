package daemon_test

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// readSlack is how long before a test's reading of the last byte the
// proxy may have written it: the idle time counts from that write.
const readSlack = 50 * time.Millisecond

// tcpDaemon starts a daemon with one tcp listener "db" proxying to upstream
// with the given idle timeout.
func tcpDaemon(t *testing.T, upstream string, idle time.Duration) *testDaemon {
	t.Helper()
	return startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: db
    protocol: tcp
    listen: "127.0.0.1:0"
    upstream: "`+upstream+`"
    tcp_idle_timeout: `+idle.String()+`
`)
}

// closedWithin waits until c is closed by its peer (a read ends with EOF or
// an error other than a timeout), reading and discarding what arrives, and
// returns when that happened.
func closedWithin(t *testing.T, c net.Conn, limit time.Duration) time.Time {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(limit))
	_, err := io.Copy(io.Discard, c)
	if isTimeout(err) {
		t.Fatalf("connection still open after %v", limit)
	}
	return time.Now()
}

// byeAddr returns the address of an upstream that writes "bye" to each
// connection and closes it.
func byeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("bye"))
			_ = c.Close()
		}
	}()
	return ln.Addr().String()
}

// tickerAddr returns the address of an upstream that writes one byte to each
// connection every interval and reads nothing, for as long as it is open.
func tickerAddr(t *testing.T, interval time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	t.Cleanup(func() { ln.Close(); conns.Wait() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Go(func() {
				defer c.Close()
				for range int(waitLimit / interval) {
					if _, err := c.Write([]byte{'.'}); err != nil {
						return
					}
					time.Sleep(interval)
				}
			})
		}
	}()
	return ln.Addr().String()
}

// A client that goes silent is cut after tcp_idle_timeout, not before, and
// its slot comes back.
func TestTCPIdleClientCut(t *testing.T) {
	const idle = 300 * time.Millisecond
	d := tcpDaemon(t, startEcho(t), idle)
	c := dialFrom(t, "127.0.0.2", d.srv.Addr("db").String())
	_ = c.SetDeadline(time.Now().Add(waitLimit))
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	last := time.Now()
	if after := closedWithin(t, c, waitLimit).Sub(last); after < idle-readSlack {
		t.Fatalf("cut %v after the last byte, before the idle timeout of %v", after, idle)
	}
	d.waitFor("slot back", func() bool { return d.listener("db").Connections.Open == 0 })
}

// An upstream that closes while its client stays silent: the client gets
// the upstream's end, and the connection, whose client never sends its own
// end, is closed within the idle timeout, giving its slot back.
func TestTCPIdleAfterUpstreamClosed(t *testing.T) {
	const idle = 300 * time.Millisecond
	d := tcpDaemon(t, byeAddr(t), idle)
	c := dialFrom(t, "127.0.0.2", d.srv.Addr("db").String())
	_ = c.SetDeadline(time.Now().Add(waitLimit))
	got, err := io.ReadAll(c) // "bye", then the half-close from the proxy
	if err != nil || string(got) != "bye" {
		t.Fatalf("read %q %v, want bye and the upstream's end", got, err)
	}
	last := time.Now()
	d.waitFor("slot back", func() bool { return d.listener("db").Connections.Open == 0 })
	if after := time.Since(last); after < idle-readSlack {
		t.Fatalf("slot back %v after the upstream's end, before the idle timeout of %v", after, idle)
	}
}

// A connection whose two directions both ended closes at once, long before
// its idle timeout.
func TestTCPBothEndsCloseAtOnce(t *testing.T) {
	d := tcpDaemon(t, startEcho(t), time.Hour)
	c := dialFrom(t, "127.0.0.2", d.srv.Addr("db").String())
	_ = c.SetDeadline(time.Now().Add(waitLimit))
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	if got, err := io.ReadAll(c); err != nil || string(got) != "x" {
		t.Fatalf("read %q %v", got, err)
	}
	d.waitFor("slot back", func() bool { return d.listener("db").Connections.Open == 0 })
}

// Traffic in either direction keeps a connection open, however long it
// lasts: a client talking to an echo, and a silent client reading what its
// upstream keeps sending, both outlive the idle timeout several times.
func TestTCPBusyConnectionNeverCut(t *testing.T) {
	const idle = time.Second
	const interval = 50 * time.Millisecond
	const lasting = 3 * idle
	echo := tcpDaemon(t, startEcho(t), idle)
	ticker := tcpDaemon(t, tickerAddr(t, interval), idle)

	talker := dialFrom(t, "127.0.0.2", echo.srv.Addr("db").String())
	listener := dialFrom(t, "127.0.0.3", ticker.srv.Addr("db").String())
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Go(func() { // the client talks
		c := talker
		buf := make([]byte, 1)
		for i := 0; time.Duration(i)*interval < lasting; i++ {
			_ = c.SetDeadline(time.Now().Add(waitLimit))
			if _, err := c.Write([]byte{byte('0' + i%10)}); err != nil {
				errs <- err
				return
			}
			if _, err := io.ReadFull(c, buf); err != nil {
				errs <- err
				return
			}
			time.Sleep(interval)
		}
		_ = c.Close()
	})
	wg.Go(func() { // only the upstream talks
		c := listener
		start := time.Now()
		buf := make([]byte, 64)
		for time.Since(start) < lasting {
			_ = c.SetReadDeadline(time.Now().Add(waitLimit))
			if _, err := c.Read(buf); err != nil {
				errs <- err
				return
			}
		}
		_ = c.Close()
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a connection with traffic was cut (idle timeout %v): %v", idle, err)
	}
	for _, d := range []*testDaemon{echo, ticker} {
		d.waitFor("slots back", func() bool { return d.listener("db").Connections.Open == 0 })
	}
}
