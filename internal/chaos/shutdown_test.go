package chaos

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/daemon"
)

// stopAfter is how long TestChaosStopUnderAttack attacks before it stops
// the daemon, and shutdownGrace the Shutdown context it gives: short, so
// that exchanges, tunnels and queued requests are cut off.
const (
	stopAfter     = 3 * time.Second
	shutdownGrace = 500 * time.Millisecond
)

// TestChaosStopUnderAttack stops the daemon while the attackers and the
// legitimate clients are still running, gracefully (Shutdown with a short
// grace) or abruptly (Close): every listener must stop accepting at once,
// a reload must be refused, and once the clients have stopped every count
// must be zero and no goroutine left, as after an orderly end.
func TestChaosStopUnderAttack(t *testing.T) {
	tests := []struct {
		name string
		stop func(*daemon.Server) error
		ok   func(error) bool // what the stop may return
	}{
		{
			name: "Shutdown",
			stop: func(s *daemon.Server) error {
				ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
				defer cancel()
				return s.Shutdown(ctx)
			},
			ok: func(err error) bool { return err == nil || errors.Is(err, context.DeadlineExceeded) },
		},
		{
			name: "Close",
			stop: (*daemon.Server).Close,
			ok:   func(err error) bool { return err == nil },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seed := chooseSeed(t, "TestChaosStopUnderAttack/"+tt.name, stopAfter)
			before := goroutines()
			e := startEnv(t)
			tal := newTally()
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			var wg sync.WaitGroup
			e.startClients(ctx, &wg, seed, newRecord(time.Now()), tal)

			pause(ctx, stopAfter)
			admin := e.daemon.AdminAddr().String()
			err := tt.stop(e.daemon)
			t.Logf("%s under attack returned %v", tt.name, err)
			if !tt.ok(err) {
				t.Errorf("%s under attack: %v", tt.name, err)
			}
			e.checkStopped(t, admin)

			stop()
			if !waitGroup(&wg, stopWait) {
				t.Fatalf("clients did not stop within %v:\n%s", stopWait, strings.Join(leaked(before), "\n\n"))
			}
			t.Logf("attackers:\n%s", tal.summary())
			e.waitIdle(t)
			e.checkUpstreamClosed(t)
			e.stopBackends(t)
			if left := waitLeaks(before, leakWait); len(left) > 0 {
				t.Errorf("%d goroutines left %v after everything stopped:\n\n%s", len(left), leakWait, strings.Join(left, "\n\n"))
			}
			for _, v := range tal.violations {
				t.Errorf("violation: %s", v)
			}
		})
	}
}

// checkStopped checks, right after Shutdown or Close returned, that no
// listener accepts, the admin listener (which was at admin) included, and
// that the daemon refuses to be reloaded or stopped again.
func (e *env) checkStopped(t *testing.T, admin string) {
	t.Helper()
	for _, name := range []string{"web", "tls", "raw"} {
		if c, err := net.DialTimeout("tcp", e.addr(name), time.Second); err == nil {
			c.Close()
			t.Errorf("listener %s still accepts after the daemon stopped", name)
		}
	}
	if a := e.daemon.AdminAddr(); a != nil {
		t.Errorf("AdminAddr is %v after the daemon stopped, want nil", a)
	}
	if c, err := net.DialTimeout("tcp", admin, time.Second); err == nil {
		c.Close()
		t.Error("the admin listener still accepts after the daemon stopped")
	}
	if err := e.daemon.Reload(e.config()); !errors.Is(err, daemon.ErrClosed) {
		t.Errorf("reload after stop: %v, want daemon.ErrClosed", err)
	}
	if err := e.daemon.Close(); !errors.Is(err, daemon.ErrClosed) {
		t.Errorf("close after stop: %v, want daemon.ErrClosed", err)
	}
}
