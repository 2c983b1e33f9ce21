package waitfor_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/waitfor"
)

// fatalT records a Fatalf instead of stopping the test, so that a failing
// wait can be checked; it ends the calling goroutine as t.Fatalf does.
type fatalT struct {
	testing.TB
	msg string
}

func (f *fatalT) Helper() {}

func (f *fatalT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(f)
}

// run calls wait with a fatalT and returns what it failed with, "" if it
// returned.
func run(wait func(t testing.TB)) (msg string) {
	f := &fatalT{TB: nil}
	defer func() {
		if r := recover(); r != nil {
			if r != f {
				panic(r)
			}
			msg = f.msg
		}
	}()
	wait(f)
	return ""
}

// A condition that comes true on another goroutine ends the wait, and the
// condition is polled until then (in a synctest bubble: fake time).
func TestCondReturnsOnceTheConditionHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int64
		go func() {
			time.Sleep(20 * time.Millisecond)
			n.Store(1)
		}()
		start := time.Now()
		polls := 0
		waitfor.Cond(t, "the store", func() bool { polls++; return n.Load() == 1 })
		if polls < 2 || time.Since(start) < 20*time.Millisecond {
			t.Errorf("returned after %d polls and %v, want polls until the store 20ms in", polls, time.Since(start))
		}
	})
}

// A condition that never holds fails the test once the limit has passed,
// not before, naming what was awaited and the limit.
func TestWithinFailsAfterItsLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		msg := run(func(tb testing.TB) {
			waitfor.Within(tb, 30*time.Millisecond, "nothing", func() bool { return false })
		})
		if !strings.Contains(msg, "timed out after 30ms waiting for nothing") {
			t.Errorf("failed with %q, want the limit and what was awaited", msg)
		}
		if waited := time.Since(start); waited < 30*time.Millisecond {
			t.Errorf("gave up after %v, before its limit", waited)
		}
	})
}

// Until reports the outcome instead of failing, and calls the condition
// at least once even with no time to wait.
func TestUntilReports(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls := 0
		if !waitfor.Until(0, func() bool { calls++; return true }) || calls != 1 {
			t.Errorf("a condition that holds: %d calls", calls)
		}
		calls = 0
		if waitfor.Until(0, func() bool { calls++; return false }) || calls != 1 {
			t.Errorf("no time to wait: %d calls, want the condition called once", calls)
		}
		if waitfor.Until(5*time.Millisecond, func() bool { return false }) {
			t.Error("a condition that never holds reported as held")
		}
	})
}
