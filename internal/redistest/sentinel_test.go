package redistest_test

import (
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/redistest"
)

// The helpers build a Sentinel setup whose failover takes seconds: a
// master, its replica and one Sentinel; the master killed, the Sentinel
// promotes the replica.
func TestSentinelFailover(t *testing.T) {
	m := redistest.Start(t)
	r := redistest.StartReplica(t, m)
	s := redistest.StartSentinel(t, "mm", m, 1)
	if got := s.MasterAddr("mm"); got != m.Addr() {
		t.Fatalf("master %q want %q", got, m.Addr())
	}
	start := time.Now()
	m.Kill()
	for s.MasterAddr("mm") != r.Addr() {
		if time.Since(start) > 15*time.Second {
			t.Fatalf("no failover; master %q", s.MasterAddr("mm"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("failover in %v", time.Since(start))
}
