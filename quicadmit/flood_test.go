package quicadmit

import (
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/seed-a07d1050/portcullis/internal/waitfor"
)

// TestFlood sends many Initials from many spoofed addresses in 127.0.0.0/8
// at once, more than the threshold. The handshake work the server starts
// (ClientHellos its TLS stack processes) must stay at the threshold, and a
// legitimate client must still connect.
func TestFlood(t *testing.T) {
	const (
		threshold = 8
		flood     = 300
	)
	s := startServer(t, Config{RetryThresholdMin: threshold, RetryThresholdMax: threshold, MaxInProgress: 64},
		serverOpts{quicConf: &quic.Config{HandshakeIdleTimeout: 3 * time.Second}}) // spoofed attempts stay in progress throughout
	initials := captureInitials(t, flood)

	start := time.Now()
	spoof(t, s, initials, 0)
	// Wait until the server has decided on the flood: every Initial was
	// admitted or sent a Retry, or none has been decided for a while
	// (quic-go drops packets when its receive queue is full).
	var last uint64
	stable := time.Now()
	waitfor.Within(t, 10*time.Second, "the flood to be handled", func() bool {
		snap := s.c.Snapshot()
		decided := snap.Admitted + snap.Retried
		if decided != last {
			last, stable = decided, time.Now()
		}
		return decided == flood || time.Since(stable) > 200*time.Millisecond
	})
	t.Logf("flood of %d Initials handled in %v: %+v", flood, time.Since(start), s.c.Snapshot())
	waitfor.Within(t, 5*time.Second, "the admitted handshakes to start", func() bool { return s.tlsStarts.Load() == threshold })

	snap := s.c.Snapshot()
	if snap.Admitted != threshold || snap.InProgress != threshold {
		t.Fatalf("admitted %d (%d in progress) of the flood, want the threshold %d: %+v", snap.Admitted, snap.InProgress, threshold, snap)
	}
	if snap.Retried < flood/2 {
		t.Fatalf("only %d Retries decided for %d spoofed Initials", snap.Retried, flood)
	}

	cl := newClient(t, loopback(250))
	if _, err := cl.dial(t, s.addr, nil, 5*time.Second); err != nil {
		t.Fatalf("legitimate client during the flood: %v", err)
	}
	if !cl.sawRetry.Load() {
		t.Fatal("legitimate client got no Retry during the flood")
	}
	waitfor.Within(t, 5*time.Second, "the legitimate client's completion", func() bool { return s.c.Snapshot().Completed == 1 })
	if got := s.tlsStarts.Load(); got != threshold+1 {
		t.Fatalf("%d TLS handshakes started, want %d (threshold + the legitimate client)", got, threshold+1)
	}

	// Closing the transport ends the spoofed attempts: nothing is left.
	_ = s.tr.Close()
	if snap := s.waitIdle(t); snap.Abandoned != threshold {
		t.Fatalf("after close: %+v", snap)
	}
}
