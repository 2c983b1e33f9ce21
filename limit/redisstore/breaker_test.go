package redisstore

import (
	"errors"
	"testing"
	"time"
)

func TestBreaker(t *testing.T) {
	var changes []string
	b := &breaker{threshold: 3, backoff: time.Second, onChange: func(from, to BreakerState, _ error) {
		changes = append(changes, from.String()+">"+to.String())
	}}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	boom := errors.New("boom")
	steps := []struct {
		name string
		do   func() bool // returns allow's answer where it asks
		want bool
		st   BreakerState
	}{
		{"closed allows", func() bool { return b.allow(t0) }, true, BreakerClosed},
		{"two failures stay closed", func() bool { b.failure(t0, boom); b.failure(t0, boom); return b.allow(t0) }, true, BreakerClosed},
		{"a success resets the run", func() bool { b.success(); b.failure(t0, boom); b.failure(t0, boom); return b.allow(t0) }, true, BreakerClosed},
		{"third in a row opens", func() bool { b.failure(t0, boom); return b.allow(t0) }, false, BreakerOpen},
		{"still open before backoff", func() bool { return b.allow(t0.Add(999 * time.Millisecond)) }, false, BreakerOpen},
		{"one probe after backoff", func() bool { return b.allow(t0.Add(time.Second)) }, true, BreakerHalfOpen},
		{"no second probe", func() bool { return b.allow(t0.Add(time.Second)) }, false, BreakerHalfOpen},
		{"failed probe reopens", func() bool { b.failure(t0.Add(time.Second), boom); return b.allow(t0.Add(1500 * time.Millisecond)) }, false, BreakerOpen},
		{"abandoned probe lets the next one probe", func() bool {
			b.allow(t0.Add(2 * time.Second))
			b.abandon()
			return b.allow(t0.Add(2 * time.Second))
		}, true, BreakerHalfOpen},
		{"successful probe closes", func() bool { b.success(); return b.allow(t0.Add(2 * time.Second)) }, true, BreakerClosed},
	}
	for _, s := range steps {
		if got := s.do(); got != s.want || b.current() != s.st {
			t.Fatalf("%s: allow = %v, state %v; want %v, %v", s.name, got, b.current(), s.want, s.st)
		}
	}
	want := []string{"closed>open", "half-open>open", "half-open>closed"}
	if len(changes) != len(want) {
		t.Fatalf("changes %v, want %v", changes, want)
	}
	for i := range want {
		if changes[i] != want[i] {
			t.Fatalf("changes %v, want %v", changes, want)
		}
	}
	if b.opens.Load() != 1 {
		t.Fatalf("opens = %d, want 1 (a failed probe re-opens, it does not count again)", b.opens.Load())
	}
}
