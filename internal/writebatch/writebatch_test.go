package writebatch

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// readAll reads c to its end in the background.
func readAll(c net.Conn) <-chan []byte {
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(c)
		got <- b
	}()
	return got
}

// TestBytesLeaveInOrder writes chunks of every size, some past MaxPending
// (which Write sends itself), and checks that the peer reads exactly them.
func TestBytesLeaveInOrder(t *testing.T) {
	client, server := tcpPair(t)
	got := readAll(client)
	w := NewConn(server, Config{})
	rng := rand.New(rand.NewPCG(1, 2))
	var want bytes.Buffer
	for i := range 2000 {
		n := rng.IntN(300)
		if i%100 == 99 {
			n = MaxPending + rng.IntN(MaxPending)
		}
		p := bytes.Repeat([]byte{byte(i)}, n)
		want.Write(p)
		if k, err := w.Write(p); err != nil || k != n {
			t.Fatalf("write %d: %d, %v", i, k, err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if b := <-got; !bytes.Equal(b, want.Bytes()) {
		t.Fatalf("the peer read %d bytes, not the %d written in order", len(b), want.Len())
	}
}

// TestConcurrentWritesStayWhole has writers on several goroutines: each
// Write's bytes arrive together and every writer's in its order.
func TestConcurrentWritesStayWhole(t *testing.T) {
	client, server := tcpPair(t)
	got := readAll(client)
	w := NewConn(server, Config{})
	const writers, each = 8, 500
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			for i := range each {
				if _, err := fmt.Fprintf(w, "<%d:%d>", g, i); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	w.Close()
	next := make([]int, writers)
	b := <-got
	for len(b) > 0 {
		var g, i int
		if _, err := fmt.Sscanf(string(b), "<%d:%d>", &g, &i); err != nil {
			t.Fatalf("a write was cut: %.40q: %v", b, err)
		}
		if i != next[g] {
			t.Fatalf("writer %d: write %d came before %d", g, i, next[g])
		}
		next[g]++
		b = b[bytes.IndexByte(b, '>')+1:]
	}
	for g, n := range next {
		if n != each {
			t.Fatalf("writer %d: %d writes arrived, want %d", g, n, each)
		}
	}
}

// gatedConn is a connection underneath whose writes wait for the test to
// let each one go, and records what each carried.
type gatedConn struct {
	net.Conn // nil: only what the package calls is implemented
	entered  chan []byte
	gate     chan error
	mu       sync.Mutex
	writes   []string
	closed   bool
}

func newGatedConn() *gatedConn {
	return &gatedConn{entered: make(chan []byte, 16), gate: make(chan error)}
}

func (g *gatedConn) Write(p []byte) (int, error) {
	g.entered <- bytes.Clone(p)
	if err := <-g.gate; err != nil {
		return 0, err
	}
	g.mu.Lock()
	g.writes = append(g.writes, string(p))
	g.mu.Unlock()
	return len(p), nil
}

func (g *gatedConn) SetWriteDeadline(time.Time) error { return nil }

func (g *gatedConn) Close() error {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	return nil
}

func (g *gatedConn) written() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.writes...)
}

// TestWritesGatherWhileABatchIsOut: what is written while a batch is being
// sent leaves in the next one, in one write.
func TestWritesGatherWhileABatchIsOut(t *testing.T) {
	g := newGatedConn()
	w := NewConn(g, Config{})
	w.Write([]byte("a"))
	if p := <-g.entered; string(p) != "a" {
		t.Fatalf("first batch %q", p)
	}
	for _, s := range []string{"b", "c", "d"} {
		if n, err := w.Write([]byte(s)); n != 1 || err != nil {
			t.Fatalf("write %q while a batch is out: %d, %v", s, n, err)
		}
	}
	g.gate <- nil
	if p := <-g.entered; string(p) != "bcd" {
		t.Fatalf("second batch %q, want bcd", p)
	}
	g.gate <- nil
	closed := make(chan error)
	go func() { closed <- w.Close() }()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if got := g.written(); fmt.Sprint(got) != "[a bcd]" {
		t.Fatalf("writes underneath %q", got)
	}
}

// TestFullBatchHoldsTheWriter: past MaxPending bytes waiting, Write does
// not return until the batch ahead has left and it has sent its own.
func TestFullBatchHoldsTheWriter(t *testing.T) {
	g := newGatedConn()
	w := NewConn(g, Config{})
	w.Write([]byte("a"))
	<-g.entered // the first batch is out, held
	fill := bytes.Repeat([]byte("f"), MaxPending)
	if n, err := w.Write(fill); n != MaxPending || err != nil {
		t.Fatalf("filling: %d, %v", n, err)
	}
	returned := make(chan error, 1)
	go func() {
		_, err := w.Write([]byte("over"))
		returned <- err
	}()
	select {
	case err := <-returned:
		t.Fatalf("a write past MaxPending returned (%v) while the batch ahead was held", err)
	case <-time.After(100 * time.Millisecond):
	}
	g.gate <- nil // the first batch leaves
	if p := <-g.entered; !bytes.Equal(p, fill) {
		t.Fatalf("after the first batch, %d bytes, want the %d pending", len(p), len(fill))
	}
	g.gate <- nil
	if p := <-g.entered; string(p) != "over" {
		t.Fatalf("then %q, want over", p)
	}
	g.gate <- nil
	if err := <-returned; err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	held := w.pending
	w.mu.Unlock()
	if held != nil {
		t.Fatal("nothing is pending, yet the connection holds a buffer")
	}
}

// TestFailureIsKept: once a write underneath failed, every Write fails
// with its error; after Close, with net.ErrClosed.
func TestFailureIsKept(t *testing.T) {
	g := newGatedConn()
	w := NewConn(g, Config{})
	w.Write([]byte("a"))
	<-g.entered
	broken := errors.New("broken pipe")
	g.gate <- broken
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := w.Write([]byte("b"))
		if errors.Is(err, broken) {
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("Write after a failed batch: %v, want %v", err, broken)
		}
		// "b" went into a batch before the failure was known: let it fail too.
		select {
		case <-g.entered:
			g.gate <- broken
		case <-time.After(time.Millisecond):
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("c")); !errors.Is(err, broken) {
		t.Fatalf("Write after Close: %v, want the kept %v", err, broken)
	}
	if err := w.Close(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("second Close: %v, want net.ErrClosed", err)
	}

	w = NewConn(newGatedConn(), Config{})
	w.Close()
	if _, err := w.Write([]byte("d")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after Close: %v, want net.ErrClosed", err)
	}
}

// TestCloseSendsWhatIsPending: bytes written just before Close reach the
// peer before its end of stream, however the batch's goroutine and Close
// meet.
func TestCloseSendsWhatIsPending(t *testing.T) {
	for i := range 200 {
		client, server := tcpPair(t)
		got := readAll(client)
		w := NewConn(server, Config{})
		w.Write([]byte("response;"))
		w.Write([]byte("goaway"))
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if b := <-got; string(b) != "response;goaway" {
			t.Fatalf("run %d: the peer read %q before the end", i, b)
		}
	}
}

// fillUntilHeld writes to w until a Write takes longer than a moment: the
// socket's buffers are full and the peer does not read. It gives up after
// 64 MiB.
func fillUntilHeld(t *testing.T, w *Conn) {
	t.Helper()
	chunk := make([]byte, 16<<10)
	for range 4096 {
		done := make(chan error, 1)
		go func() { _, err := w.Write(chunk); done <- err }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("filling: %v", err)
			}
		case <-time.After(200 * time.Millisecond):
			return
		}
	}
	t.Fatal("64 MiB written to a peer that does not read without a write being held")
}

// TestWriteDeadlineBoundsAHeldWrite: a peer that stops reading holds the
// writer until the write deadline, which then fails the Write.
func TestWriteDeadlineBoundsAHeldWrite(t *testing.T) {
	_, server := tcpPair(t) // the client never reads
	w := NewConn(server, Config{})
	fillUntilHeld(t, w) // one Write is still held by the full socket
	if err := w.SetWriteDeadline(time.Now().Add(100 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	var err error
	for range 1000 {
		if _, err = w.Write(make([]byte, 16<<10)); err != nil {
			break
		}
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Write past the deadline: %v, want os.ErrDeadlineExceeded", err)
	}
}

// TestCloseGivesUpOnAPeerThatDoesNotRead: Close waits closeFlushTimeout at
// most for a peer that stopped reading, then closes.
func TestCloseGivesUpOnAPeerThatDoesNotRead(t *testing.T) {
	defer func(d time.Duration) { closeFlushTimeout = d }(closeFlushTimeout)
	closeFlushTimeout = 100 * time.Millisecond
	client, server := tcpPair(t)
	w := NewConn(server, Config{})
	fillUntilHeld(t, w)
	closed := make(chan error, 1)
	go func() { closed <- w.Close() }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close still waits for a peer that does not read")
	}
	// The peer sees the connection end once it has read what got through.
	client.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, client); err != nil {
		t.Fatalf("the peer's reading ended with %v, want the end of the stream", err)
	}
}

// TestWriteTimeoutEndsAStalledPeer: with Config.WriteTimeout and no
// deadline of the writer's own, a peer that stops reading fails the
// writes within about that time, though each Write returned at once.
func TestWriteTimeoutEndsAStalledPeer(t *testing.T) {
	_, server := tcpPair(t) // the client never reads
	w := NewConn(server, Config{WriteTimeout: 100 * time.Millisecond})
	chunk := make([]byte, 16<<10)
	start := time.Now()
	var err error
	for range 4096 { // 64 MiB at most
		done := make(chan error, 1)
		go func() { _, err := w.Write(chunk); done <- err }()
		select {
		case err = <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("a Write is held past ten times the write timeout")
		}
		if err != nil {
			break
		}
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("writing to a peer that does not read: %v, want os.ErrDeadlineExceeded", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the stall was found after %v", took)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}
