package connlimit

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/internal/waitfor"
)

// waitTimeout bounds every wait in these tests.
const waitTimeout = 10 * time.Second

// waitFor polls cond until it holds, failing the test after waitTimeout.
// (internal/waitfor holds the loop; this package keeps the name while
// another branch edits its tests: issue 37 item 6.)
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	waitfor.Within(t, waitTimeout, what, cond)
}

// newTestListener wraps a fresh loopback listener (or inner, if given).
func newTestListener(t testing.TB, inner net.Listener, cfg Config) *Listener {
	t.Helper()
	if inner == nil {
		var err error
		if inner, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	l, err := NewListener(inner, cfg)
	if err != nil {
		inner.Close()
		t.Fatalf("NewListener: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// dialFrom connects to addr from the loopback address src (such as
// "127.0.0.2"), so that each source is a distinct client.
func dialFrom(t testing.TB, src string, addr net.Addr) *net.TCPConn {
	t.Helper()
	d := net.Dialer{Timeout: waitTimeout, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", addr.String())
	if err != nil {
		t.Fatalf("dial from %s: %v", src, err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// echoServer accepts from l until it closes; each connection answers every
// line with "served <key>\n" and is closed when the client closes.
func echoServer(t testing.TB, l net.Listener) {
	t.Helper()
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	t.Cleanup(func() { l.Close() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				key, _ := KeyOf(c)
				br := bufio.NewReader(c)
				for {
					if _, err := br.ReadString('\n'); err != nil {
						return
					}
					if _, err := io.WriteString(c, "served "+key.String()+"\n"); err != nil {
						return
					}
				}
			}()
		}
	}()
}

// exchange sends a line on c and returns the answer, or the error that
// ended the read (io.EOF or a reset for a refused connection).
func exchange(t testing.TB, c net.Conn) (string, error) {
	t.Helper()
	c.SetDeadline(time.Now().Add(waitTimeout))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "hello\n"); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("no answer and no close within %v", waitTimeout)
		}
		return "", err
	}
	return strings.TrimSuffix(line, "\n"), nil
}

// mustServe checks that c is served as key.
func mustServe(t testing.TB, c net.Conn, key string) {
	t.Helper()
	got, err := exchange(t, c)
	if err != nil || got != "served "+key {
		t.Fatalf("exchange from %v = %q, %v; want %q", c.LocalAddr(), got, err, "served "+key)
	}
}

// mustBeRefused checks that c is closed by the server without an answer.
func mustBeRefused(t testing.TB, c net.Conn) {
	t.Helper()
	got, err := exchange(t, c)
	if err == nil {
		t.Fatalf("connection from %v was served (%q), want refused", c.LocalAddr(), got)
	}
	if !errors.Is(err, io.EOF) && !isReset(err) {
		t.Fatalf("connection from %v ended with %v, want EOF or reset", c.LocalAddr(), err)
	}
}

func isReset(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "connection reset") || strings.Contains(err.Error(), "broken pipe"))
}

func mustKey(s string) clientkey.Key {
	k, err := clientkey.ParseKey(s)
	if err != nil {
		panic(err)
	}
	return k
}

// countingListener records, for every connection it accepts, how many bytes
// were read from it and whether it was closed.
type countingListener struct {
	net.Listener
	mu    sync.Mutex
	conns map[netip.AddrPort]*countingConn
}

type countingConn struct {
	net.Conn
	read   atomic.Int64
	closed atomic.Bool
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.read.Add(int64(n))
	return n, err
}

func (c *countingConn) Close() error {
	c.closed.Store(true)
	return c.Conn.Close()
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	cc := &countingConn{Conn: c}
	l.mu.Lock()
	if l.conns == nil {
		l.conns = make(map[netip.AddrPort]*countingConn)
	}
	ap := c.RemoteAddr().(*net.TCPAddr).AddrPort()
	l.conns[netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())] = cc
	l.mu.Unlock()
	return cc, nil
}

// conn returns the server side of the client connection c.
func (l *countingListener) conn(t testing.TB, c net.Conn) *countingConn {
	t.Helper()
	var cc *countingConn
	waitFor(t, "the server to accept "+c.LocalAddr().String(), func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		cc = l.conns[c.LocalAddr().(*net.TCPAddr).AddrPort()]
		return cc != nil
	})
	return cc
}

// checkDrained fails unless l holds nothing: no open or pending connection,
// no slot at any level, no MaxConns place.
func checkDrained(t testing.TB, l *Listener) {
	t.Helper()
	waitFor(t, "every slot to come back", func() bool {
		s := l.Stats()
		if s.Open != 0 || s.Pending != 0 || len(l.tokens) != 0 {
			return false
		}
		for _, lv := range l.levels {
			if tot := lv.lim.Totals(); tot.InUse != 0 || tot.Keys != 0 {
				return false
			}
		}
		return true
	})
}

func mustProxySet(entries ...string) *clientkey.ProxySet {
	return clientkey.MustParseProxySet(entries...)
}
