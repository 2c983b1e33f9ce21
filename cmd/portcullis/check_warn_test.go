package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// check prints the warnings of a valid configuration: a forward listener
// bound beyond loopback without auth or allow_file, an interception that
// does not verify its targets.
func TestCheckPrintsWarnings(t *testing.T) {
	abs, err := filepath.Abs(examplesDir + "/files")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "p.yaml")
	text := `listeners:
  - name: egress
    protocol: http
    listen: "0.0.0.0:3128"
    mode: forward
    forward:
      intercept:
        ca_cert: ` + abs + `/intercept-ca.pem
        ca_key: ` + abs + `/intercept-ca-key.pem
        upstream: {insecure_skip_verify_upstream: true}
`
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"check", "--config", file}, &out, &errOut); code != exitOK {
		t.Fatalf("check: exit %d\n%s", code, errOut.String())
	}
	for _, want := range []string{
		"# WARNING: listener egress: forward.allow_public_clients: the listener is bound beyond loopback (0.0.0.0:3128)",
		"# WARNING: listener egress: forward.intercept.upstream.insecure_skip_verify_upstream: true: the certificates of intercepted targets are not verified",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("check output lacks %q:\n%s", want, out.String())
		}
	}
}
