package main

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
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
