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
	"github.com/seed-a07d1050/portcullis/limit"
)

func newPerClient(t testing.TB, permits int) *limit.Limiter[clientkey.Key] {
	t.Helper()
	l, err := limit.New(limit.Config[clientkey.Key]{Policy: limit.Policy[clientkey.Key]{Permits: permits}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func keyOf(last byte) clientkey.Key { return clientkey.FromAddr(loopback(last)) }

func waitInUse(t *testing.T, l *limit.Limiter[clientkey.Key], key clientkey.Key, want int) {
	t.Helper()
	waitfor.Within(t, 5*time.Second, "permits in use", func() bool { return l.InUse(key) == want })
}

// A client whose address a token proved is counted at admission and, over
// its cap, refused with CONNECTION_REFUSED before any handshake work.
func TestPerClientProvenRefusedAtAdmission(t *testing.T) {
	pc := newPerClient(t, 1)
	// Threshold zero: every client first gets a Retry, so every admitted
	// attempt carries a token.
	s := startServer(t, Config{RetryThresholdMin: Zero, RetryThresholdMax: Zero, PerClient: pc}, serverOpts{})
	if _, err := newClient(t, loopback(50)).dial(t, s.addr, nil, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	waitInUse(t, pc, keyOf(50), 1)
	starts := s.tlsStarts.Load()
	_, err := newClient(t, loopback(50)).dial(t, s.addr, nil, 5*time.Second)
	if !isRefused(err) {
		t.Fatalf("second connection of a client with one permit: %v, want CONNECTION_REFUSED", err)
	}
	if got := s.tlsStarts.Load(); got != starts {
		t.Fatalf("the refused attempt cost handshake work (%d -> %d TLS handshakes)", starts, got)
	}
	if _, err := newClient(t, loopback(51)).dial(t, s.addr, nil, 5*time.Second); err != nil {
		t.Fatalf("another client: %v", err)
	}
	if snap := s.waitIdle(t); snap.PerClientRefused < 1 || snap.Completed != 2 {
		t.Fatalf("snapshot %+v", snap)
	}
	s.closeConns()
	waitInUse(t, pc, keyOf(50), 0)
	waitInUse(t, pc, keyOf(51), 0)
	s.waitIdle(t)
}

// An unproven client is counted when its handshake completes; over its cap
// the connection is closed with the configured application error code.
func TestPerClientCountedAtCompletion(t *testing.T) {
	pc := newPerClient(t, 1)
	for _, early := range []bool{false, true} {
		name := "listener"
		if early {
			name = "early listener"
		}
		t.Run(name, func(t *testing.T) {
			s := startServer(t, Config{PerClient: pc}, serverOpts{early: early})
			if _, err := newClient(t, loopback(60)).dial(t, s.addr, nil, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			waitInUse(t, pc, keyOf(60), 1)
			conn, err := newClient(t, loopback(60)).dial(t, s.addr, nil, 5*time.Second)
			if err != nil {
				t.Fatal(err) // the handshake completes: the address was unproven until then
			}
			select {
			case <-conn.Context().Done():
			case <-time.After(5 * time.Second):
				t.Fatal("connection over the per-client cap not closed")
			}
			var appErr *quic.ApplicationError
			if cause := context.Cause(conn.Context()); !errors.As(cause, &appErr) || appErr.ErrorCode != DefaultPerClientCloseCode || !appErr.Remote {
				t.Fatalf("closed with %v, want application error %#x from the server", cause, DefaultPerClientCloseCode)
			}
			if snap := s.c.Snapshot(); snap.PerClientRefused != 1 || snap.Completed != 2 {
				t.Fatalf("snapshot %+v", snap)
			}
			if n := pc.InUse(keyOf(60)); n != 1 {
				t.Fatalf("%d permits in use, want 1", n)
			}
			s.closeConns()
			waitInUse(t, pc, keyOf(60), 0)
		})
	}
}

// Spoofed Initials from a victim's address never take the victim's
// permits, with or without Retry, and the victim still connects.
func TestSpooferCannotSpendVictimBudget(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"below the threshold", Config{}},
		{"under Retry", Config{RetryThresholdMin: Zero, RetryThresholdMax: Zero}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pc := newPerClient(t, 1)
			tc.cfg.PerClient = pc
			s := startServer(t, tc.cfg, serverOpts{})
			victim := loopback(70)
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
			if n := pc.InUse(keyOf(70)); n != 0 {
				t.Fatalf("spoofed attempts hold %d of the victim's permits", n)
			}
			conn, err := newClient(t, victim).dial(t, s.addr, nil, 5*time.Second)
			if err != nil {
				t.Fatalf("victim: %v", err)
			}
			waitInUse(t, pc, keyOf(70), 1)
			if conn.Context().Err() != nil {
				t.Fatal("victim's connection closed")
			}
		})
	}
}

// Every way an attempt with a per-client permit ends gives the permit
// back, and only once.
func TestPerClientPermitReleasedOnEveryPath(t *testing.T) {
	errBoom := errors.New("boom")
	cases := []struct {
		name string
		play func(d *hookDriver)
	}{
		{"handshake fails", func(d *hookDriver) { d.admit(true).onConnDone(&quic.TransportError{Remote: true, ErrorCode: 0x12a}) }},
		{"backstop", func(d *hookDriver) { d.admit(true); d.clock.Advance(time.Hour) }},
		{"completes, then the connection closes", func(d *hookDriver) {
			a := d.admit(true)
			a.complete(nil)
			if d.c.s.perClient.InUse(testKey) != 1 {
				d.t.Fatal("completed connection holds no permit")
			}
			a.onConnDone(&quic.ApplicationError{})
		}},
		{"unproven completes, then closes", func(d *hookDriver) {
			a := d.admit(false)
			if d.c.s.perClient.InUse(testKey) != 0 {
				d.t.Fatal("unproven attempt holds a permit")
			}
			a.complete(nil)
			a.onConnDone(&quic.ApplicationError{})
		}},
		{"closes during completion", func(d *hookDriver) {
			a := d.admit(false)
			a.onConnDone(errBoom)
			a.complete(nil) // too late: counts nothing, takes nothing
		}},
		{"over the cap", func(d *hookDriver) {
			a := d.admit(true)
			_, err := d.c.ConnContext(context.Background(), &quic.ClientInfo{RemoteAddr: testAddr, AddrVerified: true})
			if !errors.Is(err, ErrPerClient) || !errors.Is(err, limit.ErrLimited) {
				d.t.Fatalf("second proven attempt: %v", err)
			}
			a.onConnDone(errBoom)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pc := newPerClient(t, 1)
			d := newHookDriver(t, Config{PerClient: pc})
			tc.play(d)
			if n := pc.InUse(testKey); n != 0 {
				t.Fatalf("%d permits left in use", n)
			}
			if n := d.c.Snapshot().InProgress; n != 0 {
				t.Fatalf("%d attempts left in progress", n)
			}
		})
	}
}

var testKey = clientkey.FromNetAddr(testAddr)
