package quicadmit

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/seed-a07d1050/portcullis/internal/waitfor"
)

func TestBelowThresholdNoRetry(t *testing.T) {
	s := startServer(t, Config{RetryThresholdMin: 16, RetryThresholdMax: 16}, serverOpts{})
	const n = 8
	errs := make(chan error, n)
	clients := make([]*client, n)
	for i := range clients {
		clients[i] = newClient(t, loopback(byte(10+i)))
	}
	for _, cl := range clients {
		go func() {
			_, err := cl.dial(t, s.addr, nil, 5*time.Second)
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i, cl := range clients {
		if cl.sawRetry.Load() {
			t.Fatalf("client %d got a Retry below the threshold", i)
		}
	}
	snap := s.waitIdle(t)
	if snap.Retried != 0 || snap.Completed != n || snap.Admitted != n || snap.RetryOn {
		t.Fatalf("snapshot %+v", snap)
	}
}

// holdInProgress puts n spoofed attempts in progress on s; they stay until
// quic-go's handshake idle timeout.
func holdInProgress(t *testing.T, s *testServer, n int) {
	t.Helper()
	spoof(t, s, captureInitials(t, n), 100)
	waitfor.Within(t, 5*time.Second, "spoofed attempts in progress", func() bool { return s.c.Snapshot().InProgress == int64(n) })
}

func TestPastThresholdRetryThenComplete(t *testing.T) {
	s := startServer(t, Config{RetryThresholdMin: 2, RetryThresholdMax: 2}, serverOpts{})
	holdInProgress(t, s, 2)

	fresh := newClient(t, loopback(20))
	if _, err := fresh.dial(t, s.addr, nil, 5*time.Second); err != nil {
		t.Fatalf("fresh client past the threshold: %v", err)
	}
	if !fresh.sawRetry.Load() {
		t.Fatal("fresh client past the threshold got no Retry")
	}
	waitfor.Within(t, 5*time.Second, "the fresh client's completion", func() bool { return s.c.Snapshot().Completed == 1 })
	snap := s.c.Snapshot()
	if snap.Retried < 1 || snap.Admitted != 3 || !snap.RetryOn {
		t.Fatalf("snapshot %+v", snap)
	}
}

func TestNewTokenSkipsRetry(t *testing.T) {
	s := startServer(t, Config{RetryThresholdMin: Zero, RetryThresholdMax: Zero}, serverOpts{})
	cl := newClient(t, loopback(21))
	cl.tokens = quic.NewLRUTokenStore(4, 4)
	conn, err := cl.dial(t, s.addr, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !cl.sawRetry.Load() {
		t.Fatal("first connection at threshold zero got no Retry")
	}
	retried := s.c.Snapshot().Retried // one per Initial of the first flight
	// Let the NEW_TOKEN frame arrive: it is sent right after completion.
	time.Sleep(50 * time.Millisecond)
	_ = conn.CloseWithError(0, "")
	cl.sawRetry.Store(false)
	if _, err := cl.dial(t, s.addr, nil, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if cl.sawRetry.Load() {
		t.Fatal("a client with a NEW_TOKEN token got a Retry")
	}
	if r := s.c.Snapshot().Retried; r != retried {
		t.Fatalf("Retried went from %d to %d for a client with a token", retried, r)
	}
}

func TestAtMaxRefused(t *testing.T) {
	s := startServer(t, Config{RetryThresholdMin: 2, RetryThresholdMax: 2, MaxInProgress: 2}, serverOpts{})
	holdInProgress(t, s, 2)
	cl := newClient(t, loopback(22))
	_, err := cl.dial(t, s.addr, nil, 5*time.Second)
	if !isRefused(err) {
		t.Fatalf("dial at the maximum: %v, want CONNECTION_REFUSED", err)
	}
	if cl.sawRetry.Load() {
		t.Fatal("Retry at the maximum; a client that cannot be admitted should not pay a round trip")
	}
	// Refused counts Initials: a first flight may span two (a post-quantum
	// key share does not fit one packet).
	if snap := s.c.Snapshot(); snap.Refused < 1 || snap.Admitted != 2 || snap.InProgress != 2 {
		t.Fatalf("snapshot %+v", snap)
	}
}

func TestClosedControllerRefuses(t *testing.T) {
	s := startServer(t, Config{}, serverOpts{})
	if err := s.c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := newClient(t, loopback(23)).dial(t, s.addr, nil, 5*time.Second); !isRefused(err) {
		t.Fatalf("dial after Close: %v, want CONNECTION_REFUSED", err)
	}
	if err := s.c.Attach(&quic.Transport{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Attach after Close: %v", err)
	}
}

// TestExactlyOnceAccounting ends attempts in each way over real sockets
// and checks that each counts once, under its outcome, and that nothing is
// left in progress.
func TestExactlyOnceAccounting(t *testing.T) {
	short := &quic.Config{HandshakeIdleTimeout: 300 * time.Millisecond}
	cases := []struct {
		name  string
		opts  serverOpts
		play  func(t *testing.T, s *testServer)
		check func(s Snapshot) bool
	}{
		{"completes", serverOpts{}, func(t *testing.T, s *testServer) {
			if _, err := newClient(t, loopback(30)).dial(t, s.addr, nil, 5*time.Second); err != nil {
				t.Fatal(err)
			}
		}, func(s Snapshot) bool { return s.Completed == 1 }},
		{"completes on an early listener", serverOpts{early: true}, func(t *testing.T, s *testServer) {
			if _, err := newClient(t, loopback(31)).dial(t, s.addr, nil, 5*time.Second); err != nil {
				t.Fatal(err)
			}
		}, func(s Snapshot) bool { return s.Completed == 1 }},
		{"client rejects the certificate", serverOpts{}, func(t *testing.T, s *testServer) {
			bad := &tls.Config{ServerName: "localhost", NextProtos: []string{testALPN}} // system roots
			if _, err := newClient(t, loopback(32)).dial(t, s.addr, bad, 5*time.Second); err == nil {
				t.Fatal("handshake with an untrusted certificate succeeded")
			}
		}, func(s Snapshot) bool { return s.Failed == 1 }},
		{"server rejects the ALPN", serverOpts{early: true}, func(t *testing.T, s *testServer) {
			bad := clientTLS(t)
			bad.NextProtos = []string{"other"}
			if _, err := newClient(t, loopback(33)).dial(t, s.addr, bad, 5*time.Second); err == nil {
				t.Fatal("handshake with a wrong ALPN succeeded")
			}
		}, func(s Snapshot) bool { return s.Failed == 1 }},
		{"times out", serverOpts{quicConf: short}, func(t *testing.T, s *testServer) {
			holdInProgress(t, s, 1)
		}, func(s Snapshot) bool { return s.TimedOut == 1 }},
		{"abandoned: listener closed mid-handshake", serverOpts{}, func(t *testing.T, s *testServer) {
			holdInProgress(t, s, 1)
			_ = s.ln.Close()
		}, func(s Snapshot) bool { return s.Abandoned == 1 }},
		{"abandoned: transport closed mid-handshake", serverOpts{}, func(t *testing.T, s *testServer) {
			holdInProgress(t, s, 1)
			_ = s.tr.Close()
		}, func(s Snapshot) bool { return s.Abandoned == 1 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := startServer(t, Config{}, tc.opts)
			tc.play(t, s)
			snap := s.waitIdle(t)
			ended := snap.Completed + snap.Failed + snap.TimedOut + snap.Abandoned
			if snap.Admitted != 1 || ended != 1 || !tc.check(snap) {
				t.Fatalf("snapshot %+v", snap)
			}
		})
	}
}

// TestCompletedWithoutWrapperEndsAtBackstop shows why connections must be
// accepted through the Listener: quic-go tells no one else of completion,
// so a connection accepted around it is only ended by the backstop.
func TestCompletedWithoutWrapperEndsAtBackstop(t *testing.T) {
	clock := newFakeClock()
	c, err := New(Config{Clock: clock, HandshakeTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	udp, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: udp}
	defer tr.Close()
	if err := c.Attach(tr); err != nil {
		t.Fatal(err)
	}
	ln, err := tr.Listen(serverTLS(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go func() { _, _ = ln.Accept(ctx) }()
	if _, err := newClient(t, loopback(41)).dial(t, ln.Addr(), nil, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if snap := c.Snapshot(); snap.InProgress != 1 || snap.Completed != 0 {
		t.Fatalf("before the backstop: %+v", snap)
	}
	clock.Advance(time.Minute)
	if snap := c.Snapshot(); snap.InProgress != 0 || snap.TimedOut != 1 {
		t.Fatalf("after the backstop: %+v", snap)
	}
}
