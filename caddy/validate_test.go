package caddyportcullis_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The Caddyfile in docs/caddy.md is testdata/Caddyfile, and `caddy
// validate` of a Caddy built with this module (cmd/caddy-portcullis, what
// xcaddy builds) accepts it.
func TestDocumentedCaddyfileValidates(t *testing.T) {
	documented, err := os.ReadFile("testdata/Caddyfile")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../docs/caddy.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "```caddyfile\n"+string(documented)+"```\n") {
		t.Fatal("docs/caddy.md does not show testdata/Caddyfile verbatim in a caddyfile block")
	}
	if testing.Short() {
		t.Skip("-short: not building the caddy binary")
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("go not on PATH: %v", err)
		}
		t.Skipf("go not on PATH: %v", err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "caddy")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command(goCmd, append(args, "./cmd/caddy-portcullis")...)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/caddy-portcullis: %v\n%s", err, out)
	}
	// Caddy keeps its data under HOME and the XDG directories.
	env := append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	validate := func(file string) (string, error) {
		cmd := exec.Command(bin, "validate", "--config", file, "--adapter", "caddyfile")
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := validate("testdata/Caddyfile"); err != nil || !strings.Contains(out, "Valid configuration") {
		t.Fatalf("caddy validate refused the documented Caddyfile: %v\n%s", err, out)
	}
	// And it refuses a bad one, naming the problem.
	bad := filepath.Join(dir, "Caddyfile.bad")
	if err := os.WriteFile(bad, []byte(strings.Replace(string(documented), "permits 2", "permits 0", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := validate(bad); err == nil || !strings.Contains(out, "want a whole number ≥ 1") {
		t.Fatalf("caddy validate accepted permits 0: %v\n%s", err, out)
	}
}
