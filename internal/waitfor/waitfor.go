// Package waitfor polls a condition in tests until it holds, with a limit
// on every wait, so that a test of something asynchronous (a goroutine
// that counts, a socket the kernel closes, a line a logger writes later)
// neither sleeps a guessed time nor hangs when the condition never comes.
//
// A wait is not a timed assertion: the limit only bounds how long a broken
// test takes to fail, and a passing test waits no longer than its
// condition takes. Waiting for a timer the test could fake is not what
// this is for: such a test runs in a testing/synctest bubble instead.
package waitfor

import (
	"testing"
	"time"
)

// Limit is how long [Cond] waits: long enough that a loaded 2-core CI
// machine running the race detector never reaches it while the condition
// is on its way.
const Limit = 10 * time.Second

// interval is how often a condition is polled: short beside what a test
// waits for, long enough not to starve on two cores what it waits on.
const interval = time.Millisecond

// Cond polls cond until it holds and returns; after [Limit] it fails t
// with "timed out after LIMIT waiting for WHAT" and stops the test
// (t.Fatalf), so it must be called from the test's goroutine.
func Cond(t testing.TB, what string, cond func() bool) {
	t.Helper()
	Within(t, Limit, what, cond)
}

// Within is [Cond] with a limit of its own, for a wait that is part of
// what a test bounds (a retry schedule, a drain's timeout). A limit of zero
// or less polls cond once.
func Within(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Until(limit, cond) {
		t.Fatalf("timed out after %v waiting for %s", limit, what)
	}
}

// Until polls cond until it holds or limit passes, and reports whether it
// held, for a caller that says itself what failed (or may run off the
// test's goroutine, where t.Fatalf must not be called). It always calls
// cond at least once.
func Until(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		if !time.Now().Before(deadline) {
			return false
		}
		time.Sleep(interval)
	}
	return true
}
