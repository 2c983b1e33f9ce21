package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckAndRunRefuseWhatOnlyBuildingFinds gives check, run --config and run's flags files
// that config (a leaf) accepts and the daemon's build pass refuses: a deny_file line that is
// not an address, an htpasswd line whose hash is not bcrypt. Each command refuses them with
// the same message, placed at the field (or flag) that named the file, and run binds
// nothing.
func TestCheckAndRunRefuseWhatOnlyBuildingFinds(t *testing.T) {
	dir := t.TempDir()
	deny := filepath.Join(dir, "deny.list")
	users := filepath.Join(dir, "users.htpasswd")
	for file, text := range map[string]string{
		deny:  "# clients we refuse\n10.0.0.0/8\n10.1.2.3/8\n",
		users: "alice:$apr1$abc$0123456789abcdefghijkl\n",
	} {
		if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(dir, "p.yaml")
	text := `listeners:
  - name: web
    protocol: http
    listen: 127.0.0.1:0
    deny_file: ` + deny + `
    auth: {htpasswd: ` + users + `}
    routes:
      - upstreams: [http://127.0.0.1:9]
`
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	wantDeny := file + ":5:16: listeners[0].deny_file: " + deny + ":3: host bits set: write 10.0.0.0/8 for the network or 10.1.2.3/32 for the address (got \"10.1.2.3/8\")"
	wantAuth := file + ":6:22: listeners[0].auth.htpasswd: does not load: " + users + ":1: user \"alice\": the hash is Apache MD5 ($apr1$); only bcrypt is accepted"
	for _, args := range [][]string{{"check", "--config", file}, {"run", "--config", file}} {
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code != exitUsage {
			t.Fatalf("%s: exit %d, want %d\n%s", args[0], code, exitUsage, errOut.String())
		}
		lines := strings.Split(strings.TrimSpace(errOut.String()), "\n")
		if len(lines) != 2 || lines[0] != wantDeny || !strings.HasPrefix(lines[1], wantAuth) {
			t.Errorf("%s printed:\n%s\nwant the lines\n%s\n%s...", args[0], errOut.String(), wantDeny, wantAuth)
		}
	}
	var out, errOut bytes.Buffer
	code := run([]string{"run", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:9", "--deny-file", deny}, &out, &errOut)
	want := "portcullis run: --deny-file: " + deny + ":3: host bits set"
	if code != exitUsage || !strings.HasPrefix(errOut.String(), want) {
		t.Errorf("run --deny-file: exit %d, printed %q; want exit %d and %q...", code, errOut.String(), exitUsage, want)
	}
}
