package redisstore

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// fakeBreaker stands for one Store's breaker state in OutageLog tests.
type fakeBreaker struct {
	state  BreakerState
	closed bool
}

func (b *fakeBreaker) get() (BreakerState, bool) { return b.state, b.closed }

// One outage across three Stores is one WARN when the first opens and one
// INFO when the last closes, naming them all; a Store closed while open
// leaves the outage without a recovery line.
func TestOutageLogOncePerOutage(t *testing.T) {
	var buf bytes.Buffer
	o := NewOutageLog(slog.New(slog.NewTextHandler(&buf, nil)))
	boom := errors.New("dial tcp: connection refused")
	stores := []*fakeBreaker{{}, {}, {}}
	names := []string{"web/connections", "web/api/limit", "web/client_limit"}
	set := func(i int, st BreakerState) {
		stores[i].state = st
		o.changed(uint64(i), names[i], stores[i].get, Closed, time.Second, boom)
	}
	count := func(msg string) int { return strings.Count(buf.String(), msg) }

	set(0, BreakerOpen)
	set(1, BreakerOpen)
	set(1, BreakerHalfOpen) // a probe
	set(1, BreakerOpen)     // failed
	set(2, BreakerOpen)
	set(0, BreakerClosed)
	set(1, BreakerClosed)
	if n := count("redis unavailable"); n != 1 {
		t.Fatalf("%d outage lines for one outage, want 1:\n%s", n, buf.String())
	}
	if n := count("reachable again"); n != 0 {
		t.Fatalf("recovery logged while a breaker is still open:\n%s", buf.String())
	}
	set(2, BreakerClosed)
	if n := count("reachable again"); n != 1 {
		t.Fatalf("%d recovery lines, want 1:\n%s", n, buf.String())
	}
	for _, want := range []string{"store=web/connections", "on_error=closed", "error=\"dial tcp: connection refused\"",
		"stores=\"[web/connections web/api/limit web/client_limit]\"", "count=3"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, buf.String())
		}
	}

	// A second outage is logged again; the Store closed during it leaves
	// it quietly, and a state change it reports after Close is ignored.
	buf.Reset()
	set(0, BreakerOpen)
	stores[0].closed = true
	o.forget(0)
	set(0, BreakerClosed)
	set(1, BreakerOpen)
	if n := count("redis unavailable"); n != 2 {
		t.Fatalf("%d outage lines for two outages, want 2:\n%s", n, buf.String())
	}
	if n := count("reachable again"); n != 0 {
		t.Fatalf("a closed Store ended the outage as a recovery:\n%s", buf.String())
	}
	set(1, BreakerClosed)
	if n := count("reachable again"); n != 1 || !strings.Contains(buf.String(), "count=1") {
		t.Fatalf("recovery of the second outage:\n%s", buf.String())
	}
}

// Current follows the breakers: the count of those open and when the
// outage began, back to zero once the last one closes.
func TestOutageLogCurrent(t *testing.T) {
	o := NewOutageLog(slog.New(slog.DiscardHandler))
	stores := []*fakeBreaker{{}, {}}
	set := func(i int, st BreakerState) {
		stores[i].state = st
		o.changed(uint64(i), "store", stores[i].get, Closed, time.Second, errors.New("down"))
	}
	if n, since := o.Current(); n != 0 || !since.IsZero() {
		t.Fatalf("before any outage: %d open since %v", n, since)
	}
	before := time.Now()
	set(0, BreakerOpen)
	set(1, BreakerHalfOpen)
	n, since := o.Current()
	if n != 2 || since.Before(before) || since.After(time.Now()) {
		t.Fatalf("two breakers open: Current() = %d, %v (outage began after %v)", n, since, before)
	}
	set(0, BreakerClosed)
	if n, again := o.Current(); n != 1 || !again.Equal(since) {
		t.Fatalf("one still open: Current() = %d, %v, want 1, %v", n, again, since)
	}
	set(1, BreakerClosed)
	if n, since := o.Current(); n != 0 || !since.IsZero() {
		t.Fatalf("after the outage: %d open since %v", n, since)
	}
}
