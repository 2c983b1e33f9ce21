package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/backend"
)

// TestQuickstart runs steps 1 to 8 of docs/quickstart.md as a reader would,
// with free ports in place of 8080, 9901 and 3000, and holds what each step
// prints to what the page shows.
func TestQuickstart(t *testing.T) {
	page := readQuickstart(t)

	// Step 1: version names the module.
	var out bytes.Buffer
	if code := (env{stdout: &out, stderr: io.Discard}).main([]string{"version"}); code != exitOK {
		t.Fatalf("version: exit %d", code)
	}
	page.shows(t, "./portcullis version")
	for _, line := range strings.Split(out.String(), "\n")[:2] {
		if strings.HasPrefix(line, "  module:") {
			page.shows(t, line)
		}
	}

	// Step 3: the configuration is examples/quickstart.yaml, word for word.
	block := page.yamlAfter(t, "<!-- portcullis: examples/quickstart.yaml -->")
	file, err := os.ReadFile("../../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if block != string(file) {
		t.Fatal("docs/quickstart.md's configuration differs from examples/quickstart.yaml")
	}

	// The reader's application, and the configuration on free ports.
	app, err := backend.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	proxyAddr, adminAddr := freeLoopbackAddr(t), freeLoopbackAddr(t)
	cfg := strings.NewReplacer(
		"127.0.0.1:8080", proxyAddr,
		"127.0.0.1:9901", adminAddr,
		"http://127.0.0.1:3000", app.URL(),
	).Replace(block)
	t.Chdir(t.TempDir())
	if err := os.WriteFile("portcullis.yaml", []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}

	// Step 4: check prints the effective configuration, starting as shown.
	out.Reset()
	page.shows(t, "./portcullis check --config portcullis.yaml")
	if code := (env{stdout: &out, stderr: io.Discard}).main([]string{"check", "--config", "portcullis.yaml"}); code != exitOK {
		t.Fatalf("check: exit %d", code)
	}
	shown := page.textAfter(t, "./portcullis check --config portcullis.yaml")
	shownHead, _, _ := strings.Cut(shown, "...\n")
	if !strings.HasPrefix(out.String(), shownHead) {
		t.Errorf("check prints\n%s\nthe page shows\n%s", firstLines(out.String(), 6), shownHead)
	}

	// Step 5: run, and five requests at once.
	sig := &signals{}
	logs := &syncBuffer{}
	_, code := startRun(t, []string{"run", "--config", "portcullis.yaml"}, sig, io.Discard, logs)
	started := strings.Replace(page.textAfter(t, "./portcullis run --config portcullis.yaml"), "127.0.0.1:9901", adminAddr, 1)
	// Each line the page shows is a line of the log, after its time.
	for _, line := range strings.Split(strings.TrimSpace(started), "\n") {
		if !waitFor(func() bool { return strings.Contains(logs.String(), line+"\n") }) {
			t.Errorf("the log lacks the page's start line %q:\n%s", line, logs.String())
		}
	}
	var codes []string
	for range 5 {
		resp, err := http.Get("http://" + proxyAddr + "/")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes = append(codes, fmt.Sprint(resp.StatusCode))
	}
	if want := strings.TrimSpace(page.textAfter(t, "http://127.0.0.1:8080/; done; echo")); strings.Join(codes, " ") != want {
		t.Errorf("five requests answered %v, the page shows %s", codes, want)
	}

	// Step 6: the refusal's access line has the page's fields and values,
	// but for the peer's port, the byte count and the time.
	wantLine := page.textAfter(t, "A refusal says\nwhich limit refused and why:")
	if !waitFor(func() bool { return strings.Contains(logs.String(), "status=429") }) {
		t.Fatalf("no access line for a 429:\n%s", logs.String())
	}
	var gotLine string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "msg=access") && strings.Contains(l, "status=429") {
			gotLine = l
			break
		}
	}
	got, want := logFields(gotLine), logFields(wantLine)
	if strings.Join(got.keys, " ") != strings.Join(want.keys, " ") {
		t.Errorf("access line fields\n%v\nthe page shows\n%v", got.keys, want.keys)
	}
	for _, k := range []string{"listener", "client", "key", "route", "method", "path", "proto", "status", "admission", "limit", "reason"} {
		if got.values[k] != want.values[k] {
			t.Errorf("access line %s=%s, the page shows %s", k, got.values[k], want.values[k])
		}
	}

	// Step 7: the live page answers, and the metric line is the page's.
	resp, err := http.Get("http://" + adminAddr + "/live/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/live/: %d", resp.StatusCode)
	}
	metric := strings.TrimSpace(page.textAfter(t, "grep '^portcullis_rate_refused_total'"))
	resp, err = http.Get("http://" + adminAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), metric+"\n") {
		t.Errorf("/metrics lacks the page's line %q", metric)
	}

	// Step 8: the edit, check, SIGHUP, and the page's reload line.
	page.shows(t, "sed -i 's/burst: 2,/burst: 10,/' portcullis.yaml")
	edited := strings.Replace(cfg, "burst: 2,", "burst: 10,", 1)
	if edited == cfg {
		t.Fatal("the page's sed changes nothing in the configuration")
	}
	if err := os.WriteFile("portcullis.yaml", []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	if c := (env{stdout: io.Discard, stderr: io.Discard}).main([]string{"check", "--config", "portcullis.yaml"}); c != exitOK {
		t.Fatalf("check after the edit: exit %d", c)
	}
	sig.send(syscall.SIGHUP)
	reloaded := strings.TrimSpace(page.textAfter(t, "kill -HUP \"$(pgrep -f 'portcullis run')\""))
	if !waitFor(func() bool { return strings.Contains(logs.String(), reloaded) }) {
		t.Errorf("the log lacks the page's reload line %q:\n%s", reloaded, logs.String())
	}

	sig.send(syscall.SIGTERM)
	if c := waitCode(t, code); c != exitOK {
		t.Errorf("run exited %d after SIGTERM", c)
	}
}

// quickstartPage is docs/quickstart.md.
type quickstartPage string

func readQuickstart(t *testing.T) quickstartPage {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "quickstart.md"))
	if err != nil {
		t.Fatal(err)
	}
	return quickstartPage(b)
}

// shows fails t unless the page holds s.
func (p quickstartPage) shows(t *testing.T, s string) {
	t.Helper()
	if !strings.Contains(string(p), s) {
		t.Errorf("docs/quickstart.md does not show %q", s)
	}
}

// yamlAfter returns the body of the yaml block that follows marker.
func (p quickstartPage) yamlAfter(t *testing.T, marker string) string {
	t.Helper()
	_, rest, ok := strings.Cut(string(p), marker+"\n```yaml\n")
	if !ok {
		t.Fatalf("docs/quickstart.md has no yaml block after %q", marker)
	}
	block, _, _ := strings.Cut(rest, "```\n")
	return block
}

// textAfter returns the body of the first text block after the text at.
func (p quickstartPage) textAfter(t *testing.T, at string) string {
	t.Helper()
	_, rest, ok := strings.Cut(string(p), at)
	if !ok {
		t.Fatalf("docs/quickstart.md does not show %q", at)
	}
	_, rest, ok = strings.Cut(rest, "```text\n")
	if !ok {
		t.Fatalf("docs/quickstart.md has no text block after %q", at)
	}
	block, _, _ := strings.Cut(rest, "```\n")
	return block
}

// accessFields is one log line's key=value fields, in order.
type accessFields struct {
	keys   []string
	values map[string]string
}

// logFields splits a text log line into its fields, leaving out time (the
// page shows none) and keeping quoted values whole.
func logFields(line string) accessFields {
	f := accessFields{values: map[string]string{}}
	for rest := strings.TrimSpace(line); rest != ""; {
		k, v, _ := strings.Cut(rest, "=")
		if strings.HasPrefix(v, `"`) {
			end := strings.Index(v[1:], `"`) + 2
			v, rest = v[:end], strings.TrimSpace(v[end:])
		} else {
			v, rest, _ = strings.Cut(v, " ")
		}
		if k != "time" {
			f.keys = append(f.keys, k)
			f.values[k] = v
		}
	}
	return f
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}

// freeLoopbackAddr returns a loopback address with a port free a moment ago.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
