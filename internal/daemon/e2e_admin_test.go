package daemon_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed-a07d1050/portcullis/internal/daemon"
)

const (
	adminToken      = "0123456789abcdef0123456789abcdef"
	adminTokenLater = "fedcba9876543210fedcba9876543210"
)

// writeToken writes token (with a trailing newline, as `openssl rand -hex 32
// > file` does) to file.
func writeToken(t *testing.T, file, token string) {
	t.Helper()
	if err := os.WriteFile(file, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// adminGet sends GET path to the daemon's admin listener with the given
// Authorization header ("" for none) and returns the response, body read.
func adminGet(t *testing.T, d *testDaemon, path, auth string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, d.adminURL(path), nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func adminTokenConfig(tokenFile string) string {
	admin := `admin: {listen: "127.0.0.1:0"}`
	if tokenFile != "" {
		admin = `admin: {listen: "127.0.0.1:0", token_file: "` + tokenFile + `"}`
	}
	return admin + `
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - upstreams: ["{{backend}}"]
`
}

// A reload reads the token file again: a rotated token replaces the old
// one at once, a configuration without token_file opens the endpoints, and
// an unusable token file is refused with the old token kept.
func TestAdminTokenFollowsReload(t *testing.T) { defaultServer(t, testAdminTokenFollowsReload) }

func testAdminTokenFollowsReload(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "admin.token")
	writeToken(t, tokenFile, adminToken)
	d := startDaemon(t, adminTokenConfig(tokenFile))
	d.manualStop = true
	status := func(auth string) int {
		resp, _ := adminGet(t, d, "/debug/limits", auth)
		return resp.StatusCode
	}
	if got := status("Bearer " + adminToken); got != http.StatusOK {
		t.Fatalf("with the token: %d", got)
	}

	writeToken(t, tokenFile, adminTokenLater)
	if err := d.srv.Reload(parseConfig(t, adminTokenConfig(tokenFile), d.backend.URL())); err != nil {
		t.Fatal(err)
	}
	if got := status("Bearer " + adminToken); got != http.StatusUnauthorized {
		t.Errorf("the old token after rotation: %d, want 401", got)
	}
	if got := status("Bearer " + adminTokenLater); got != http.StatusOK {
		t.Errorf("the new token after rotation: %d, want 200", got)
	}

	spoilt := parseConfig(t, adminTokenConfig(tokenFile), d.backend.URL()) // parsed while the file is good
	if err := os.WriteFile(tokenFile, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.srv.Reload(spoilt); err == nil {
		t.Fatal("a reload with an unusable token file was accepted")
	}
	if got := status("Bearer " + adminTokenLater); got != http.StatusOK {
		t.Errorf("the token in force after a refused reload: %d, want 200", got)
	}

	if err := d.srv.Reload(parseConfig(t, adminTokenConfig(""), d.backend.URL())); err != nil {
		t.Fatal(err)
	}
	if got := status(""); got != http.StatusOK {
		t.Errorf("without token_file: %d, want 200", got)
	}
}

// The daemon warns when its admin listener is reachable beyond loopback
// without a token: at start, and at a reload that moves it there or takes
// its token away; not on loopback, and not with a token.
func TestAdminExposureWarning(t *testing.T) { defaultServer(t, testAdminExposureWarning) }

func testAdminExposureWarning(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "admin.token")
	writeToken(t, tokenFile, adminToken)
	const warning = "admin listener reachable beyond loopback without admin.token_file"
	start := func(admin string) (*daemon.Server, *syncBuffer) {
		t.Helper()
		b := startBackend(t)
		var out syncBuffer
		srv, err := daemon.Start(parseConfig(t, admin+`
listeners:
  - name: web
    protocol: http
    listen: "127.0.0.1:0"
    routes:
      - upstreams: ["`+b.URL()+`"]
`, ""), daemon.Options{LogOutput: &out})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
		return srv, &out
	}
	for _, tc := range []struct {
		name, admin string
		warn        bool
	}{
		{"every interface without token", `admin: {listen: "0.0.0.0:0"}`, true},
		{"loopback without token", `admin: {listen: "127.0.0.1:0"}`, false},
		{"every interface with token", `admin: {listen: "0.0.0.0:0", token_file: "` + tokenFile + `"}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, out := start(tc.admin)
			if got := strings.Contains(out.String(), warning); got != tc.warn {
				t.Errorf("warning logged: %v, want %v:\n%s", got, tc.warn, out.String())
			}
		})
	}
	t.Run("reload takes the token away", func(t *testing.T) {
		srv, out := start(`admin: {listen: "0.0.0.0:0", token_file: "` + tokenFile + `"}`)
		port := srv.AdminAddr().String()[strings.LastIndex(srv.AdminAddr().String(), ":"):]
		b := startBackend(t)
		next := parseConfig(t, `admin: {listen: "0.0.0.0`+port+`"}
listeners:
  - name: web
    protocol: http
    listen: "`+srv.Addr("web").String()+`"
    routes:
      - upstreams: ["`+b.URL()+`"]
`, "")
		if err := srv.Reload(next); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), warning) || !strings.Contains(out.String(), "admin token changed") {
			t.Errorf("a reload that took the token away logged no warning:\n%s", out.String())
		}
	})
}
