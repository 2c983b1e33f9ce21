package daemon_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// h2specPath finds h2spec (github.com/summerwind/h2spec, which .ci/run
// installs) on PATH or in GOPATH/bin. Without it the test is skipped, but
// fails under CI=true: a conformance test that never runs must not pass.
func h2specPath(t *testing.T) string {
	if p, err := exec.LookPath("h2spec"); err == nil {
		return p
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		home, _ := os.UserHomeDir()
		gopath = filepath.Join(home, "go")
	}
	if p := filepath.Join(gopath, "bin", "h2spec"); fileExists(p) {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("h2spec not found (go install github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible)")
	}
	t.Skip("h2spec not found on PATH or in GOPATH/bin")
	return ""
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// TestH2Spec runs h2spec's 145 HTTP/2 and HPACK cases against an https
// listener, with each HTTP/1.x server (HTTP/2 is the same x/net server
// behind internal/h2check either way), and wants every one to pass.
func TestH2Spec(t *testing.T) { bothServers(t, testH2Spec) }

func testH2Spec(t *testing.T) {
	bin := h2specPath(t)
	certFile, keyFile, _ := selfSigned(t)
	d := startDaemon(t, `
admin: {listen: "127.0.0.1:0"}
listeners:
  - name: tls
    protocol: https
    listen: "127.0.0.1:0"
    max_conns_per_client: 64
    tls: {cert_file: "`+certFile+`", key_file: "`+keyFile+`"}
    routes:
      - upstreams: ["{{backend}}"]
        limit: {permits: 8}
`)
	addr := d.srv.Addr("tls").(*net.TCPAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 4*waitLimit)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "-h", addr.IP.String(), "-p", strconv.Itoa(addr.Port),
		"-t", "-k", "-o", "2").CombinedOutput()
	m := regexp.MustCompile(`(\d+) tests, (\d+) passed, (\d+) skipped, (\d+) failed`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("h2spec gave no summary (%v):\n%s", err, out)
	}
	if string(m[1]) != "145" || string(m[2]) != "145" {
		t.Fatalf("h2spec: %s\n%s", m[0], out)
	}
}
