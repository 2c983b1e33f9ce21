package siege_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/backend"
	"github.com/seed-a07d1050/portcullis/internal/siege"
)

func runMain(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = siege.Main(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestMainUsage(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string // must contain
		stderr string // must contain
	}{
		{name: "help", args: []string{"-help"}, code: 0, stdout: "Usage: portcullis siege"},
		{name: "double-dash help", args: []string{"--help"}, code: 0, stdout: "-attack-conns"},
		{name: "no URL", args: nil, code: 2, stderr: "want exactly one URL"},
		{name: "two URLs", args: []string{"http://a/", "http://b/"}, code: 2, stderr: "want exactly one URL"},
		{name: "unknown flag", args: []string{"-bogus", "http://127.0.0.1/"}, code: 2, stderr: "-help"},
		{name: "bad duration", args: []string{"-duration", "soon", "http://127.0.0.1/"}, code: 2, stderr: "invalid value"},
		{name: "unknown scenario", args: []string{"-scenario", "ddos", "http://127.0.0.1/"}, code: 2, stderr: `unknown scenario "ddos"`},
		{name: "bad client address", args: []string{"-client-addr", "nope", "http://127.0.0.1/"}, code: 2, stderr: "-client-addr"},
		{name: "bad address list", args: []string{"-client-addrs", "1.2.3.4-1.2.3.1", "http://127.0.0.1/"}, code: 2, stderr: "-client-addrs"},
		{name: "bad attacker address", args: []string{"-attacker-addr", "x", "http://127.0.0.1/"}, code: 2, stderr: "-attacker-addr"},
		{name: "bound without baseline", args: []string{"-require-goodput", "0.99", "http://127.0.0.1/"}, code: 2, stderr: "need -baseline"},
		{name: "negative bound", args: []string{"-baseline", "-require-p99", "-1", "http://127.0.0.1/"}, code: 2, stderr: "≥ 0"},
		{name: "invalid config", args: []string{"-duration", "11m", "http://127.0.0.1/"}, code: 2, stderr: "Warmup+Duration"},
		{name: "bad scheme", args: []string{"ftp://127.0.0.1/"}, code: 2, stderr: "scheme"},
		{name: "unreachable", args: []string{"-client-addr", "192.0.2.1", "-duration", "1s", "http://127.0.0.1:1/"}, code: 1, stderr: "unreachable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runMain(tc.args...)
			if code != tc.code || !strings.Contains(out, tc.stdout) || !strings.Contains(errOut, tc.stderr) {
				t.Errorf("Main(%q) = %d\nstdout: %s\nstderr: %s\nwant %d, stdout with %q, stderr with %q",
					tc.args, code, out, errOut, tc.code, tc.stdout, tc.stderr)
			}
		})
	}
}

func TestMainRuns(t *testing.T) {
	b := startBackend(t, backend.Config{})
	t.Run("table", func(t *testing.T) {
		code, out, errOut := runMain("-duration", "300ms", "-clients", "2", b.URL()+"/")
		if code != 0 || !strings.Contains(out, "goodput") || errOut != "" {
			t.Errorf("code %d\nstdout: %s\nstderr: %s", code, out, errOut)
		}
	})
	t.Run("json", func(t *testing.T) {
		code, out, _ := runMain("-json", "-duration", "300ms", "-clients", "2", "-scenario", "slowloris", "-attack-conns", "5", b.URL()+"/")
		var rep siege.Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 {
			t.Fatalf("code %d, JSON %v:\n%s", code, err, out)
		}
		if rep.Scenario != siege.ScenarioSlowloris || rep.Attack == nil || rep.Attack.Slowloris != 5 || rep.Legit.Successes == 0 {
			t.Errorf("report does not reflect the flags: %+v", rep)
		}
	})
	t.Run("baseline json", func(t *testing.T) {
		code, out, _ := runMain("-json", "-baseline", "-duration", "300ms", "-clients", "2", "-scenario", "slow-requests", "-attack-conns", "4", b.URL()+"/")
		var got struct {
			Baseline, Run *siege.Report
			Comparison    siege.Comparison
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil || code != 0 {
			t.Fatalf("code %d, JSON %v:\n%s", code, err, out)
		}
		if got.Baseline == nil || got.Baseline.Scenario != siege.ScenarioNone || got.Baseline.Attack != nil || got.Run == nil || got.Run.Scenario != siege.ScenarioSlowRequests {
			t.Fatalf("baseline and run not as asked: %s", out)
		}
		if got.Comparison.GoodputRatio <= 0 || got.Comparison != siege.Compare(*got.Baseline, *got.Run) {
			t.Errorf("comparison %+v does not match Compare of the two reports", got.Comparison)
		}
	})
	t.Run("baseline table", func(t *testing.T) {
		code, out, _ := runMain("-baseline-target", b.URL()+"/", "-duration", "300ms", "-clients", "2", b.URL()+"/")
		for _, want := range []string{"== baseline ==", "== run ==", "== comparison ==", "ratio"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q (code %d):\n%s", want, code, out)
			}
		}
	})
	t.Run("missed bound", func(t *testing.T) {
		// No run can reach a hundred times its baseline's goodput, even when the machine stalls the baseline.
		code, _, errOut := runMain("-baseline", "-require-goodput", "100", "-duration", "300ms", "-clients", "2", b.URL()+"/")
		if code != 1 || !strings.Contains(errOut, "bound missed") {
			t.Errorf("code %d, stderr %s; want 1 and the bound named", code, errOut)
		}
	})
}
