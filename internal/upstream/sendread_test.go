//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package upstream

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
)

// exchangeConn returns a conn over a loopback TCP connection, as the
// transport makes one, at the start of an exchange, and the server's end.
func exchangeConn(t *testing.T) (*conn, *net.TCPConn) {
	t.Helper()
	nc, sc := tcpPair(t)
	c := newConn(nc, sc.LocalAddr().String())
	if c.raw == nil {
		t.Fatal("a plain TCP connection has no raw socket")
	}
	c.beginExchange(1 << 20)
	return c, sc
}

// holdHead writes head as the exchange does: held, not sent.
func holdHead(t *testing.T, c *conn, head []byte) {
	t.Helper()
	c.holdHead = true
	if n, err := c.Write(head); n != len(head) || err != nil {
		t.Fatalf("held Write = %d, %v", n, err)
	}
	if c.nwritten != 0 || !bytes.Equal(c.pending, head) {
		t.Fatalf("after a held Write: %d bytes written, %q pending", c.nwritten, c.pending)
	}
}

// TestHeldHeadIsSentByTheFirstRead: the first Read sends the held head,
// exactly once, and returns the answer to it.
func TestHeldHeadIsSentByTheFirstRead(t *testing.T) {
	c, sc := exchangeConn(t)
	head := []byte("GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	const answer = "HTTP/1.1 204 No Content\r\n\r\n"
	got := make(chan []byte, 1)
	go func() {
		b := make([]byte, len(head))
		_, err := io.ReadFull(sc, b)
		if err != nil {
			got <- nil
			return
		}
		got <- b
		io.WriteString(sc, answer)
	}()
	holdHead(t, c, head)
	buf := make([]byte, 256)
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != answer {
		t.Fatalf("Read = %q, %v; want %q", buf[:n], err, answer)
	}
	if b := <-got; !bytes.Equal(b, head) {
		t.Fatalf("the upstream got %q, want %q", b, head)
	}
	if c.pending != nil || c.nwritten != int64(len(head)) || c.sendErr != nil {
		t.Fatalf("after the read: pending %q, %d written, send error %v", c.pending, c.nwritten, c.sendErr)
	}
	// Nothing more was sent: the upstream sees EOF right after the head.
	c.nc.(*net.TCPConn).CloseWrite()
	sc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if rest, err := io.ReadAll(sc); err != nil || len(rest) != 0 {
		t.Fatalf("after the head the upstream read %q, %v", rest, err)
	}
}

// TestHeldHeadWhenTheSocketIsFull: a held head the socket cannot take
// without blocking is sent whole by the connection's own Write once the
// upstream reads, in order after what was queued before it, and the
// answer is still read.
func TestHeldHeadWhenTheSocketIsFull(t *testing.T) {
	c, sc := exchangeConn(t)
	cc := c.nc.(*net.TCPConn)
	cc.SetWriteBuffer(4096)
	sc.SetReadBuffer(4096)
	// Fill both buffers: write until the write deadline stops it.
	fill := bytes.Repeat([]byte("x"), 4<<20)
	cc.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
	queued, err := cc.Write(fill)
	if !errors.Is(err, syscall.EAGAIN) && !isTimeout(err) {
		t.Fatalf("filling the socket: %d bytes, %v; want a timeout", queued, err)
	}
	cc.SetDeadline(time.Now().Add(10 * time.Second)) // a failure ends, not hangs
	sc.SetReadDeadline(time.Now().Add(10 * time.Second))
	head := []byte("GET / HTTP/1.1\r\nHost: a\r\nX-Pad: " + strings.Repeat("p", 3000) + "\r\n\r\n")
	const answer = "HTTP/1.1 204 No Content\r\n\r\n"
	got := make(chan []byte, 1)
	go func() {
		time.Sleep(100 * time.Millisecond) // let the Read find the socket full
		b := make([]byte, queued+len(head))
		if _, err := io.ReadFull(sc, b); err != nil {
			got <- nil
			return
		}
		got <- b[queued:]
		io.WriteString(sc, answer)
	}()
	holdHead(t, c, head)
	buf := make([]byte, 256)
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != answer {
		t.Fatalf("Read = %q, %v; want %q", buf[:n], err, answer)
	}
	if b := <-got; !bytes.Equal(b, head) {
		t.Fatalf("after the queued bytes the upstream got %d bytes, want the %d of the head", len(b), len(head))
	}
	if c.nwritten != int64(len(head)) {
		t.Fatalf("%d bytes counted as written, want %d", c.nwritten, len(head))
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestHeldHeadOnAResetConnection: when the upstream has reset the
// connection, sending the held head fails with the reset, which Read
// returns and the exchange takes for a failed write.
func TestHeldHeadOnAResetConnection(t *testing.T) {
	c, sc := exchangeConn(t)
	sc.SetLinger(0)
	sc.Close() // RST
	time.Sleep(50 * time.Millisecond)
	// Peek first, as the pool does: the reset is what it would find.
	holdHead(t, c, []byte("GET / HTTP/1.1\r\nHost: a\r\n\r\n"))
	n, err := c.Read(make([]byte, 64))
	if n != 0 || err == nil {
		t.Fatalf("Read = %d, %v; want an error", n, err)
	}
	if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("Read error %v, want ECONNRESET or EPIPE", err)
	}
	if c.sendErr == nil || c.nwritten != 0 {
		t.Fatalf("send error %v, %d written; want the reset and nothing written", c.sendErr, c.nwritten)
	}
}

// TestHeldHeadWaitsUnderTheDeadline: the wait for the answer ends at the
// connection's read deadline.
func TestHeldHeadWaitsUnderTheDeadline(t *testing.T) {
	c, _ := exchangeConn(t)
	c.nc.SetDeadline(time.Now().Add(100 * time.Millisecond))
	holdHead(t, c, []byte("GET / HTTP/1.1\r\nHost: a\r\n\r\n"))
	start := time.Now()
	_, err := c.Read(make([]byte, 64))
	if !isTimeout(err) {
		t.Fatalf("Read error %v, want a timeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the read returned after %v", d)
	}
	if c.nwritten == 0 {
		t.Fatal("the head was not sent before the wait")
	}
}
