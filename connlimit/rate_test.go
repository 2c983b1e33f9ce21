package connlimit

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/rate"
)

// A client that opens connections faster than its rate is refused at
// accept, like one over its cap, while other clients are not; only
// admitted connections count, and closing them gives nothing back (a rate
// is not a cap).
func TestConnRate(t *testing.T) {
	l := newTestListener(t, nil, Config{ConnRate: rate.Limit{Rate: rate.PerMinute(1), Burst: 2}})
	echoServer(t, l)
	for range 3 {
		c := dialFrom(t, "127.0.0.31", l.Addr())
		mustServe(t, c, "127.0.0.31")
		c.Close()
	}
	mustBeRefused(t, dialFrom(t, "127.0.0.31", l.Addr()))
	mustBeRefused(t, dialFrom(t, "127.0.0.31", l.Addr()))
	mustServe(t, dialFrom(t, "127.0.0.32", l.Addr()), "127.0.0.32")
	st := l.Stats()
	if st.Refused.ClientRate != 2 || st.Refused.ClientCap != 0 || st.Refused.Total() != 2 {
		t.Fatalf("refused %+v", st.Refused)
	}
	snap := l.RateSnapshot(0)
	if snap.Totals.Admitted != 4 || snap.Totals.Refused != 2 || len(snap.Keys) != 2 ||
		snap.Keys[0].Key != mustKey("127.0.0.31") || snap.Keys[0].Remaining != 0 {
		t.Fatalf("rate snapshot %+v", snap)
	}
	if tot := l.RateTotals(); tot.Admitted != 4 || tot.Refused != 2 || tot.Keys != 2 {
		t.Fatalf("rate totals %+v", tot)
	}
	waitFor(t, "connections to close", func() bool { return l.Stats().Open <= 1 })
}

// The rate applies after the caps: a connection refused by the cap does
// not spend the rate, and a rate refusal gives the cap's slot back.
func TestConnRateAfterCap(t *testing.T) {
	l := newTestListener(t, nil, Config{Policy: Policy{Permits: 1}, ConnRate: rate.Limit{Rate: rate.PerMinute(1), Burst: 1}})
	echoServer(t, l)
	held := dialFrom(t, "127.0.0.33", l.Addr())
	mustServe(t, held, "127.0.0.33")
	mustBeRefused(t, dialFrom(t, "127.0.0.33", l.Addr())) // the cap
	held.Close()
	waitFor(t, "the slot back", func() bool { return l.Stats().Open == 0 })
	c := dialFrom(t, "127.0.0.33", l.Addr()) // the rate's second (burst) place
	mustServe(t, c, "127.0.0.33")
	c.Close()
	waitFor(t, "the slot back", func() bool { return l.Stats().Open == 0 })
	mustBeRefused(t, dialFrom(t, "127.0.0.33", l.Addr())) // the rate
	st := l.Stats()
	if st.Refused.ClientCap != 1 || st.Refused.ClientRate != 1 || st.Open != 0 {
		t.Fatalf("stats %+v", st)
	}
	if n := l.levels[0].lim.Totals().InUse; n != 0 {
		t.Fatalf("%d cap slots held after a rate refusal", n)
	}
}

// Trusted peers are exempt from the rate as from the caps.
func TestConnRateTrustedExempt(t *testing.T) {
	l := newTestListener(t, nil, Config{ConnRate: rate.Limit{Rate: rate.PerMinute(1)}, Trusted: mustProxySet("127.0.0.34")})
	echoServer(t, l)
	for range 5 {
		c := dialFrom(t, "127.0.0.34", l.Addr())
		mustServe(t, c, "127.0.0.34")
		c.Close()
	}
}

func TestConnRateConfigErrors(t *testing.T) {
	one := rate.Limit{Rate: rate.PerSecond(1)}
	for name, cfg := range map[string]Config{
		"delay":             {ConnRate: rate.Limit{Rate: rate.PerSecond(1), Burst: 5, Delay: 2}},
		"invalid":           {ConnRate: rate.Limit{Rate: rate.PerSecond(1), Burst: -1}},
		"store alone":       {ConnRateStore: fakeRateStore{}},
		"syn with store":    {ConnRate: one, ConnRateStore: fakeRateStore{}, SYNFilter: true},
		"burst but no rate": {ConnRate: rate.Limit{Burst: 3}},
	} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if l, err := NewListener(ln, cfg); err == nil {
			l.Close()
			t.Errorf("%s: NewListener succeeded", name)
		}
		ln.Close()
	}
}

// fakeRateStore answers every request as told: admit, refuse, or fail.
type fakeRateStore struct {
	refuse bool
	err    error
}

func (s fakeRateStore) Reserve(context.Context, clientkey.Key, rate.Limit) (bool, time.Duration, error) {
	return !s.refuse && s.err == nil, time.Second, s.err
}
func (s fakeRateStore) TryReserve(clientkey.Key, rate.Limit) (bool, time.Duration, error) {
	return s.Reserve(context.Background(), clientkey.Key{}, rate.Limit{})
}
func (fakeRateStore) Cancel(clientkey.Key, rate.Limit) {}

// With ConnRateStore the cluster's answer decides, on the connection's
// own goroutine: a refusal is a rate refusal, a failure a store refusal.
func TestConnRateStore(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store fakeRateStore
		check func(Refused) bool
	}{
		{"admits", fakeRateStore{}, func(r Refused) bool { return r.Total() == 0 }},
		{"refuses", fakeRateStore{refuse: true}, func(r Refused) bool { return r.ClientRate == 1 && r.Total() == 1 }},
		{"fails", fakeRateStore{err: errors.New("redis down")}, func(r Refused) bool { return r.Store == 1 && r.Total() == 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newTestListener(t, nil, Config{ConnRate: rate.Limit{Rate: rate.PerSecond(100), Burst: 10}, ConnRateStore: tc.store})
			echoServer(t, l)
			c := dialFrom(t, "127.0.0.37", l.Addr())
			if tc.store.refuse || tc.store.err != nil {
				mustBeRefused(t, c)
			} else {
				mustServe(t, c, "127.0.0.37")
			}
			if r := l.Stats().Refused; !tc.check(r) {
				t.Fatalf("refused %+v", r)
			}
			if n := l.levels[0].lim.Totals().InUse; n != 0 && (tc.store.refuse || tc.store.err != nil) {
				t.Fatalf("%d cap slots held after a refusal", n)
			}
		})
	}
}

// BenchmarkClaimWithRate measures the accept path's admission (key, cap
// slot, rate decision, release) without sockets; it allocates nothing.
func BenchmarkClaimWithRate(b *testing.B) {
	for _, withRate := range []bool{false, true} {
		name := "rate=off"
		cfg := Config{Logger: slog.New(slog.DiscardHandler)}
		if withRate {
			name = "rate=on"
			cfg.ConnRate = rate.Limit{Rate: rate.PerSecond(1e9), Burst: 1 << 20}
		}
		b.Run(name, func(b *testing.B) {
			l, err := NewListener(newFakeListener(), cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			peer := netip.MustParseAddr("192.0.2.1")
			b.ReportAllocs()
			for b.Loop() {
				cl, why, _ := l.claim(context.Background(), false, peer, false)
				if why != admitted {
					b.Fatal(why)
				}
				cl.ps.release()
			}
		})
	}
}
