package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// tableRow returns the cells of the row named name in the demo's table.
func tableRow(t *testing.T, out, name string) []string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), name); ok {
			return strings.Fields(rest)
		}
	}
	t.Fatalf("no row %q in:\n%s", name, out)
	return nil
}

func percent(t *testing.T, cell string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(strings.TrimSuffix(cell, "%"), 64)
	if err != nil {
		t.Fatalf("not a percentage: %q", cell)
	}
	return v
}

func TestDemoAttackCapsTheAttackerAndServesClients(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"demo", "--attack", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
		"--duration", "1500ms", "--warmup", "500ms", "--attack-conns", "120", "--backend-conns", "48"}, &out, &errOut)
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errOut.String())
	}
	text := out.String()
	refused := tableRow(t, text, "attacker connections refused")
	if n, _ := strconv.Atoi(refused[1]); n == 0 {
		t.Errorf("portcullis refused no attacker connection:\n%s", text)
	}
	held := tableRow(t, text, "attacker peak connections held")
	before, _ := strconv.Atoi(held[0])
	after, _ := strconv.Atoi(held[1])
	if after >= before {
		t.Errorf("attacker held %d connections through portcullis, %d without:\n%s", after, before, text)
	}
	sent := tableRow(t, text, "legitimate requests sent")
	served := tableRow(t, text, "legitimate requests served")
	for i := range 2 {
		s, _ := strconv.Atoi(sent[i])
		v, err := strconv.Atoi(served[i])
		if err != nil || v > s {
			t.Errorf("column %d: %q served of %q sent", i, served[i], sent[i])
		}
	}
	if n, _ := strconv.Atoi(served[1]); n == 0 {
		t.Errorf("no legitimate request served through portcullis:\n%s", text)
	}
	success := tableRow(t, text, "legitimate success rate")
	if bare, guarded := percent(t, success[0]), percent(t, success[1]); guarded < 95 || guarded <= bare {
		t.Errorf("legitimate success %.1f%% without and %.1f%% with portcullis, want ≥ 95%% and better:\n%s", bare, guarded, text)
	}
}

func TestDemoServesTheEmbeddedConfig(t *testing.T) {
	sig := &signals{}
	var out bytes.Buffer
	srv, code := startRun(t, []string{"demo", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, sig, &out)
	admin := srv.AdminAddr().String()
	for _, path := range []string{"/", "/slow?ms=1"} {
		resp, err := http.Get("http://" + srv.Addr("web").String() + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d %s", path, resp.StatusCode, body)
		}
	}
	sig.send(syscall.SIGINT)
	if c := waitCode(t, code); c != exitOK {
		t.Fatalf("exit code %d", c)
	}
	if !strings.Contains(out.String(), "Things to try") || !strings.Contains(out.String(), admin+"/debug/limits") {
		t.Errorf("demo printed no list of things to try:\n%s", out.String())
	}
}

// The try list's scenario for /slow does what its comment says: some get
// the refusal status at once, as many as the permits run, as many as the
// queue holds wait and then run.
func TestDemoSlowRouteHintHappens(t *testing.T) {
	sig := &signals{}
	var out syncBuffer
	srv, code := startRun(t, []string{"demo", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, sig, &out)
	defer func() {
		sig.send(syscall.SIGINT)
		waitCode(t, code)
	}()
	proxyURL := "http://" + srv.Addr("web").String()
	cfg, err := demoConfig(srv.Addr("web").String(), srv.AdminAddr().String(), "http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	hint, err := slowRouteHint(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if hint.run != 4 || hint.wait != 4 || hint.refused != 2 || hint.requests != 10 || hint.status != http.StatusTooManyRequests {
		t.Errorf("hint for the embedded configuration: %+v, want 4 run, 4 wait, 2 get 429 of 10", hint)
	}
	for _, want := range []string{hint.command(proxyURL), hint.outcome()} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("the try list lacks %q:\n%s", want, out.String())
		}
	}

	// Each curl of the command is a process with its own connection.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: waitLimit}
	type result struct{ status int }
	results := make(chan result, hint.requests)
	url := fmt.Sprintf("%s%s?ms=%d", proxyURL, hint.path, hint.ms)
	for range hint.requests {
		go func() {
			resp, err := client.Get(url)
			if err != nil {
				results <- result{-1}
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			results <- result{resp.StatusCode}
		}()
	}
	// While they run, the route's limiter shows the permits taken and the
	// queue full for this one client.
	sawQueue := waitFor(func() bool {
		for _, l := range srv.Snapshot().Listeners {
			for _, r := range l.Routes {
				if r.Name != "slow" || r.Limit == nil {
					continue
				}
				for _, k := range r.Limit.Busy {
					if k.InUse == hint.run && k.Waiting == hint.wait {
						return true
					}
				}
			}
		}
		return false
	})
	var order []int
	for range hint.requests {
		order = append(order, (<-results).status)
	}
	if !sawQueue {
		t.Errorf("the slow route never had %d in use and %d waiting", hint.run, hint.wait)
	}
	// The refused come first, at once; then every other request is served.
	want := slices.Repeat([]int{hint.status}, hint.refused)
	want = append(want, slices.Repeat([]int{http.StatusOK}, hint.run+hint.wait)...)
	if !slices.Equal(order, want) {
		t.Errorf("statuses in the order they came: %v, want %v", order, want)
	}
}

// The demo names the flag to change when its address is taken.
func TestDemoNamesTheFlagOfATakenPort(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"demo", "--listen", addr, "--admin", "127.0.0.1:0"}, "--listen"},
		{[]string{"demo", "--listen", "127.0.0.1:0", "--admin", addr}, "--admin"},
		{[]string{"demo", "--attack", "--listen", addr, "--admin", "127.0.0.1:0"}, "--listen"},
	} {
		var out, errOut bytes.Buffer
		done := make(chan int, 1)
		go func() { done <- run(tc.args, &out, &errOut) }()
		select {
		case code := <-done:
			if code != exitFailure {
				t.Errorf("%q: exit %d, want %d", tc.args, code, exitFailure)
			}
		case <-time.After(waitLimit):
			t.Fatalf("%q started on a taken port", tc.args)
		}
		want := addr + " is already in use (is another demo running?): choose another address with " + tc.flag
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("%q: stderr %q lacks %q", tc.args, errOut.String(), want)
		}
	}
}
