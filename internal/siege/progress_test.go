package siege_test

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seed-a07d1050/portcullis/internal/backend"
	"github.com/seed-a07d1050/portcullis/internal/logtest"
	"github.com/seed-a07d1050/portcullis/internal/siege"
)

var (
	warmupLine    = regexp.MustCompile(`^siege: \d+s/\d+s warm-up, attacker alone: attacker holds (\d+) connections, (\d+) refused$`)
	measuringLine = regexp.MustCompile(`^siege: \d+s/\d+s measuring: (\d+) requests, (\d+) succeeded \((?:-|[\d.]+%)\); attacker holds (\d+) connections, (\d+) refused$`)
)

// A run with Progress set writes a line per ProgressInterval: first the
// attacker alone, then the legitimate clients' counts, which only grow and
// never pass what the report counts in the end.
func TestProgressLines(t *testing.T) {
	ln := newCappedListener(t, attackerIP, 4)
	srv, err := backend.Serve(ln, backend.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var out logtest.Buffer
	rep := runChecked(t, t.Context(), siege.Config{
		Target:           srv.URL() + "/",
		Scenario:         siege.ScenarioSlowloris,
		Warmup:           400 * time.Millisecond,
		Duration:         800 * time.Millisecond,
		Clients:          2,
		AttackConns:      10,
		Grace:            100 * time.Millisecond,
		MaxConnectRate:   200,
		Progress:         &out,
		ProgressInterval: 100 * time.Millisecond,
	})
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	var warm, measuring int
	var lastRequests, lastSuccesses uint64
	for _, line := range lines {
		if warmupLine.MatchString(line) {
			if measuring > 0 {
				t.Errorf("warm-up line after a measuring line: %q", line)
			}
			warm++
			continue
		}
		m := measuringLine.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("progress line %q has neither expected shape", line)
			continue
		}
		measuring++
		requests, _ := strconv.ParseUint(m[1], 10, 64)
		successes, _ := strconv.ParseUint(m[2], 10, 64)
		if requests < lastRequests || successes < lastSuccesses || successes > requests {
			t.Errorf("counts went from %d/%d to %d/%d: %q", lastSuccesses, lastRequests, successes, requests, line)
		}
		lastRequests, lastSuccesses = requests, successes
		if held, _ := strconv.Atoi(m[3]); held > 4 {
			t.Errorf("the attacker holds %d connections in %q, more than the server's cap of 4", held, line)
		}
	}
	// 1.2 s at one line per 100 ms: about 3 warm-up and 8 measuring lines,
	// fewer on a loaded machine, never none of either.
	if warm == 0 || measuring < 2 {
		t.Errorf("%d warm-up and %d measuring lines, want some of each:\n%s", warm, measuring, out.String())
	}
	if lastRequests > rep.Legit.Requests || lastSuccesses > rep.Legit.Successes || lastRequests == 0 {
		t.Errorf("last progress %d/%d, report %d/%d", lastSuccesses, lastRequests, rep.Legit.Successes, rep.Legit.Requests)
	}
	// Nothing is written once Run has returned.
	n := len(out.String())
	time.Sleep(250 * time.Millisecond)
	if len(out.String()) != n {
		t.Errorf("progress written after Run returned:\n%s", out.String()[n:])
	}
}

func TestProgressIntervalMustNotBeNegative(t *testing.T) {
	_, err := siege.Run(t.Context(), siege.Config{Target: "http://127.0.0.1:1/", ProgressInterval: -time.Second})
	if err == nil || !strings.Contains(err.Error(), "ProgressInterval") {
		t.Fatalf("Run with a negative ProgressInterval: %v", err)
	}
}

// Main prints progress to stderr on a run longer than two seconds, and not
// with -progress=false; stdout keeps the report alone.
func TestMainProgress(t *testing.T) {
	b := startBackend(t, backend.Config{})
	code, out, errOut := runMain("-json", "-duration", "2500ms", "-clients", "1", b.URL()+"/")
	if code != 0 || !strings.HasPrefix(out, "{") {
		t.Fatalf("code %d, stdout %q", code, out)
	}
	if n := strings.Count(errOut, "siege: "); n < 2 {
		t.Errorf("%d progress lines on stderr over 2.5 s, want 2:\n%s", n, errOut)
	}
	code, _, errOut = runMain("-progress=false", "-duration", "2500ms", "-clients", "1", b.URL()+"/")
	if code != 0 || errOut != "" {
		t.Errorf("-progress=false: code %d, stderr %q", code, errOut)
	}
	code, _, errOut = runMain("-duration", "300ms", "-clients", "1", b.URL()+"/")
	if code != 0 || errOut != "" {
		t.Errorf("a 300ms run: code %d, stderr %q, want no progress", code, errOut)
	}
}
