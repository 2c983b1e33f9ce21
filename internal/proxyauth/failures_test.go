package proxyauth

import (
	"net/netip"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/clientkey"
	"github.com/seed-a07d1050/portcullis/limit/limittest"
)

func TestFailureLimiterBudget(t *testing.T) {
	clock := limittest.NewClock()
	fl, err := NewFailureLimiter(FailureConfig{Burst: 3, Interval: time.Second, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	a := clientkey.FromAddr(netip.MustParseAddr("192.0.2.1"))
	b := clientkey.FromAddr(netip.MustParseAddr("192.0.2.2"))
	for i := range 3 {
		if ok, _ := fl.Allow(a); !ok {
			t.Fatalf("refused before failure %d", i+1)
		}
		fl.Fail(a)
	}
	ok, wait := fl.Allow(a)
	if ok || wait != time.Second {
		t.Fatalf("after the burst: allowed %v, wait %v; want refused for 1s", ok, wait)
	}
	if ok, _ := fl.Allow(b); !ok {
		t.Fatal("another client refused")
	}
	clock.Advance(999 * time.Millisecond)
	if ok, _ := fl.Allow(a); ok {
		t.Fatal("allowed before an interval passed")
	}
	clock.Advance(time.Millisecond)
	if ok, _ := fl.Allow(a); !ok {
		t.Fatal("refused once an interval passed")
	}
	fl.Fail(a)
	if ok, _ := fl.Allow(a); ok {
		t.Fatal("allowed right after spending the interval earned")
	}
	clock.Advance(3 * time.Second)
	for i := range 3 {
		if ok, _ := fl.Allow(a); !ok {
			t.Fatalf("whole budget not back: refused at failure %d", i+1)
		}
		fl.Fail(a)
	}
}

func TestFailureLimiterMemoryBound(t *testing.T) {
	clock := limittest.NewClock()
	fl, err := NewFailureLimiter(FailureConfig{Burst: 2, Interval: time.Second, MaxKeys: failureShards * 4, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	table := fl.(*failureTable)
	for i := range 10000 {
		k := clientkey.FromAddr(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}))
		fl.Fail(k)
	}
	if n := table.keys(); n > failureShards*4 {
		t.Fatalf("%d clients remembered, bound %d", n, failureShards*4)
	}
	// Budgets that are whole again are forgotten first.
	clock.Advance(time.Hour)
	fl.Fail(clientkey.FromAddr(netip.MustParseAddr("192.0.2.9")))
	if n := table.keys(); n > failureShards*4 {
		t.Fatalf("%d clients remembered after expiry", n)
	}
}

func TestFailureLimiterConfig(t *testing.T) {
	for _, cfg := range []FailureConfig{{Burst: -1}, {Interval: -1}, {MaxKeys: -1}} {
		if _, err := NewFailureLimiter(cfg); err == nil {
			t.Errorf("accepted %+v", cfg)
		}
	}
}

func TestFailureConfigErrors(t *testing.T) {
	for _, cfg := range []FailureConfig{
		{Burst: -1}, {Interval: -1}, {MaxKeys: -1},
		{Burst: 1 << 40, Interval: time.Hour}, // burst × interval overflows
	} {
		if _, err := NewFailureLimiter(cfg); err == nil {
			t.Errorf("NewFailureLimiter(%+v) succeeded", cfg)
		}
	}
}
