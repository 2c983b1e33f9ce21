package connlimit

import (
	"net"
	"sync"
	"testing"
)

// dupListener returns a second listener on the socket of ln, as a reload
// that keeps a socket makes one for the listener it builds.
func dupListener(t testing.TB, ln net.Listener) net.Listener {
	t.Helper()
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dup, err := net.FileListener(f)
	if err != nil {
		t.Fatal(err)
	}
	return dup
}

// TestAdoptCarriesCounts replaces a listener by another on the same socket
// while a client holds its cap: the new listener adopts the old one's
// connections, so the client still cannot open more, and gets its slots
// back as they close. A third generation adopts the connections the second
// had adopted.
func TestAdoptCarriesCounts(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Policy: Policy{Permits: 2}, Levels: []Level{{IPv4Bits: 24, Max: 3}}}
	first := newTestListener(t, inner, cfg)
	echoServer(t, first)
	held := []net.Conn{dialFrom(t, "127.0.0.2", first.Addr()), dialFrom(t, "127.0.0.2", first.Addr())}
	for _, c := range held {
		mustServe(t, c, "127.0.0.2")
	}

	secondSock := dupListener(t, inner)
	second := newTestListener(t, secondSock, cfg)
	first.Close()
	if n := second.Adopt(first); n != 2 {
		t.Fatalf("Adopt = %d, want 2", n)
	}
	echoServer(t, second)
	mustBeRefused(t, dialFrom(t, "127.0.0.2", second.Addr()))
	// The /24 level counts the adopted connections too: one more for the
	// whole prefix.
	mustServe(t, dialFrom(t, "127.0.0.3", second.Addr()), "127.0.0.3")
	mustBeRefused(t, dialFrom(t, "127.0.0.4", second.Addr()))
	if s := second.Stats(); s.Open != 3 {
		t.Errorf("second listener: %d open, want 3 (2 adopted)", s.Open)
	}

	third := newTestListener(t, dupListener(t, secondSock), cfg)
	second.Close()
	if n := third.Adopt(second); n != 3 {
		t.Fatalf("third Adopt = %d, want 3 (1 admitted, 2 adopted)", n)
	}
	echoServer(t, third)
	mustBeRefused(t, dialFrom(t, "127.0.0.2", third.Addr()))

	held[0].Close()
	waitFor(t, "the closed connection's slot in every generation", func() bool {
		return third.levels[0].lim.InUse(mustKey("127.0.0.2")) == 1 && first.levels[0].lim.InUse(mustKey("127.0.0.2")) == 1
	})
	mustServe(t, dialFrom(t, "127.0.0.2", third.Addr()), "127.0.0.2")
}

// TestAdoptRacesClose closes connections while they are adopted, under the
// race detector: whatever the order, every count returns to zero.
func TestAdoptRacesClose(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	first := newTestListener(t, inner, Config{Policy: Policy{Permits: 64}})
	echoServer(t, first)
	var clients []net.Conn
	for range 40 {
		c := dialFrom(t, "127.0.0.2", first.Addr())
		mustServe(t, c, "127.0.0.2")
		clients = append(clients, c)
	}
	second := newTestListener(t, dupListener(t, inner), Config{Policy: Policy{Permits: 64}})
	first.Close()
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Add(1)
		go func() { defer wg.Done(); c.Close() }()
	}
	second.Adopt(first)
	wg.Wait()
	waitFor(t, "every count back to zero", func() bool {
		return first.Stats().Open == 0 && second.Stats().Open == 0 &&
			len(first.Snapshot(0).Keys) == 0 && len(second.Snapshot(0).Keys) == 0
	})
	second.live.mu.Lock()
	defer second.live.mu.Unlock()
	if second.live.adopted != nil {
		t.Error("an adoption of a closed connection is still listed")
	}
}
