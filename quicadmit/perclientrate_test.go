package quicadmit

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/internal/waitfor"
	"github.com/seed-a07d1050/portcullis/rate"
)

func newPerClientRate(t testing.TB, lim rate.Limit) *rate.Limiter[clientkey.Key] {
	t.Helper()
	l, err := rate.New(rate.Config[clientkey.Key]{Rate: lim.Rate, Burst: lim.Burst, Delay: lim.Delay, Hash: clientkey.Key.Hash})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// A client whose address a token proved is counted in its handshake rate
// at admission and, over it, refused with CONNECTION_REFUSED before any
// handshake work; other clients are not.
func TestPerClientRateProvenRefusedAtAdmission(t *testing.T) {
	pr := newPerClientRate(t, rate.Limit{Rate: rate.PerMinute(1), Burst: 1})
	s := startServer(t, Config{RetryThresholdMin: Zero, RetryThresholdMax: Zero, PerClientRate: pr}, serverOpts{})
	for i := range 2 {
		if _, err := newClient(t, loopback(80)).dial(t, s.addr, nil, 5*time.Second); err != nil {
			t.Fatalf("connection %d within the burst: %v", i, err)
		}
	}
	starts := s.tlsStarts.Load()
	if _, err := newClient(t, loopback(80)).dial(t, s.addr, nil, 5*time.Second); !isRefused(err) {
		t.Fatalf("third handshake within a minute: %v, want CONNECTION_REFUSED", err)
	}
	if got := s.tlsStarts.Load(); got != starts {
		t.Fatalf("the refused attempt cost handshake work (%d -> %d TLS handshakes)", starts, got)
	}
	if _, err := newClient(t, loopback(81)).dial(t, s.addr, nil, 5*time.Second); err != nil {
		t.Fatalf("another client: %v", err)
	}
	snap := s.waitIdle(t)
	if snap.PerClientRateRefused < 1 || snap.Completed != 3 || snap.PerClientRefused != 0 {
		t.Fatalf("snapshot %+v", snap)
	}
	if tot := pr.Totals(); tot.Admitted+tot.Delayed != 3 || tot.Refused < 1 {
		t.Fatalf("rate totals %+v", tot)
	}
	s.closeConns()
	s.waitIdle(t)
}

// An unproven client is counted when its handshake completes; over its
// rate the connection is closed with the per-client close code.
func TestPerClientRateCountedAtCompletion(t *testing.T) {
	pr := newPerClientRate(t, rate.Limit{Rate: rate.PerMinute(1)})
	s := startServer(t, Config{PerClientRate: pr}, serverOpts{})
	if _, err := newClient(t, loopback(82)).dial(t, s.addr, nil, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	conn, err := newClient(t, loopback(82)).dial(t, s.addr, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err) // the handshake completes: the address was unproven until then
	}
	select {
	case <-conn.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("connection over the handshake rate not closed")
	}
	var appErr *quic.ApplicationError
	if cause := context.Cause(conn.Context()); !errors.As(cause, &appErr) || appErr.ErrorCode != DefaultPerClientCloseCode || !appErr.Remote {
		t.Fatalf("closed with %v, want application error %#x from the server", cause, DefaultPerClientCloseCode)
	}
	if snap := s.waitIdle(t); snap.PerClientRateRefused != 1 || snap.Completed != 2 {
		t.Fatalf("snapshot %+v", snap)
	}
	s.closeConns()
	s.waitIdle(t)
}

// Spoofed Initials from a victim's address never count in the victim's
// rate, with or without Retry: the victim still connects and stays.
func TestSpooferCannotSpendVictimRate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"below the threshold", Config{}},
		{"under Retry", Config{RetryThresholdMin: Zero, RetryThresholdMax: Zero}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr := newPerClientRate(t, rate.Limit{Rate: rate.PerMinute(1)})
			tc.cfg.PerClientRate = pr
			s := startServer(t, tc.cfg, serverOpts{})
			victim := loopback(84)
			for _, p := range captureInitials(t, 5) {
				udp, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(victim, 0)))
				if err != nil {
					t.Fatal(err)
				}
				defer udp.Close()
				if _, err := udp.WriteToUDP(p, s.addr); err != nil {
					t.Fatal(err)
				}
			}
			waitfor.Within(t, 5*time.Second, "the spoofed Initials to be handled", func() bool {
				snap := s.c.Snapshot()
				return snap.Admitted+snap.Retried >= 5
			})
			if tot := pr.Totals(); tot.Admitted+tot.Delayed != 0 {
				t.Fatalf("spoofed attempts counted %d handshakes of the victim", tot.Admitted)
			}
			conn, err := newClient(t, victim).dial(t, s.addr, nil, 5*time.Second)
			if err != nil {
				t.Fatalf("victim: %v", err)
			}
			waitfor.Within(t, 5*time.Second, "the victim's handshake counted", func() bool { return pr.Totals().Admitted == 1 })
			if conn.Context().Err() != nil {
				t.Fatal("victim's connection closed")
			}
		})
	}
}
