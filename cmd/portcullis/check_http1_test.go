package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// check reads a retired http1_server name (lean, fast) as eventloop: the
// effective configuration it prints says eventloop, and it warns with the
// listener, the old value and what it now means.
func TestCheckRetiredHTTP1Server(t *testing.T) {
	file := filepath.Join(t.TempDir(), "p.yaml")
	text := `listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:8080"
    http1_server: fast
    routes: [{upstreams: ["http://127.0.0.1:9000"]}]
`
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"check", "--config", file}, &out, &errOut); code != exitOK {
		t.Fatalf("check: exit %d\n%s", code, errOut.String())
	}
	for _, want := range []string{
		"# WARNING: listener web: http1_server: fast is no longer a mode and now means eventloop, the default",
		"    http1_server: eventloop\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("check output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "http1_server: fast\n") {
		t.Errorf("check prints the retired name as the effective setting:\n%s", out.String())
	}
}
