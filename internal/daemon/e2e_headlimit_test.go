package daemon_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/config"
	"github.com/seed-a07d1050/portcullis/internal/daemon"
)

// headLimitConfig is one plain listener with its defaults, the per-client
// cap lifted so that one test client may hold hundreds of connections.
const headLimitConfig = `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    max_conns_per_client: -1
    routes:
      - upstreams: ["{{backend}}"]
`

// defaultHeadLimit is the longest head the daemon reads by default:
// max_header_bytes's default with the 4 KiB net/http allows beyond it.
const defaultHeadLimit = config.DefaultMaxHeaderBytes + 4096

// paddedHead returns a GET request head of exactly n bytes (n at least
// 100), ended by its empty line when whole is true and cut just before it
// otherwise. The padding is in fields of at most 4000 bytes, so that
// servers with a per-line bound below the head's (nginx's 8 KiB) judge
// the head's size alone.
func paddedHead(n int, whole bool) []byte {
	var b bytes.Buffer
	b.WriteString("GET /ok HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n")
	for i := 0; ; i++ {
		left := n - b.Len() - len("\r\n") // the empty line
		if left <= 0 {
			break
		}
		name := fmt.Sprintf("X-Pad-%d: ", i)
		value := min(4000, left-len(name)-len("\r\n"))
		if value < 1 {
			// Too little room for another field: lengthen the last one.
			b.Truncate(b.Len() - 2)
			b.WriteString(strings.Repeat("p", left))
			b.WriteString("\r\n")
			break
		}
		b.WriteString(name)
		b.WriteString(strings.Repeat("p", value))
		b.WriteString("\r\n")
	}
	if b.Len() != n-2 {
		panic(fmt.Sprintf("paddedHead(%d): %d bytes before the empty line", n, b.Len()))
	}
	if whole {
		b.WriteString("\r\n")
	}
	return b.Bytes()
}

// statusOf returns the status code of the answer at the start of got, or
// 0 when there is none.
func statusOf(got []byte) int {
	line, _, _ := bytes.Cut(got, []byte("\r\n"))
	f := strings.Fields(string(line))
	if len(f) < 2 || !strings.HasPrefix(f[0], "HTTP/1.") {
		return 0
	}
	code, _ := strconv.Atoi(f[1])
	return code
}

// TestHeadLimit sends heads around the head limit on every HTTP/1.1
// server and checks that one within it is served and one past it is
// answered 431, by default and with max_header_bytes raised. The
// default limit (32 KiB and net/http's 4 KiB beyond) is in line with
// nginx's large_client_header_buffers (4 x 8k) and HAProxy's bufsize
// (16k): the same heads sent to them on loopback with their defaults
// (nginx 1.22.1, HAProxy 2.6.12) are served at 32,000 and 15,000 bytes,
// and answered 400 "Request Header Or Cookie Too Large" by nginx from
// 32,768 bytes and 400 "Bad request" by HAProxy from 15,400. 431 is the
// status RFC 6585 defines for a head too large, and net/http's (see
// docs/daemon.md, "Head size and memory per connection"). Before the
// limit came down to 32 KiB, the
// daemon read heads of up to 1 MiB, which let each connection make it
// hold a megabyte before the head was complete.
func TestHeadLimit(t *testing.T) {
	cases := []struct {
		name      string
		maxHeader int // max_header_bytes; 0: the default
		size      int
		want      int
	}{
		{"default, at max_header_bytes", 0, config.DefaultMaxHeaderBytes, 200},
		{"default, just under the limit", 0, defaultHeadLimit - 64, 200},
		{"default, over the limit", 0, defaultHeadLimit + 4096, 431},
		{"default, far over the limit", 0, 256 << 10, 431},
		{"raised, past the default", 128 << 10, defaultHeadLimit + 4096, 200},
		{"raised, just under its limit", 128 << 10, 128<<10 + 4096 - 64, 200},
		{"raised, over its limit", 128 << 10, 128<<10 + 4096 + 4096, 431},
	}
	bothServers(t, func(t *testing.T) {
		for _, tc := range cases {
			text := headLimitConfig
			if tc.maxHeader != 0 {
				text = strings.Replace(text, "max_conns_per_client: -1", fmt.Sprintf("max_conns_per_client: -1\n    max_header_bytes: %d", tc.maxHeader), 1)
			}
			d := startDaemon(t, text)
			got := readToEnd(t, d.srv.Addr("web").String(), string(paddedHead(tc.size, true)))
			if code := statusOf(got); code != tc.want {
				t.Errorf("%s: a head of %d bytes got %d (%.60q), want %d", tc.name, tc.size, code, got, tc.want)
			}
		}
	})
}

// tcpRxQueued returns the number of established TCP sockets on loopback
// with local port port, and how many of them have bytes the process has
// not read yet (from /proc/net/tcp).
func tcpRxQueued(t testing.TB, port int) (socks, queued int) {
	socks, queued, _ = tcpSockets(t, port)
	return socks, queued
}

// tcpSockets is tcpRxQueued, with the count of sockets in any state with
// local port port.
func tcpSockets(t testing.TB, port int) (socks, queued, all int) {
	t.Helper()
	data, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Skipf("no /proc/net/tcp: %v", err)
	}
	want := fmt.Sprintf(":%04X", port)
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 5 || !strings.HasSuffix(f[1], want) {
			continue
		}
		if all++; f[3] != "01" {
			continue
		}
		socks++
		if _, rx, _ := strings.Cut(f[4], ":"); strings.TrimLeft(rx, "0") != "" {
			queued++
		}
	}
	return socks, queued, all
}

// heldHeadConfig is headLimitConfig with a read_header_timeout long
// enough for a loaded machine to open and fill hundreds of connections
// before the first one's head times out (the default, 10 s, once closed
// them all under the race detector).
var heldHeadConfig = strings.Replace(headLimitConfig, "max_conns_per_client: -1", "max_conns_per_client: -1\n    read_header_timeout: 2m", 1)

// heldHeadHeap opens n connections to the daemon's listener, each
// holding an incomplete head of size bytes, waits until the daemon has
// read every byte of them, and returns the growth of the live heap (after
// a collection) and of the goroutine stacks per connection. The client's
// own sockets count in it (under 1 KiB each).
func heldHeadHeap(t testing.TB, d *testDaemon, n, size int) (heap, stack float64) {
	t.Helper()
	addr := d.srv.Addr("web").(*net.TCPAddr)
	head := paddedHead(size, false)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for range n {
		c, err := net.Dial("tcp", addr.String())
		if err != nil {
			t.Fatalf("connection %d: %v", len(conns), err)
		}
		conns = append(conns, c)
		_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write(head); err != nil {
			t.Fatalf("connection %d: writing the head: %v", len(conns), err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		socks, queued := tcpRxQueued(t, addr.Port)
		if socks >= n && queued == 0 {
			break
		}
		if time.Now().After(deadline) {
			_ = conns[0].SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			buf := make([]byte, 200)
			k, err := conns[0].Read(buf)
			_, _, all := tcpSockets(t, addr.Port)
			t.Fatalf("the daemon did not read the heads: %d of %d sockets established (%d in any state), %d with bytes unread (the first connection reads %q, %v)", socks, n, all, queued, buf[:k], err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	heap = (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(n)
	stack = (float64(after.StackInuse) - float64(before.StackInuse)) / float64(n)
	return heap, stack
}

// maxHeapPerHeldHead is the most live heap one connection holding an
// incomplete head just under the default limit may cost the daemon.
const maxHeapPerHeldHead = 64 << 10

// TestHeldHeadHeap checks on every HTTP/1.1 server that a connection
// holding an incomplete head just under the default limit costs the
// daemon at most 64 KiB of live heap, measured over 500 connections as
// the growth of the heap after a collection: a deterministic measure of
// memory, not of time. With the old limit of 1 MiB, such a connection
// cost about 1.1 MiB.
func TestHeldHeadHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 500 connections")
	}
	bothServers(t, func(t *testing.T) {
		d := startDaemon(t, heldHeadConfig)
		heap, stack := heldHeadHeap(t, d, 500, defaultHeadLimit-512)
		t.Logf("per connection holding %d bytes of head: %.0f bytes of heap, %.0f of stack", defaultHeadLimit-512, heap, stack)
		if heap > maxHeapPerHeldHead {
			t.Errorf("a connection holding an incomplete head costs %.0f bytes of heap, want at most %d", heap, maxHeapPerHeldHead)
		}
	})
}

// BenchmarkHeldHeadHeap reports the live heap (heap-B/conn) and stack
// (stack-B/conn) each of 500 connections holding an incomplete head just
// under the default limit costs the daemon, per HTTP/1.1 server.
func BenchmarkHeldHeadHeap(b *testing.B) {
	for _, s := range []config.HTTP1Server{config.HTTP1ServerEventLoop, config.HTTP1ServerNetHTTP, config.HTTP1ServerFast} {
		b.Run("server="+string(s), func(b *testing.B) {
			var heap, stack float64
			for range b.N {
				d := startBenchDaemon(b, heldHeadConfig, s)
				h, st := heldHeadHeap(b, d, 500, defaultHeadLimit-512)
				heap += h
				stack += st
			}
			b.ReportMetric(heap/float64(b.N), "heap-B/conn")
			b.ReportMetric(stack/float64(b.N), "stack-B/conn")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// startBenchDaemon starts a backend and a daemon from text, its http
// listeners served by server, for a benchmark; both stop with it.
func startBenchDaemon(b *testing.B, text string, server config.HTTP1Server) *testDaemon {
	b.Helper()
	be := startBackend(b)
	cfg := parseConfig(b, text, be.URL())
	for i := range cfg.Listeners {
		cfg.Listeners[i].HTTP1Server = server
	}
	srv, err := daemon.Start(cfg, daemon.Options{LogOutput: io.Discard})
	if err != nil {
		b.Fatalf("start: %v", err)
	}
	b.Cleanup(func() { _ = srv.Close() })
	return &testDaemon{srv: srv, backend: be}
}

// TestHandBackCopiesNoHead has clients send the event loops heads of
// 512 KiB (max_header_bytes raised to 1 MiB) and end them unfinished, so
// that the loops hand each connection, with what they read, back to the
// listener's server, which answers 400. It checks what the daemon
// allocates per connection: the loop's buffer, grown by doubling to hold
// the head (twice the head's size in all), and no more. The loops once
// gave the server a copy of the head, which it read into a buffer of its
// own grown by doubling again: five times the head's size per connection.
func TestHandBackCopiesNoHead(t *testing.T) {
	const (
		conns = 16
		size  = 512 << 10
	)
	text := strings.Replace(headLimitConfig, "max_conns_per_client: -1", "max_conns_per_client: -1\n    max_header_bytes: 1048576\n    http1_server: eventloop", 1)
	d := startDaemon(t, text)
	addr := d.srv.Addr("web").String()
	head := paddedHead(size, false)
	readToEnd(t, addr, string(paddedHead(1000, true))) // the first connection's allocations, made once
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write(head); err != nil {
			t.Fatal(err)
		}
		_ = c.(*net.TCPConn).CloseWrite() // the head ends unfinished: handed back
		got, err := io.ReadAll(c)
		c.Close()
		if err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		if code := statusOf(got); code != 400 {
			t.Fatalf("an unfinished head got %d (%.60q), want 400", code, got)
		}
	}
	runtime.ReadMemStats(&after)
	perConn := float64(after.TotalAlloc-before.TotalAlloc) / conns
	t.Logf("allocated per connection handed back with %d bytes of head: %.0f bytes (%.2f times the head)", size, perConn, perConn/size)
	if perConn > 2.5*size {
		t.Errorf("a connection handed back with %d bytes of head made the daemon allocate %.0f bytes, want at most %d", size, perConn, 5*size/2)
	}
}
