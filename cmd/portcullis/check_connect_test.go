package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/redistest"
)

// check --connect reaches the cluster's Redis as run would: it passes with
// the right password, fails (exit 1) saying "auth" with a wrong one and
// "refused" when nothing listens; plain check never connects.
func TestCheckConnect(t *testing.T) {
	redis := redistest.StartArgs(t, "--requirepass", "right-password")
	dir := t.TempDir()
	conf := func(addr, pw string) string {
		pwFile := filepath.Join(dir, pw+".pw")
		if err := os.WriteFile(pwFile, []byte(pw+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return writeFile(t, "cluster:\n  redis: {addrs: [\""+addr+"\"], password_file: \""+pwFile+"\"}\n"+
			"listeners:\n  - protocol: http\n    listen: 127.0.0.1:0\n    routes: [{upstreams: [\"http://127.0.0.1:1\"], limit: {}}]\n")
	}
	// A port nothing listens on: one a redis-server held and left.
	gone := redistest.Start(t)
	goneAddr := gone.Addr()
	gone.Stop()
	for _, tc := range []struct {
		name, file string
		connect    bool
		code       int
		want       string
	}{
		{"right password", conf(redis.Addr(), "right-password"), true, exitOK, "# --connect: redis " + redis.Addr() + " answered"},
		{"wrong password", conf(redis.Addr(), "wrong-password"), true, exitFailure, "(auth)"},
		{"nothing listening", conf(goneAddr, "right-password"), true, exitFailure, "(refused)"},
		{"without --connect", conf(goneAddr, "right-password"), false, exitOK, "is valid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"check", "--config", tc.file}
			if tc.connect {
				args = append(args, "--connect")
			}
			var out, errOut bytes.Buffer
			code := run(args, &out, &errOut)
			if code != tc.code || !strings.Contains(out.String()+errOut.String(), tc.want) {
				t.Fatalf("exit %d, want %d with %q; stdout:\n%s\nstderr:\n%s", code, tc.code, tc.want, out.String(), errOut.String())
			}
		})
	}
}
