package connlimit

import (
	"testing"

	"github.com/seed-a07d1050/portcullis/rate"
)

// A client refused for its connection rate has its SYNs dropped until its
// rate admits a connection again; then it gets in.
func TestSYNFilterRate(t *testing.T) {
	l := newTestListener(t, listenPlainTCP(t, "127.0.0.1:0"), Config{SYNFilter: true, ConnRate: rate.Limit{Rate: rate.PerSecond(1)}})
	echoServer(t, l)
	c := dialFrom(t, "127.0.0.35", l.Addr())
	mustServe(t, c, "127.0.0.35")
	c.Close()
	mustBeRefused(t, dialFrom(t, "127.0.0.35", l.Addr())) // within the second: refused at accept
	filteredWithin(t, l, 1)
	mustHang(t, "127.0.0.35", l.Addr())
	mustServe(t, dialFrom(t, "127.0.0.36", l.Addr()), "127.0.0.36")
	filteredWithin(t, l, 0) // about a second after the first connection
	mustServe(t, dialFrom(t, "127.0.0.35", l.Addr()), "127.0.0.35")
	if r := l.Stats().Refused.ClientRate; r != 1 {
		t.Fatalf("%d rate refusals; want 1 (the filtered attempt never reached Accept)", r)
	}
}
