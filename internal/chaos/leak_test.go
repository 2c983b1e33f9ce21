package chaos

import (
	"bytes"
	"regexp"
	"runtime/pprof"
	"strings"
	"time"
)

// goroutines returns every goroutine's stack by goroutine id, as
// runtime/pprof's goroutine profile prints it with debug=2.
func goroutines() map[string]string {
	var buf bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&buf, 2)
	out := make(map[string]string)
	for _, g := range strings.Split(buf.String(), "\n\n") {
		if m := goroutineID.FindStringSubmatch(g); m != nil {
			out[m[1]] = strings.TrimSpace(g)
		}
	}
	return out
}

var goroutineID = regexp.MustCompile(`^goroutine (\d+) \[`)

// framework are frames of goroutines that belong to the testing framework
// or the runtime, or live as long as the process by design, not to the
// code under test.
var framework = []string{
	"testing.(*T).Run",
	"testing.tRunner",
	"testing.runTests",
	"testing.(*M).",
	"testing.(*T).Parallel",
	"os/signal.signal_recv",
	"runtime.ensureSigM",
	"runtime/pprof.(*profileBuilder)",
	// internal/http1's kernel watch: one goroutine for the whole process,
	// started with the first connection it watches and kept on purpose.
	"internal/http1.(*peerWatcher).init",
}

func isFramework(stack string) bool {
	for _, f := range framework {
		if strings.Contains(stack, f) {
			return true
		}
	}
	return false
}

// leaked returns the stacks of the goroutines that did not exist in before
// (goroutine ids are never reused), leaving out the framework's.
func leaked(before map[string]string) []string {
	var out []string
	for id, stack := range goroutines() {
		if _, ok := before[id]; ok || isFramework(stack) {
			continue
		}
		out = append(out, stack)
	}
	return out
}

// waitLeaks polls until no goroutine started since before is left, or wait
// passes; it returns what is left then.
func waitLeaks(before map[string]string, wait time.Duration) []string {
	deadline := time.Now().Add(wait)
	for {
		left := leaked(before)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(20 * time.Millisecond)
	}
}
