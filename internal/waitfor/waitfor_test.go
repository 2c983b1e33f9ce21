package waitfor_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
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
// condition is polled until then.
func TestCondReturnsOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int64
	go func() {
		time.Sleep(20 * time.Millisecond)
		n.Store(1)
	}()
	polls := 0
	waitfor.Cond(t, "the store", func() bool { polls++; return n.Load() == 1 })
	if polls < 2 {
		t.Errorf("polled %d times, want the condition polled until it held", polls)
	}
}

// A condition that never holds fails the test after the limit, naming
// what was awaited and the limit.
func TestWithinFailsAfterItsLimit(t *testing.T) {
	start := time.Now()
	msg := run(func(tb testing.TB) {
		waitfor.Within(tb, 30*time.Millisecond, "nothing", func() bool { return false })
	})
	if !strings.Contains(msg, "timed out after") || !strings.Contains(msg, "nothing") || !strings.Contains(msg, "30ms") {
		t.Errorf("failed with %q, want the limit and what was awaited", msg)
	}
	if waited := time.Since(start); waited < 30*time.Millisecond {
		t.Errorf("gave up after %v, before its limit", waited)
	}
}

// Until reports the outcome instead of failing, and calls the condition
// at least once even with no time to wait.
func TestUntilReports(t *testing.T) {
	calls := 0
	if waitfor.Until(0, func() bool { calls++; return true }) != true || calls != 1 {
		t.Errorf("a condition that holds: %d calls", calls)
	}
	if waitfor.Until(5*time.Millisecond, func() bool { return false }) {
		t.Error("a condition that never holds reported as held")
	}
}
