package relay

import (
	"testing"
	"time"
)

func TestPoolSkipsDownUpstreams(t *testing.T) {
	p, err := NewPool([]string{"http://a:1", "http://b:1", "http://c:1"})
	if err != nil {
		t.Fatal(err)
	}
	p.MarkDown(p.ups[1])
	seen := map[string]int{}
	for range 30 {
		seen[p.PickExcept(nil).host]++
	}
	if seen["b:1"] != 0 || seen["a:1"] != 15 || seen["c:1"] != 15 {
		t.Fatalf("picks %v, want a and c in turn and never b", seen)
	}
	p.MarkDown(p.ups[0])
	p.MarkDown(p.ups[2])
	if u := p.PickExcept(nil); u == nil {
		t.Fatal("all down: want a guess rather than nothing")
	}
	if _, err := NewPool([]string{"ftp://x"}); err == nil {
		t.Fatal("ftp upstream accepted")
	}
}

func TestLogGateLetsOneLinePerInterval(t *testing.T) {
	g := &logGate{interval: time.Second}
	t0 := time.Unix(1000, 0)
	if ok, _ := g.allow(t0); !ok {
		t.Fatal("first line held back")
	}
	for range 5 {
		if ok, _ := g.allow(t0.Add(500 * time.Millisecond)); ok {
			t.Fatal("line let through within the interval")
		}
	}
	ok, held := g.allow(t0.Add(time.Second))
	if !ok || held != 5 {
		t.Fatalf("after the interval: %v with %d held, want true with 5", ok, held)
	}
}
